// Per-edge graph-attention math shared by the CPU and CUDA kernels (host and device inline functions).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#if defined(__CUDACC__)
#define SB_HD __host__ __device__ __forceinline__
#else
#define SB_HD inline
#endif

namespace sb {

// Accumulation type: fp32 for fp32 and the half types, fp64 for fp64.
template <typename T> struct GsaAcc { using type = float; };
template <> struct GsaAcc<double> { using type = double; };

template <typename A> SB_HD A gsa_neg_inf() { return -std::numeric_limits<A>::infinity(); }

SB_HD float gsa_exp(float x) {
#if defined(__CUDA_ARCH__)
  return __expf(x);
#else
  return std::exp(x);
#endif
}
SB_HD double gsa_exp(double x) { return exp(x); }
SB_HD float gsa_log(float x) { return logf(x); }
SB_HD double gsa_log(double x) { return log(x); }

// Online softmax state of one (row, head): running max m and normaliser l relative to m.
template <typename A>
struct GsaSoftmaxState {
  A m;
  A l;
};

template <typename A> SB_HD GsaSoftmaxState<A> gsa_softmax_init() { return {gsa_neg_inf<A>(), A(0)}; }

// Factor by which sums taken relative to m_old must be scaled to be relative to m_new (m_new >= m_old).
// m_old = -inf (nothing seen yet) gives 0 rather than exp(nan).
template <typename A> SB_HD A gsa_rescale(A m_old, A m_new) {
  return m_old == gsa_neg_inf<A>() ? A(0) : gsa_exp(m_old - m_new);
}

// Adds one edge of scaled score s to st; returns the factor by which the running sums (l is done here, the
// output accumulator is the caller's) are rescaled, and the edge's weight exp(s - m) for its value row.
template <typename A>
struct GsaPush {
  A alpha;
  A weight;
};
template <typename A> SB_HD GsaPush<A> gsa_push(GsaSoftmaxState<A>& st, A s) {
  const A m_new = s > st.m ? s : st.m;
  const GsaPush<A> f{gsa_rescale(st.m, m_new), gsa_exp(s - m_new)};
  st.l = st.l * f.alpha + f.weight;
  st.m = m_new;
  return f;
}

// Adds U edges at once (those with valid[j] false are skipped): one rescale of the running sums for all of them
// (returned) and each edge's weight exp(s_j - m) in w (0 for a skipped one).
template <int U, typename A>
SB_HD A gsa_push_block(GsaSoftmaxState<A>& st, const A (&s)[U], const bool (&valid)[U], A (&w)[U]) {
  A m_new = st.m;
  for (int j = 0; j < U; ++j) m_new = valid[j] && s[j] > m_new ? s[j] : m_new;
  const A alpha = gsa_rescale(st.m, m_new);
  A l = st.l * alpha;
  for (int j = 0; j < U; ++j) {
    w[j] = valid[j] ? gsa_exp(s[j] - m_new) : A(0);
    l += w[j];
  }
  st.l = l;
  st.m = m_new;
  return alpha;
}

// Merges into st the state of a disjoint set of edges of the same row (a split row's pieces, a warp's lane
// groups); returns the factors for st's own accumulator and for the other's (0 for a side that saw nothing).
template <typename A>
struct GsaMerge {
  A self;
  A other;
};
template <typename A> SB_HD GsaMerge<A> gsa_merge(GsaSoftmaxState<A>& st, const GsaSoftmaxState<A>& other) {
  const A m = other.m > st.m ? other.m : st.m;
  const GsaMerge<A> f{gsa_rescale(st.m, m), gsa_rescale(other.m, m)};
  st.l = st.l * f.self + other.l * f.other;
  st.m = m;
  return f;
}

// log-sum-exp of a finished row; -inf when the row has no sources.
template <typename A> SB_HD A gsa_lse(const GsaSoftmaxState<A>& st) {
  return st.l > A(0) ? st.m + gsa_log(st.l) : gsa_neg_inf<A>();
}

// 1 / l for the output normalisation; 0 for an empty row so its output is zero.
template <typename A> SB_HD A gsa_inv_norm(const GsaSoftmaxState<A>& st) { return st.l > A(0) ? A(1) / st.l : A(0); }

// Attention probability of an edge from its scaled score and the row's lse (backward recomputation).
template <typename A> SB_HD A gsa_prob(A s, A lse) { return gsa_exp(s - lse); }

// dS = P * (dP - delta), dP = dO . v, delta = dO . O.
template <typename A> SB_HD A gsa_dscore(A p, A dp, A delta) { return p * (dp - delta); }

}  // namespace sb
