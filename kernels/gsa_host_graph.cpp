// GsaHostGraph: copies a Graph's CSR arrays, widening relation ids to int32.
#include "kernels/gsa_host_graph.h"

namespace sb {

GsaHostGraph::GsaHostGraph(const Graph& g)
    : n_nodes(g.n_nodes()),
      n_relations(g.n_relations()),
      row_ptr(g.row_ptr),
      t_row_ptr(g.t_row_ptr),
      col(g.col),
      rel(g.rel.begin(), g.rel.end()),
      t_col(g.t_col),
      t_edge(g.t_edge) {}

GsaGraphView GsaHostGraph::view() const {
  GsaGraphView v;
  v.row_ptr = row_ptr.data();
  v.col = col.data();
  v.rel = rel.data();
  v.t_row_ptr = t_row_ptr.data();
  v.t_col = t_col.data();
  v.t_edge = t_edge.data();
  v.n_nodes = n_nodes;
  v.n_edges = static_cast<int64_t>(col.size());
  return v;
}

}  // namespace sb
