// The graph-attention parity table and the helpers shared by the CPU, op and CUDA tests.
#include "tests/kernels/gsa_cases.h"

#include <cmath>
#include <fmt/format.h>
#include <functional>
#include <limits>
#include <random>

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
