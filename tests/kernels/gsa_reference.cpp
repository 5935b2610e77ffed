// Dense masked graph attention in double precision: forward and hand-derived backward, loops only.
#include "tests/kernels/gsa_reference.h"

#include <cmath>
#include <limits>

namespace sb::test {

DenseMask::DenseMask(const Graph& g)
    : N(g.n_nodes()), mask(static_cast<size_t>(N * N), 0), rel(static_cast<size_t>(N * N), -1) {
  for (int64_t u = 0; u < N; ++u) {
    for (int64_t e = g.row_ptr[u]; e < g.row_ptr[u + 1]; ++e) {
      mask[u * N + g.col[e]] = 1;
      rel[u * N + g.col[e]] = g.rel[e];
    }
  }
}

RefResult reference_attention(const RefProblem& p, const DenseMask& m, const std::vector<double>& d_o) {
  const int64_t B = p.B, N = p.N, H = p.H, D = p.D;
  const bool has_rel = !p.rel_emb.empty();
  const bool backward = !d_o.empty();
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  auto idx = [&](int64_t b, int64_t n, int64_t h, int64_t d) { return ((b * N + n) * H + h) * D + d; };
  RefResult r;
  r.o.assign(static_cast<size_t>(B * N * H * D), 0.0);
  r.lse.assign(static_cast<size_t>(B * N * H), -std::numeric_limits<double>::infinity());
  if (backward) {
    r.dq.assign(r.o.size(), 0.0);
    r.dk.assign(r.o.size(), 0.0);
    r.dv.assign(r.o.size(), 0.0);
    r.d_rel.assign(p.rel_emb.size(), 0.0);
  }
  std::vector<double> s(static_cast<size_t>(N)), a(static_cast<size_t>(N)), ds(static_cast<size_t>(N));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t u = 0; u < N; ++u) {
        // scores of the masked entries
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t v = 0; v < N; ++v) {
          if (!m.mask[u * N + v]) continue;
          double acc = 0.0;
          for (int64_t d = 0; d < D; ++d) {
            const double key = p.k[idx(b, v, h, d)] + (has_rel ? p.rel_emb[m.rel[u * N + v] * D + d] : 0.0);
            acc += p.q[idx(b, u, h, d)] * key;
          }
          s[v] = acc * scale;
          mx = std::max(mx, s[v]);
        }
        if (mx == -std::numeric_limits<double>::infinity()) continue;  // no sources: o = 0
        double sum = 0.0;
        for (int64_t v = 0; v < N; ++v) {
          a[v] = m.mask[u * N + v] ? std::exp(s[v] - mx) : 0.0;
          sum += a[v];
        }
        for (int64_t v = 0; v < N; ++v) a[v] /= sum;
        r.lse[(b * N + u) * H + h] = mx + std::log(sum);
        for (int64_t v = 0; v < N; ++v) {
          if (!m.mask[u * N + v]) continue;
          for (int64_t d = 0; d < D; ++d) r.o[idx(b, u, h, d)] += a[v] * p.v[idx(b, v, h, d)];
        }
        if (!backward) continue;
        // d a_v = d_o . v_v;  d s_v = a_v (d a_v - sum_w a_w d a_w)
        double dot_sum = 0.0;
        for (int64_t v = 0; v < N; ++v) {
          if (!m.mask[u * N + v]) continue;
          double da = 0.0;
          for (int64_t d = 0; d < D; ++d) da += d_o[idx(b, u, h, d)] * p.v[idx(b, v, h, d)];
          ds[v] = da;
          dot_sum += a[v] * da;
        }
        for (int64_t v = 0; v < N; ++v) {
          if (!m.mask[u * N + v]) continue;
          const double dsv = a[v] * (ds[v] - dot_sum) * scale;  // gradient of the unscaled dot product
          for (int64_t d = 0; d < D; ++d) {
            const int32_t rid = has_rel ? m.rel[u * N + v] : 0;
            const double key = p.k[idx(b, v, h, d)] + (has_rel ? p.rel_emb[rid * D + d] : 0.0);
            r.dq[idx(b, u, h, d)] += dsv * key;
            r.dk[idx(b, v, h, d)] += dsv * p.q[idx(b, u, h, d)];
            if (has_rel) r.d_rel[rid * D + d] += dsv * p.q[idx(b, u, h, d)];
            r.dv[idx(b, v, h, d)] += a[v] * d_o[idx(b, u, h, d)];
          }
        }
      }
    }
  }
  return r;
}

}  // namespace sb::test
