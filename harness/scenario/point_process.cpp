// Child processes of a parallel sweep: fork + exec with a log file, polling waits, stop signals turned into a flag.
#include "harness/scenario/point_process.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "common/error.h"

namespace sb {

namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

void on_stop_signal(int sig) { g_stop_signal = sig; }

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_previous[3];
bool g_installed = false;

}  // namespace

pid_t start_point_process(const std::vector<std::string>& argv, const std::string& log_path) {
  if (argv.empty()) throw Error("internal: no command for the point process");
  // Everything the child needs is prepared before fork: between fork and exec only async-signal-safe calls.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log < 0) throw Error(fmt::format("{}: cannot create the point's log: {}", log_path, std::strerror(errno)));
  const pid_t parent = ::getpid();
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(log);
    throw Error(fmt::format("cannot start a point process: {}", std::strerror(err)));
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(126);  // the parent died before prctl took effect
    // The dispositions from before the sweep's stop handlers (e.g. SIGHUP ignored under nohup).
    if (g_installed) {
      for (size_t i = 0; i < 3; ++i) ::sigaction(kStopSignals[i], &g_previous[i], nullptr);
    }
    ::dup2(log, STDOUT_FILENO);
    ::dup2(log, STDERR_FILENO);
    const int null_in = ::open("/dev/null", O_RDONLY);
    if (null_in >= 0) ::dup2(null_in, STDIN_FILENO);
    ::execv(args[0], args.data());
    const char msg[] = "point process: exec failed\n";
    [[maybe_unused]] const ssize_t w = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::close(log);
  return pid;
}

ProcessExit wait_point_process(int timeout_ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      ProcessExit e;
      e.pid = pid;
      if (WIFEXITED(status)) e.code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
      return e;
    }
    if (pid < 0 && errno != EINTR) return {};  // no children
    if (std::chrono::steady_clock::now() >= until) return {};
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string describe_exit(const ProcessExit& e) {
  if (e.signal != 0) return fmt::format("killed by signal {} ({})", e.signal, strsignal(e.signal));
  return fmt::format("exit code {}", e.code);
}

StopSignals::StopSignals() {
  g_stop_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < 3; ++i) ::sigaction(kStopSignals[i], &sa, &g_previous[i]);
  g_installed = true;
}

StopSignals::~StopSignals() {
  for (size_t i = 0; i < 3; ++i) ::sigaction(kStopSignals[i], &g_previous[i], nullptr);
  g_installed = false;
}

int StopSignals::received() { return g_stop_signal; }

}  // namespace sb
