// Run directories confined to the results root: a scenario name can never place records outside it.
#pragma once

#include <string>
#include <vector>

namespace sb {

// root/parts[0]/parts[1]/...; throws sb::Error naming `what` when a part is empty, ".", "..", absolute or
// holds a '/', i.e. when the joined path would not be a directory strictly inside root.
std::string path_under_root(const std::string& root, const std::vector<std::string>& parts, const std::string& what);

}  // namespace sb
