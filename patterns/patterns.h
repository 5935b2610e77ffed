// Factories of the built-in patterns; each is defined in its own file under patterns/.
#pragma once

#include <algorithm>
#include <memory>

#include "patterns/pattern.h"

namespace sb {

std::unique_ptr<AttentionPattern> make_dense_pattern();
std::unique_ptr<AttentionPattern> make_window_pattern();
std::unique_ptr<AttentionPattern> make_strided_pattern();
std::unique_ptr<AttentionPattern> make_fixed_pattern();
std::unique_ptr<AttentionPattern> make_star_pattern();
std::unique_ptr<AttentionPattern> make_bpt_pattern();
std::unique_ptr<AttentionPattern> make_segtree_pattern();
std::unique_ptr<AttentionPattern> make_hierarchical_pattern();
std::unique_ptr<AttentionPattern> make_longformer_pattern();
std::unique_ptr<AttentionPattern> make_bigbird_pattern();

// Exact edge count of bpt(k) at n without building the graph (used to estimate memory before a build).
int64_t bpt_edge_count(int64_t n, int64_t k, bool causal);

}  // namespace sb
