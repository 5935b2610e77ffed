// The graph-attention parity table and the helpers shared by the CPU, op and CUDA tests.
#include "tests/kernels/gsa_cases.h"

#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <functional>
#include <limits>
#include <random>

#include "kernels/gsa_host_graph.h"
#include "kernels/gsa_tile_plan.h"

namespace sb::test {

// Gradients that vanish exactly (n = 1: one edge, so dq = 0) are judged against this magnitude; inputs
// are O(1), so ordinary gradients are far above it and keep a purely relative bound.
constexpr double kGradFloor = 1e-2;

std::string GsaCase::id() const {
  std::vector<std::string> ps;
  for (const auto& [k, v] : params) ps.push_back(fmt::format("{}={}", k, v));
  return fmt::format("GSA({}{}{},n={},causal={},D={},H={},B={},rel={})", pattern, ps.empty() ? "" : ":",
                     fmt::join(ps, ":"), n, causal ? 1 : 0, D, H, B, rel ? 1 : 0);
}

Params small_params(const AttentionPattern& pattern) {
  static const std::map<std::string, int64_t> small = {{"k", 2}, {"w", 9}, {"l", 8}, {"c", 3}, {"s", 8},
                                                       {"d", 2}, {"g", 2}, {"b", 8}, {"r", 2}};
  Params p;
  for (const ParamSpec& s : pattern.params()) {
    auto it = small.find(s.name);
    if (it != small.end() && it->second >= s.min_value && it->second <= s.max_value) p[s.name] = it->second;
  }
  return p;
}

std::vector<GsaCase> gsa_case_table(const AttentionPattern& pattern) {
  std::vector<GsaCase> cases;
  const Params params = small_params(pattern);
  std::vector<bool> causals = {false};
  if (pattern.supports_causal()) causals.push_back(true);
  for (bool causal : causals) {
    for (int64_t n : {1, 2, 3, 97}) {
      for (int64_t D : {16, 59, 64}) {
        for (int64_t H : {1, 3}) {
          for (int64_t B : {1, 2}) {
            for (bool rel : {false, true}) cases.push_back({pattern.name(), params, n, causal, D, H, B, rel});
          }
        }
      }
    }
    cases.push_back({pattern.name(), params, 1025, causal, 64, 1, 1, true});
    cases.push_back({pattern.name(), params, 1025, causal, 16, 3, 2, false});
  }
  return cases;
}

const Graph& case_graph(const GsaCase& c) {
  static std::map<std::string, std::unique_ptr<Graph>> cache;
  const std::string key = GsaCase{c.pattern, c.params, c.n, c.causal}.id();  // shape-free part of the id
  auto it = cache.find(key);
  if (it == cache.end()) {
    it = cache.emplace(key, std::make_unique<Graph>(build_pattern(c.pattern, c.n, c.causal, c.params))).first;
  }
  return *it->second;
}

namespace {

std::vector<double> uniform(std::mt19937_64& rng, size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> x(n);
  for (double& v : x) v = dist(rng);
  return x;
}

}  // namespace

RefProblem make_problem(const GsaCase& c, const Graph& g) {
  std::mt19937_64 rng(std::hash<std::string>{}(c.id()));
  RefProblem p;
  p.B = c.B;
  p.N = g.n_nodes();
  p.H = c.H;
  p.D = c.D;
  const size_t size = static_cast<size_t>(p.B * p.N * p.H * p.D);
  p.q = uniform(rng, size, -2.0, 2.0);
  p.k = uniform(rng, size, -1.0, 1.0);
  p.v = uniform(rng, size, -1.0, 1.0);
  if (c.rel) {
    p.R = g.n_relations();
    p.rel_emb = uniform(rng, static_cast<size_t>(p.R * p.D), -1.0, 1.0);
  }
  return p;
}

std::vector<double> make_d_o(const GsaCase& c, const Graph& g) {
  std::mt19937_64 rng(std::hash<std::string>{}(c.id() + "/d_o"));
  return uniform(rng, static_cast<size_t>(c.B * g.n_nodes() * c.H * c.D), -1.0, 1.0);
}

GsaParams problem_shape(const RefProblem& prob, const Graph& g, GsaDtype dtype) {
  GsaParams shape;
  shape.dtype = dtype;
  shape.B = prob.B;
  shape.N = prob.N;
  shape.H = prob.H;
  shape.D = prob.D;
  shape.R = prob.R;
  shape.graph.n_nodes = g.n_nodes();
  shape.graph.n_edges = g.n_edges();
  return shape;
}

std::string unsupported_summary(const std::map<std::string, int>& unsupported) {
  std::string out;
  for (const auto& [why, n] : unsupported) out += "; " + std::to_string(n) + " x " + why;
  return out;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(a[i] - b[i]);
    if (!(d <= m)) m = d;  // NaN propagates as a failure
  }
  return m;
}

double max_abs(const std::vector<double>& a) {
  double m = 0.0;
  for (double x : a) m = std::max(m, std::fabs(x));
  return m;
}

std::string compare_with_reference(const RefResult& ref, const std::vector<double>& o,
                                   const std::vector<double>& dq, const std::vector<double>& dk,
                                   const std::vector<double>& dv, const std::vector<double>& d_rel, Tolerance tol) {
  const double o_err = max_abs_diff(o, ref.o);
  const double o_bound = tol.out_tol * std::max(1.0, max_abs(ref.o));
  if (!(o_err <= o_bound)) return fmt::format("o: max error {:.3g} > {:.3g}", o_err, o_bound);
  const std::pair<const char*, std::pair<const std::vector<double>*, const std::vector<double>*>> grads[] = {
      {"dq", {&dq, &ref.dq}}, {"dk", {&dk, &ref.dk}}, {"dv", {&dv, &ref.dv}}, {"d_rel_emb", {&d_rel, &ref.d_rel}}};
  for (const auto& [name, pair] : grads) {
    if (pair.second->empty() && pair.first->empty()) continue;
    const double err = max_abs_diff(*pair.first, *pair.second);
    const double bound = tol.grad_tol * std::max(max_abs(*pair.second), kGradFloor);
    if (!(err <= bound)) return fmt::format("{}: max error {:.3g} > {:.3g} (relative to max {:.3g})", name, err, bound,
                                            max_abs(*pair.second));
  }
  return "";
}

}  // namespace sb::test

// ---- The table on the backend registry ----

namespace sb::test {

uint16_t f32_to_bf16(float f) {  // round to nearest even (no NaN handling: the inputs hold none)
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float bf16_to_f32(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

namespace {

uint16_t f32_to_f16(float f) {  // round to nearest even, as __float2half does
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const int32_t exp8 = static_cast<int32_t>((x >> 23) & 0xffu);
  uint32_t mant = x & 0x7fffffu;
  if (exp8 == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant != 0 ? 0x200u : 0u));
  const int32_t exp = exp8 - 127 + 15;
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {  // subnormal half (or zero)
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    const int shift = 14 - exp;
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is still correct
  return static_cast<uint16_t>(h);
}

float f16_to_f32(uint16_t h) {
  const bool negative = (h & 0x8000u) != 0;
  const int exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    f = mant != 0 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    f = std::ldexp(static_cast<float>(mant | 0x400u), exp - 25);
  }
  return negative ? -f : f;
}

size_t elem_bytes(GsaDtype t) { return t == GsaDtype::f64 ? 8 : t == GsaDtype::f32 ? 4 : 2; }
GsaDtype acc_of(GsaDtype t) { return t == GsaDtype::f64 ? GsaDtype::f64 : GsaDtype::f32; }

std::vector<char> encode(const std::vector<double>& x, GsaDtype t) {
  std::vector<char> out(x.size() * elem_bytes(t));
  for (size_t i = 0; i < x.size(); ++i) {
    char* dst = out.data() + i * elem_bytes(t);
    if (t == GsaDtype::f64) {
      std::memcpy(dst, &x[i], 8);
    } else if (t == GsaDtype::f32) {
      const float f = static_cast<float>(x[i]);
      std::memcpy(dst, &f, 4);
    } else {
      const uint16_t h = t == GsaDtype::f16 ? f32_to_f16(static_cast<float>(x[i])) : f32_to_bf16(static_cast<float>(x[i]));
      std::memcpy(dst, &h, 2);
    }
  }
  return out;
}

std::vector<double> decode(const std::vector<char>& bytes, GsaDtype t) {
  std::vector<double> out(bytes.size() / elem_bytes(t));
  for (size_t i = 0; i < out.size(); ++i) {
    const char* src = bytes.data() + i * elem_bytes(t);
    if (t == GsaDtype::f64) {
      std::memcpy(&out[i], src, 8);
    } else if (t == GsaDtype::f32) {
      float f;
      std::memcpy(&f, src, 4);
      out[i] = f;
    } else {
      uint16_t h;
      std::memcpy(&h, src, 2);
      out[i] = t == GsaDtype::f16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
  }
  return out;
}

// A host vector's device copy, and its size, for one run.
struct Buffer {
  void* ptr = nullptr;
  size_t bytes = 0;
};

template <typename T>
Buffer put_vector(GsaTestMemory& mem, const std::vector<T>& v) {
  const size_t bytes = v.size() * sizeof(T);
  return {bytes > 0 ? mem.put(v.data(), bytes) : nullptr, bytes};
}

Buffer put_values(GsaTestMemory& mem, const std::vector<double>& x, GsaDtype t) {
  const std::vector<char> bytes = encode(x, t);
  return put_vector(mem, bytes);
}

Buffer put_empty(GsaTestMemory& mem, size_t bytes) { return {bytes > 0 ? mem.put(nullptr, bytes) : nullptr, bytes}; }

std::vector<double> get_values(GsaTestMemory& mem, const Buffer& b, GsaDtype t) {
  std::vector<char> bytes(b.bytes);
  if (b.bytes > 0) mem.get(bytes.data(), b.ptr, b.bytes);
  return decode(bytes, t);
}

}  // namespace

void* HostMemory::put(const void* host, size_t bytes) {
  buffers_.push_back(std::make_unique<char[]>(bytes));
  if (host != nullptr) {
    std::memcpy(buffers_.back().get(), host, bytes);
  } else {
    std::memset(buffers_.back().get(), 0xff, bytes);
  }
  return buffers_.back().get();
}

void HostMemory::get(void* host, const void* buffer, size_t bytes) { std::memcpy(host, buffer, bytes); }

const std::vector<GsaDtypeRows>& gsa_dtype_rows() {
  static const std::vector<GsaDtypeRows> rows = {{GsaDtype::f32, {1e-5, 1e-4}, false},
                                                 {GsaDtype::f64, {1e-11, 1e-9}, false},
                                                 {GsaDtype::f16, {1e-2, 0.0}, true},
                                                 {GsaDtype::bf16, {5e-2, 0.0}, true}};
  return rows;
}

GsaRunOutputs run_on_backend(const GsaBackend& b, const Graph& g, const RefProblem& prob,
                             const std::vector<double>& d_o_in, GsaDtype dtype, GsaTestMemory& mem,
                             bool prepared_plans, std::optional<GsaTileOptions> wide) {
  const GsaHostGraph hg(g);
  GsaParams p;
  p.graph.row_ptr = static_cast<const int64_t*>(put_vector(mem, hg.row_ptr).ptr);
  p.graph.col = static_cast<const int32_t*>(put_vector(mem, hg.col).ptr);
  p.graph.rel = static_cast<const int32_t*>(put_vector(mem, hg.rel).ptr);
  p.graph.t_row_ptr = static_cast<const int64_t*>(put_vector(mem, hg.t_row_ptr).ptr);
  p.graph.t_col = static_cast<const int32_t*>(put_vector(mem, hg.t_col).ptr);
  p.graph.t_edge = static_cast<const int32_t*>(put_vector(mem, hg.t_edge).ptr);
  p.graph.rel_ptr = static_cast<const int64_t*>(put_vector(mem, hg.rel_ptr).ptr);
  p.graph.rel_edge = static_cast<const int32_t*>(put_vector(mem, hg.rel_edge).ptr);
  p.graph.rel_dst = static_cast<const int32_t*>(put_vector(mem, hg.rel_dst).ptr);
  // Schedules with a small threshold, so device backends split rows of every pattern here (the CPU ignores them).
  const int64_t threshold = 8;
  const GsaPackedSchedule by_dst = gsa_pack_schedule(hg.row_ptr.data(), hg.n_nodes, threshold);
  const GsaPackedSchedule by_src = gsa_pack_schedule(hg.t_row_ptr.data(), hg.n_nodes, threshold);
  p.graph.rows = gsa_schedule_view(static_cast<const int64_t*>(put_vector(mem, by_dst.data).ptr), hg.n_nodes,
                                   by_dst.n_pieces, by_dst.n_split);
  p.graph.srcs = gsa_schedule_view(static_cast<const int64_t*>(put_vector(mem, by_src.data).ptr), hg.n_nodes,
                                   by_src.n_pieces, by_src.n_split);
  p.graph.n_nodes = hg.n_nodes;
  p.graph.n_edges = hg.n_edges();
  p.graph.cpu_plans = prepared_plans ? &hg.cpu_plans : nullptr;  // host memory: only the CPU kernels read it
  if (prepared_plans && b.device() == GsaDevice::cuda) {  // the dense tiles a prepared CUDA graph carries
    const GsaPackedTiles tiles =
        gsa_pack_tiles(gsa_tile_plan(hg.row_ptr.data(), hg.col.data(), hg.n_nodes), by_dst.data, by_dst.n_pieces,
                       by_dst.n_split);
    p.graph.tiles = gsa_tile_view(static_cast<const int64_t*>(put_vector(mem, tiles.data).ptr), tiles);
    const GsaPackedTiles src_tiles =
        gsa_pack_tiles(gsa_tile_plan(hg.t_row_ptr.data(), hg.t_col.data(), hg.n_nodes), by_src.data,
                       by_src.n_pieces, by_src.n_split);
    p.graph.src_tiles = gsa_tile_view(static_cast<const int64_t*>(put_vector(mem, src_tiles.data).ptr), src_tiles);
    if (!wide.has_value()) {
      wide = GsaTileOptions{};
      wide->rows = gsa_tile_rows_from_env();
    }
    if (wide->rows == kGsaWideTileRows) {
      const GsaPackedTiles wide_tiles =
          gsa_pack_tiles(gsa_tile_plan(hg.row_ptr.data(), hg.col.data(), hg.n_nodes, *wide), by_dst.data,
                         by_dst.n_pieces, by_dst.n_split);
      p.graph.wide_tiles =
          gsa_tile_view(static_cast<const int64_t*>(put_vector(mem, wide_tiles.data).ptr), wide_tiles);
    }
  }
  p.dtype = dtype;
  p.B = prob.B;
  p.N = prob.N;
  p.H = prob.H;
  p.D = prob.D;
  p.scale = 1.0 / std::sqrt(static_cast<double>(prob.D));
  const GsaStrides strides{prob.N * prob.H * prob.D, prob.H * prob.D, prob.D};
  p.q_strides = p.k_strides = p.v_strides = p.o_strides = p.d_o_strides = strides;
  p.dq_strides = p.dk_strides = p.dv_strides = strides;
  p.q = put_values(mem, prob.q, dtype).ptr;
  p.k = put_values(mem, prob.k, dtype).ptr;
  p.v = put_values(mem, prob.v, dtype).ptr;
  const size_t size = prob.q.size() * elem_bytes(dtype);
  const size_t rows = static_cast<size_t>(prob.B * prob.N * prob.H);
  const Buffer o = put_empty(mem, size), lse = put_empty(mem, rows * elem_bytes(acc_of(dtype)));
  p.o = o.ptr;
  p.lse = lse.ptr;
  const int64_t forward_bytes = b.forward_workspace_bytes(p);
  p.workspace = forward_bytes > 0 ? put_empty(mem, static_cast<size_t>(forward_bytes)).ptr : nullptr;
  p.workspace_bytes = forward_bytes;
  Buffer d_rel;
  if (!prob.rel_emb.empty()) {
    p.R = prob.R;
    p.rel_emb = put_values(mem, prob.rel_emb, dtype).ptr;
    p.rel_stride = prob.D;
    d_rel = put_empty(mem, prob.rel_emb.size() * elem_bytes(dtype));
    p.d_rel_emb = d_rel.ptr;
  }
  b.forward(p, nullptr);
  GsaRunOutputs out;
  out.o = get_values(mem, o, dtype);
  out.lse = get_values(mem, lse, acc_of(dtype));
  if (!d_o_in.empty()) {
    const Buffer dq = put_empty(mem, size), dk = put_empty(mem, size), dv = put_empty(mem, size);
    p.d_o = put_values(mem, d_o_in, dtype).ptr;
    p.dq = dq.ptr;
    p.dk = dk.ptr;
    p.dv = dv.ptr;
    const GsaWorkspace need = b.backward_workspace(p);
    p.delta = put_empty(mem, static_cast<size_t>(std::max<int64_t>(1, need.delta_bytes))).ptr;
    p.workspace = put_empty(mem, static_cast<size_t>(need.workspace_bytes)).ptr;
    p.workspace_bytes = need.workspace_bytes;
    b.backward(p, nullptr);
    out.dq = get_values(mem, dq, dtype);
    out.dk = get_values(mem, dk, dtype);
    out.dv = get_values(mem, dv, dtype);
    out.d_rel = get_values(mem, d_rel, dtype);
  }
  mem.clear();
  return out;
}

std::vector<double> rounded_to(const std::vector<double>& x, GsaDtype dtype) { return decode(encode(x, dtype), dtype); }

RefProblem rounded_problem(const RefProblem& prob, GsaDtype dtype) {
  RefProblem r = prob;
  r.q = rounded_to(prob.q, dtype);
  r.k = rounded_to(prob.k, dtype);
  r.v = rounded_to(prob.v, dtype);
  r.rel_emb = rounded_to(prob.rel_emb, dtype);
  return r;
}

std::string compare_run(const RefResult& ref, const GsaRunOutputs& run, const GsaDtypeRows& rows) {
  const Tolerance tol = rows.tol;
  if (rows.outputs_only) {
    const double err = max_abs_diff(run.o, ref.o), bound = tol.out_tol * std::max(1.0, max_abs(ref.o));
    return err <= bound ? "" : fmt::format("o: max error {:.3g} > {:.3g}", err, bound);
  }
  std::string err = compare_with_reference(ref, run.o, run.dq, run.dk, run.dv, run.d_rel, tol);
  if (!err.empty()) return err;
  if (run.lse.size() != ref.lse.size()) return "lse: wrong size";
  for (size_t i = 0; i < ref.lse.size(); ++i) {  // inf - inf = nan: compare the -inf (empty) rows apart
    const bool ref_empty = std::isinf(ref.lse[i]);
    if (ref_empty != std::isinf(run.lse[i])) return fmt::format("lse[{}]: empty-row mismatch", i);
    const double e = std::fabs(run.lse[i] - ref.lse[i]);
    if (!ref_empty && !(e <= tol.out_tol * std::max(1.0, std::fabs(ref.lse[i])))) {
      return fmt::format("lse[{}]: error {:.3g}", i, e);
    }
  }
  return "";
}

std::vector<std::string> run_backend_table(const std::string& pattern, GsaDevice device, GsaTestMemory& mem) {
  std::vector<const GsaBackend*> backends;
  for (const GsaBackend* b : gsa_backends()) {
    if (b->device() == device) backends.push_back(b);
  }
  if (backends.empty()) return {fmt::format("no {} backend is registered", gsa_device_name(device))};
  return run_backend_table(pattern, backends, mem);
}

std::vector<std::string> run_backend_table(const std::string& pattern, const std::vector<const GsaBackend*>& backends,
                                           GsaTestMemory& mem) {
  struct Tally {
    int passed = 0, failed = 0;
    std::map<std::string, int> unsupported;  // reason -> rows
  };
  std::vector<std::string> failures;
  const std::vector<GsaDtypeRows>& dtypes = gsa_dtype_rows();
  std::vector<std::vector<Tally>> tally(backends.size(), std::vector<Tally>(dtypes.size()));
  for (const GsaCase& c : gsa_case_table(find_pattern(pattern))) {
    const Graph& g = case_graph(c);
    const RefProblem prob = make_problem(c, g);
    const std::vector<double> d_o = make_d_o(c, g);
    const RefResult ref = reference_attention(prob, DenseMask(g), d_o);
    for (size_t bi = 0; bi < backends.size(); ++bi) {
      for (size_t di = 0; di < dtypes.size(); ++di) {
        Tally& t = tally[bi][di];
        const std::string why = backends[bi]->unsupported(problem_shape(prob, g, dtypes[di].dtype));
        if (!why.empty()) {
          t.unsupported[why]++;
          continue;
        }
        const GsaRunOutputs run = run_on_backend(*backends[bi], g, prob, d_o, dtypes[di].dtype, mem);
        const std::string err = compare_run(ref, run, dtypes[di]);
        if (err.empty()) {
          t.passed++;
        } else {
          t.failed++;
          failures.push_back(fmt::format("{} {} {}: {}", backends[bi]->name(), gsa_dtype_name(dtypes[di].dtype), c.id(),
                                         err));
        }
      }
    }
  }
  for (size_t bi = 0; bi < backends.size(); ++bi) {
    int ran = 0;
    for (size_t di = 0; di < dtypes.size(); ++di) {
      const Tally& t = tally[bi][di];
      ran += t.passed + t.failed;
      std::vector<std::string> reasons;
      int unsupported = 0;
      for (const auto& [why, n] : t.unsupported) {
        reasons.push_back(fmt::format("{} x {}", n, why));
        unsupported += n;
      }
      std::printf("[ table    ] %s %s %s: %d passed, %d failed, %d not supported%s\n", pattern.c_str(),
                  backends[bi]->name().c_str(), gsa_dtype_name(dtypes[di].dtype), t.passed, t.failed, unsupported,
                  reasons.empty() ? "" : fmt::format(" ({})", fmt::join(reasons, "; ")).c_str());
    }
    if (ran == 0) failures.push_back(fmt::format("{} supports no row of the {} table", backends[bi]->name(), pattern));
  }
  return failures;
}

}  // namespace sb::test
