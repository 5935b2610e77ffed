// Results-root confinement for run directories.
#include "harness/scenario/paths.h"

#include <filesystem>

#include <fmt/format.h>

#include "common/error.h"

namespace sb {

std::string path_under_root(const std::string& root, const std::vector<std::string>& parts, const std::string& what) {
  std::filesystem::path out(root.empty() ? "." : root);
  for (const std::string& part : parts) {
    if (part.empty() || part == "." || part == ".." || part.find('/') != std::string::npos) {
      throw Error(fmt::format("{} '{}' would place the run outside the results directory '{}'", what, part, root));
    }
    out /= part;
  }
  return out.string();
}

}  // namespace sb
