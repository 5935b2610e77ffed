// Child processes for `run --jobs N`: one process per point, started from this binary, with its output in a log file.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace sb {

// Starts argv[0] with argv, stdout and stderr going to log_path (created or truncated). The child dies with its
// parent (a killed sweep leaves no orphan points running). Throws sb::Error when it cannot start.
pid_t start_point_process(const std::vector<std::string>& argv, const std::string& log_path);

// A finished child: exit code, or the signal that killed it.
struct ProcessExit {
  pid_t pid = -1;
  int code = -1;    // exit code when it exited
  int signal = 0;   // the signal that killed it, else 0
};

// Waits up to timeout_ms for any child to finish; pid -1 when none did in that time.
ProcessExit wait_point_process(int timeout_ms);

// "exit code 3" or "killed by signal 9 (Killed)".
std::string describe_exit(const ProcessExit& e);

// SIGINT, SIGTERM and SIGHUP set a flag instead of killing the sweep while `StopSignals` lives, so a sweep running
// child processes can stop them and leave whole records. Not nestable.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  // The signal received (0 when none).
  static int received();
};

}  // namespace sb
