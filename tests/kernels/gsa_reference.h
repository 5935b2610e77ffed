// The oracle for every graph-attention kernel: dense masked attention in double precision, as plain loops.
// Never optimise this file; its only job is to be obviously right.
#pragma once

#include <vector>

#include "patterns/graph.h"

namespace sb::test {

// All tensors contiguous: q, k, v, o, d_o, dq, dk, dv [B, N, H, D]; rel_emb, d_rel [R, D] (empty: none).
struct RefProblem {
  int64_t B = 1, N = 1, H = 1, D = 1, R = 0;
  std::vector<double> q, k, v, rel_emb;
};

struct RefResult {
  std::vector<double> o;    // [B, N, H, D]
  std::vector<double> lse;  // [B, N, H], -inf for a row without sources
  std::vector<double> dq, dk, dv, d_rel;
};

// Dense N x N edge mask and relation ids of a graph: mask[u * N + v] = 1 when u attends to v.
struct DenseMask {
  int64_t N = 0;
  std::vector<char> mask;
  std::vector<int32_t> rel;
  explicit DenseMask(const Graph& g);
};

// Forward; with a non-empty d_o also the gradients of q, k, v, rel_emb (loss = sum(o * d_o)).
RefResult reference_attention(const RefProblem& p, const DenseMask& m, const std::vector<double>& d_o);

}  // namespace sb::test
