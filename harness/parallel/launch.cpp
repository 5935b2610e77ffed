// Multi-process launch: torchrun/Slurm rank layout from the environment, and a local launcher for N ranks.
#include "harness/parallel/launch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "common/error.h"
#include "common/text.h"

extern char** environ;

namespace sb {

namespace {

constexpr int kMaxWorld = 65536;
constexpr double kStopGraceS = 10.0;  // SIGTERM first, SIGKILL after this

const std::string* find_var(const std::map<std::string, std::string>& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

int int_var(const std::map<std::string, std::string>& env, const std::string& name, int lo, int hi,
            const std::string& why) {
  const std::string* v = find_var(env, name);
  if (!v) throw Error(fmt::format("environment variable {} is not set ({})", name, why));
  const auto n = parse_int64(*v);
  if (!n || *n < lo || *n > hi) {
    throw Error(fmt::format("environment variable {}: expected an integer in [{}, {}], got '{}'", name, lo, hi, *v));
  }
  return static_cast<int>(*n);
}

// The store address of a multi-process run: MASTER_ADDR and MASTER_PORT.
void read_master(const std::map<std::string, std::string>& env, RankLayout& out) {
  const std::string why = fmt::format("rank 0's address, needed with world size {}", out.world_size);
  const std::string* addr = find_var(env, "MASTER_ADDR");
  if (!addr) throw Error(fmt::format("environment variable MASTER_ADDR is not set ({})", why));
  out.master_addr = *addr;
  out.master_port = int_var(env, "MASTER_PORT", 1, 65535, "rank 0's port, needed with world size " +
                                                              std::to_string(out.world_size));
}

volatile sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  }
  return fmt::format("exited with status {}", WEXITSTATUS(status));
}

}  // namespace

std::map<std::string, std::string> environment_map() {
  std::map<std::string, std::string> out;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq) out.emplace(std::string(*e, static_cast<size_t>(eq - *e)), std::string(eq + 1));
  }
  return out;
}

RankLayout rank_layout_from_environment(const std::map<std::string, std::string>& env) {
  RankLayout out;
  if (find_var(env, "RANK") || find_var(env, "WORLD_SIZE")) {
    const std::string* launcher = find_var(env, "SPARSEBENCH_LAUNCHER");
    out.source = launcher && *launcher == "nproc" ? "sparsebench --nproc launcher" : "torchrun environment";
    out.world_size = int_var(env, "WORLD_SIZE", 1, kMaxWorld, "set with RANK by torchrun");
    out.rank = int_var(env, "RANK", 0, out.world_size - 1, "set with WORLD_SIZE by torchrun");
    out.local_world_size = find_var(env, "LOCAL_WORLD_SIZE")
                               ? int_var(env, "LOCAL_WORLD_SIZE", 1, out.world_size, "")
                               : out.world_size;
    out.local_rank = find_var(env, "LOCAL_RANK") ? int_var(env, "LOCAL_RANK", 0, out.local_world_size - 1, "")
                                                 : out.rank % out.local_world_size;
    const std::string* agent = find_var(env, "TORCHELASTIC_USE_AGENT_STORE");
    if (agent && *agent == "True") {
      const std::string* attempt = find_var(env, "TORCHELASTIC_RESTART_COUNT");
      out.agent_store_prefix = "/worker/attempt_" + (attempt ? *attempt : std::string("0"));
    }
  } else if (find_var(env, "MASTER_ADDR") && find_var(env, "SLURM_PROCID") && find_var(env, "SLURM_NTASKS")) {
    // An srun step: one task per rank; the job script exports MASTER_ADDR and MASTER_PORT.
    out.source = "Slurm environment";
    out.world_size = int_var(env, "SLURM_NTASKS", 1, kMaxWorld, "set by srun");
    out.rank = int_var(env, "SLURM_PROCID", 0, out.world_size - 1, "set by srun");
    const std::string* per_node = find_var(env, "SLURM_NTASKS_PER_NODE");
    std::optional<int64_t> n;  // may read "2(x3)": then unknown
    if (per_node) n = parse_int64(*per_node);
    out.local_world_size = n && *n >= 1 && *n <= out.world_size ? static_cast<int>(*n) : out.world_size;
    out.local_rank = find_var(env, "SLURM_LOCALID") ? int_var(env, "SLURM_LOCALID", 0, kMaxWorld, "") : 0;
  } else {
    return out;
  }
  if (out.distributed()) read_master(env, out);
  return out;
}

int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw Error(fmt::format("--nproc: cannot open a socket to pick a port: {}", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) throw Error(fmt::format("--nproc: cannot find a free port on 127.0.0.1: {}", std::strerror(err)));
  return ntohs(addr.sin_port);
}

int run_local_ranks(const std::vector<std::string>& argv, int nproc) {
  if (nproc < 1 || nproc > kMaxWorld) throw Error(fmt::format("--nproc: expected 1..{}, got {}", kMaxWorld, nproc));
  const int port = free_local_port();
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);

  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {}, old_term {}, old_hup {};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGHUP, &sa, &old_hup);

  const pid_t parent = ::getpid();
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids(static_cast<size_t>(nproc), -1);
  std::vector<bool> alive(static_cast<size_t>(nproc), false);
  int failed_rank = -1, result = 0;
  using clock = std::chrono::steady_clock;
  clock::time_point kill_at{};
  bool stopping = false;

  auto stop_all = [&](int sig) {
    for (int r = 0; r < nproc; ++r) {
      if (alive[r]) ::kill(pids[r], sig);
    }
  };
  auto begin_stop = [&](int sig) {
    if (stopping) return;
    stopping = true;
    stop_all(sig);
    kill_at = clock::now() + std::chrono::milliseconds(static_cast<int64_t>(kStopGraceS * 1000));
  };

  for (int r = 0; r < nproc; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::fprintf(stderr, "sparsebench: --nproc: cannot start rank %d: %s\n", r, std::strerror(errno));
      result = 1;
      begin_stop(SIGTERM);
      break;
    }
    if (pid == 0) {
      // A rank never outlives its launcher (killed launcher: no orphaned ranks waiting for their peers).
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) _exit(1);
      sigaction(SIGINT, &old_int, nullptr);
      sigaction(SIGTERM, &old_term, nullptr);
      sigaction(SIGHUP, &old_hup, nullptr);
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      setenv("SPARSEBENCH_LAUNCHER", "nproc", 1);  // recorded as the run's launcher
      ::execv("/proc/self/exe", cargv.data());
      std::fprintf(stderr, "sparsebench: --nproc: cannot start rank %d: exec: %s\n", r, std::strerror(errno));
      _exit(127);
    }
    pids[r] = pid;
    alive[r] = true;
  }

  int running = 0;
  for (bool a : alive) running += a ? 1 : 0;
  while (running > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < nproc; ++r) {
        if (pids[r] != pid || !alive[r]) continue;
        alive[r] = false;
        --running;
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && failed_rank < 0 && !stopping) {
          failed_rank = r;
          result = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
          std::fprintf(stderr, "sparsebench: rank %d of %d (pid %d) %s; stopping the other ranks\n", r, nproc,
                       static_cast<int>(pid), describe_status(status).c_str());
          begin_stop(SIGTERM);
        }
      }
      continue;
    }
    if (pid < 0 && errno != EINTR) break;
    if (g_stop_signal != 0 && !stopping) {
      result = 128 + g_stop_signal;
      begin_stop(g_stop_signal);
    }
    if (stopping && clock::now() >= kill_at) {
      stop_all(SIGKILL);
      kill_at = clock::now() + std::chrono::hours(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  g_stop_signal = 0;
  return result;
}

}  // namespace sb
