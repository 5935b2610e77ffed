// Placeholder: the graph benchmarks are being built.
#include "harness/bench.h"
namespace sb {
void register_graph_benchmarks() {}
}  // namespace sb
