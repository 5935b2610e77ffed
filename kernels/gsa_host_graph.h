// GsaHostGraph: a Graph's arrays in the kernels' integer widths, held on the host, with a GsaGraphView.
#pragma once

#include <vector>

#include "kernels/gsa_params.h"
#include "patterns/graph.h"

namespace sb {

struct GsaHostGraph {
  int64_t n_nodes = 0;
  int64_t n_relations = 0;
  std::vector<int64_t> row_ptr, t_row_ptr;
  std::vector<int32_t> col, rel, t_col, t_edge;

  explicit GsaHostGraph(const Graph& g);
  GsaGraphView view() const;
};

}  // namespace sb
