// Placeholder for `sparsebench train` while it is being built.
#include "harness/cli.h"
#include "patterns/error.h"
namespace sb {
int cmd_train(const std::vector<std::string>&) { throw Error("train: not built yet"); }
}  // namespace sb
