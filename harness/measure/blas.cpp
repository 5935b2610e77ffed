// BLAS set-up: OpenBLAS load-time settings with re-exec, BLAS thread count, and the BLAS description.
#include "harness/measure/blas.h"

#include "harness/measure/threads.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <set>
#include <vector>

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

namespace sb {

namespace {

// OpenBLAS entry points, looked up at run time so builds against other BLAS libraries (MKL) link and run.
template <typename Fn>
Fn openblas_symbol(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

// OpenBLAS's threading: 0 none, 1 its own pthreads pool, 2 OpenMP; -1 when the BLAS is not OpenBLAS.
int openblas_threading() {
  auto parallel = openblas_symbol<int (*)()>("openblas_get_parallel");
  return parallel != nullptr ? parallel() : -1;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The best OpenBLAS kernel family this CPU supports ("" when the detected one is already at least as good).
std::string better_core(const std::string& detected) {
  const std::set<std::string> avx512 = {"skylakex", "cooperlake", "sapphirerapids"};
  const std::set<std::string> avx2 = {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids"};
  const std::string d = lower(detected);
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
    return avx512.count(d) ? "" : "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return avx2.count(d) ? "" : "Haswell";
  return "";
}

// Runs this program again with the environment set up; returns only when that fails.
void reexec(char** argv, const char* what, const std::string& detected) {
  std::fflush(nullptr);
  execv("/proc/self/exe", argv);
  std::fprintf(stderr, "sparsebench: note: could not re-execute with %s (%s)%s%s\n", what, std::strerror(errno),
               detected.empty() ? "" : "; BLAS runs the kernels of ", detected.c_str());
}

}  // namespace

void configure_blas_runtime(char** argv) {
  bool changed = set_default_wait_policy();  // OpenMP's, read at load time too
  auto corename = openblas_symbol<char* (*)()>("openblas_get_corename");
  const std::string detected = corename != nullptr ? corename() : "";
  if (corename == nullptr) {  // not OpenBLAS
    if (changed) reexec(argv, "the OpenMP wait policy", detected);
    return;
  }
  const std::string core = better_core(detected);
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr && !core.empty()) {
    setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
    setenv("SPARSEBENCH_BLAS_DETECTED", detected.c_str(), 1);  // for blas_info()
    changed = true;
  }
  const bool pthreads = openblas_threading() == 1;
  if (pthreads && std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "passive", 1);
    changed = true;
  }
  if (changed) reexec(argv, "the BLAS and OpenMP settings", detected);
}

void set_blas_threads(int threads) {
  if (auto set = openblas_symbol<void (*)(int)>("openblas_set_num_threads")) set(threads);
}

void restart_blas_thread_pool() {
  auto shutdown = openblas_symbol<int (*)()>("blas_thread_shutdown_");
  auto start = openblas_symbol<int (*)()>("blas_thread_init");
  if (openblas_threading() != 1 || shutdown == nullptr || start == nullptr) return;
  shutdown();
  start();  // now, not at the next call: openblas_set_num_threads would add threads to a stopped pool
}

std::string blas_info() {
  const std::string config = at::show_config();
  std::vector<std::string> found;
  for (const char* key : {"BLAS_INFO=", "LAPACK_INFO="}) {
    const auto at = config.find(key);
    if (at == std::string::npos) continue;
    const auto end = config.find_first_of(",\n", at);
    found.push_back(config.substr(at, end == std::string::npos ? std::string::npos : end - at));
  }
  // "generic" LibTorch builds use whatever libblas.so.3 points to, e.g. OpenBLAS.
  std::ifstream maps("/proc/self/maps");
  std::string line;
  std::set<std::string> loaded;
  while (std::getline(maps, line)) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    if (path.find("blas") != std::string::npos) loaded.insert(path);
  }
  for (const std::string& path : loaded) found.push_back("loaded=" + path);
  if (auto corename = openblas_symbol<char* (*)()>("openblas_get_corename")) {
    std::string kernels = fmt::format("openblas_kernels={}", corename());
    if (const char* detected = std::getenv("SPARSEBENCH_BLAS_DETECTED")) {
      kernels += fmt::format(" (set by sparsebench; detection gave {})", detected);
    }
    found.push_back(kernels);
  }
  if (const int mode = openblas_threading(); mode >= 0) {
    found.push_back(fmt::format("openblas_threading={}", mode == 2 ? "openmp" : mode == 1 ? "pthreads" : "none"));
  }
  return found.empty() ? "unknown" : fmt::format("{}", fmt::join(found, " "));
}

}  // namespace sb
