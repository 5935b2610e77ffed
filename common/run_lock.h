// One writer per run directory: an advisory lock on DIR/.lock (flock) naming its holder's PID and host.
#pragma once

#include <string>

namespace sb {

// Who holds (or last held) a run directory's lock, as written inside DIR/.lock.
struct LockHolder {
  long pid = 0;      // 0 when the file names nobody
  std::string host;  // the holder's host name
  std::string since; // UTC time it was taken
};

// The holder named in `path` (a .lock file); pid 0 when it names nobody or cannot be read.
LockHolder read_lock_holder(const std::string& path);

// Holds DIR/.lock for its lifetime. The lock is the kernel's (flock), so it ends with the process however it ends
// (kill -9 included): a lock left by a dead process is simply taken over. While held, the file names this process
// ("PID HOST TIME"); released, the file is emptied and left in place (removing it would let two processes lock two
// different files of one name).
class RunDirLock {
 public:
  // Creates DIR when missing and takes its lock. Throws sb::Error "WHAT DIR: another process writes this run
  // directory (pid P on host H, since T) ..." when a live process holds it; `what` names the option or command
  // ("--out", "merge --out"). Where the file system does not support flock, warns once and goes on unlocked.
  RunDirLock(const std::string& dir, const std::string& what);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

  const std::string& path() const { return path_; }
  // False where the file system refused flock (no protection; the file still names the writer).
  bool locked() const { return locked_; }
  // The holder this lock replaced when it was left by a process that ended without releasing it (pid 0: none).
  const LockHolder& taken_over() const { return taken_over_; }

 private:
  std::string path_;
  int fd_ = -1;
  bool locked_ = false;
  LockHolder taken_over_;
};

// True when DIR/.lock is held by the parent of this process: a child started by the run that holds the directory
// (a point process of `run --jobs N`) writes under that run's lock instead of taking it.
bool lock_held_by_parent(const std::string& dir);

// This machine's host name ("?" when unknown).
std::string host_name();

}  // namespace sb
