// TempDir: a fresh scratch directory per scenario test, removed afterwards.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace sb::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name) {
    path = std::filesystem::temp_directory_path() / ("sb_scen_" + name + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& f) const { return (path / f).string(); }
};

}  // namespace sb::test
