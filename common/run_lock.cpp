// Run-directory locks: flock on DIR/.lock, the holder's "PID HOST TIME" inside, takeover of locks of dead processes.
#include "common/run_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>

#include "common/error.h"

namespace sb {

namespace {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string read_fd(int fd) {
  std::string text;
  char buf[512];
  off_t at = 0;
  while (text.size() < 4096) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    at += n;
  }
  return text;
}

LockHolder parse_holder(const std::string& text) {
  LockHolder h;
  std::istringstream in(text);
  long pid = 0;
  if (in >> pid && pid > 0) {
    h.pid = pid;
    in >> h.host >> h.since;
  }
  return h;
}

std::string describe(const LockHolder& h) {
  if (h.pid == 0) return "a process that did not name itself";
  return fmt::format("pid {} on host {}{}", h.pid, h.host.empty() ? "?" : h.host,
                     h.since.empty() ? "" : ", since " + h.since);
}

// The file systems that answer flock with these do not support it (e.g. some NFS and Lustre mounts).
bool flock_unsupported(int err) { return err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS || err == EINVAL; }

bool alive_here(const LockHolder& h) {
  if (h.pid <= 0 || h.host != host_name()) return false;
  return ::kill(static_cast<pid_t>(h.pid), 0) == 0 || errno == EPERM;
}

[[noreturn]] void refuse(const std::string& what, const std::string& dir, const LockHolder& h) {
  throw Error(fmt::format("{} {}: another process writes this run directory ({}); two writers would mix their "
                          "records. Wait for it to end (or stop it), or choose another directory",
                          what, dir, describe(h)));
}

}  // namespace

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "?";
  return buf;
}

LockHolder read_lock_holder(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  const LockHolder h = parse_holder(read_fd(fd));
  ::close(fd);
  return h;
}

RunDirLock::RunDirLock(const std::string& dir, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(fmt::format("{} {}: cannot create the directory: {}", what, dir, ec.message()));
  path_ = (std::filesystem::path(dir) / ".lock").string();
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw Error(fmt::format("{} {}: cannot create the lock file {}: {}", what, dir, path_, std::strerror(errno)));
  }
  int rc = 0;
  do {
    rc = ::flock(fd_, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  const int err = rc == 0 ? 0 : errno;
  const LockHolder before = parse_holder(read_fd(fd_));
  if (err == EWOULDBLOCK) {
    ::close(fd_);
    fd_ = -1;
    refuse(what, dir, before);
  }
  if (err != 0 && !flock_unsupported(err)) {
    const std::string reason = std::strerror(err);
    ::close(fd_);
    fd_ = -1;
    throw Error(fmt::format("{} {}: cannot lock {}: {}", what, dir, path_, reason));
  }
  if (err != 0) {
    // No kernel lock here: the PID in the file is all there is, and it can be checked only on this host.
    if (alive_here(before) && before.pid != static_cast<long>(::getpid())) {
      ::close(fd_);
      fd_ = -1;
      refuse(what, dir, before);
    }
    std::fprintf(stderr,
                 "warning: %s: this file system does not support locks (%s); a second writer of %s on another host "
                 "is not refused\n",
                 path_.c_str(), std::strerror(err), dir.c_str());
  }
  locked_ = err == 0;
  // A holder named in the file whose lock the kernel released: that process ended without releasing it (killed).
  if (before.pid != 0 && (locked_ || !alive_here(before))) taken_over_ = before;
  const std::string me = fmt::format("{} {} {}\n", static_cast<long>(::getpid()), host_name(), utc_now());
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    const std::string reason = std::strerror(errno);
    ::close(fd_);
    fd_ = -1;
    throw Error(fmt::format("{} {}: cannot write the lock file {}: {}", what, dir, path_, reason));
  }
}

RunDirLock::~RunDirLock() {
  if (fd_ < 0) return;
  // Emptied before the lock is released, so the next holder never reads this process's name as a dead holder.
  [[maybe_unused]] const int rc = ::ftruncate(fd_, 0);
  ::close(fd_);
}

bool lock_held_by_parent(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / ".lock").string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool held = false;
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
    ::flock(fd, LOCK_UN);  // free: nobody holds it
  } else if (errno == EWOULDBLOCK) {
    const LockHolder h = parse_holder(read_fd(fd));
    held = h.pid == static_cast<long>(::getppid()) && h.host == host_name();
  }
  ::close(fd);
  return held;
}

}  // namespace sb
