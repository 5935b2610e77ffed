// Atomic file replacement and durable appends with every system call checked.
#include "common/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "common/error.h"

namespace sb {

namespace {

// Writes all of `bytes` to `fd`; returns 0 or the errno of the failure.
int write_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    done += static_cast<size_t>(w);
  }
  return 0;
}

// fsync, where the file supports it (a pipe or character device answers EINVAL: nothing to sync).
int sync_fd(int fd) { return ::fsync(fd) == 0 || errno == EINVAL ? 0 : errno; }

}  // namespace

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(fmt::format("cannot write '{}': {}", tmp, std::strerror(errno)));
  int err = write_all(fd, bytes);
  if (err == 0) err = sync_fd(fd);
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    throw Error(fmt::format("cannot write '{}': {}", path, std::strerror(err)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    throw Error(fmt::format("cannot rename '{}' to '{}': {}", tmp, path, std::strerror(err)));
  }
  // The rename itself is durable only once the directory is synced.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // best effort: some file systems refuse fsync on directories
    ::close(dfd);
  }
}

void append_line_durable(const std::string& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(fmt::format("cannot append to '{}': {}", path, std::strerror(errno)));
  int err = write_all(fd, line + "\n");
  if (err == 0) err = sync_fd(fd);
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) throw Error(fmt::format("cannot append to '{}': {}", path, std::strerror(err)));
}

}  // namespace sb
