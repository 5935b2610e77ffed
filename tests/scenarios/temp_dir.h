// TempDir: a fresh scratch directory per scenario test, removed afterwards; remove_tree for other tests.
#pragma once

#include <ftw.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace sb::test {

// Removes a file or directory tree, bottom-up. Not std::filesystem::remove_all: linked with the pip LibTorch
// (2.11, which exports its own copy of libstdc++'s std::filesystem, pytorch/pytorch#133437) it segfaulted.
inline void remove_tree(const std::filesystem::path& path) {
  const auto remove_one = [](const char* p, const struct stat*, int, struct FTW*) {
    std::remove(p);  // errors ignored, as removing scratch space is best effort
    return 0;
  };
  nftw(path.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name) {
    path = std::filesystem::temp_directory_path() / ("sb_scen_" + name + "_" + std::to_string(::getpid()));
    remove_tree(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { remove_tree(path); }
  std::string file(const std::string& f) const { return (path / f).string(); }
};

}  // namespace sb::test
