// Placeholder for `sparsebench plot` while it is being built.
#include "harness/cli.h"
#include "patterns/error.h"
namespace sb {
int cmd_plot(const std::vector<std::string>&) { throw Error("plot: not built yet"); }
}  // namespace sb
