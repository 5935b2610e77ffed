// What the built-in pattern files share; each pattern defines its factory make_NAME_pattern() in patterns/NAME.cpp.
#pragma once

#include <algorithm>
#include <memory>

#include "patterns/pattern.h"

namespace sb {

// Exact edge count of bpt(k) at n without building the graph (used to estimate memory before a build).
int64_t bpt_edge_count(int64_t n, int64_t k, bool causal);

}  // namespace sb
