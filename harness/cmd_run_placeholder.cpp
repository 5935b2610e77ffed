// Placeholder for `sparsebench run` while it is being built.
#include "harness/cli.h"
#include "patterns/error.h"
namespace sb {
int cmd_run(const std::vector<std::string>&) { throw Error("run: not built yet"); }
}  // namespace sb
