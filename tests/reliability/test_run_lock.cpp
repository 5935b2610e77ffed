// The run-directory lock (common/run_lock.h): a second writer refused naming the holder, takeover of a killed
// holder's lock, release, and children of the holder recognised.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/run_lock.h"
#include "tests/scenarios/error_of.h"
#include "tests/scenarios/temp_dir.h"

using namespace sb;
using sb::test::error_of;
using sb::test::TempDir;

namespace {

std::string lock_text(const TempDir& d, const std::string& run) {
  std::ifstream in(d.file(run + "/.lock"));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Forks a child that takes the lock of `dir`, reports through a pipe and waits to be killed; returns its pid.
pid_t holder_process(const std::string& dir) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    try {
      RunDirLock lock(dir, "--out");
      const char ok = 1;
      [[maybe_unused]] const ssize_t w = ::write(fds[1], &ok, 1);
      while (true) ::pause();
    } catch (...) {
      ::_exit(1);
    }
  }
  ::close(fds[1]);
  char got = 0;
  EXPECT_EQ(::read(fds[0], &got, 1), 1);
  ::close(fds[0]);
  return pid;
}

void kill_and_reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

}  // namespace

TEST(RunDirLock, NamesItsHolderAndRefusesASecondWriter) {
  TempDir d("lock_second");
  const std::string run = d.file("run");
  RunDirLock first(run, "--out");
  EXPECT_TRUE(first.locked());
  EXPECT_EQ(first.taken_over().pid, 0);
  const LockHolder h = read_lock_holder(first.path());
  EXPECT_EQ(h.pid, static_cast<long>(::getpid()));
  EXPECT_EQ(h.host, host_name());
  EXPECT_FALSE(h.since.empty());
  // flock belongs to the open file, so even a second lock in this process is refused.
  const std::string msg = error_of([&] { RunDirLock second(run, "--out"); });
  EXPECT_NE(msg.find("--out " + run + ": another process writes this run directory"), std::string::npos) << msg;
  EXPECT_NE(msg.find("pid " + std::to_string(::getpid()) + " on host " + host_name()), std::string::npos) << msg;
  // The refused attempt left the holder's name in place.
  EXPECT_EQ(read_lock_holder(first.path()).pid, static_cast<long>(::getpid()));
}

TEST(RunDirLock, ReleasedLockIsEmptiedAndTakenAgain) {
  TempDir d("lock_release");
  const std::string run = d.file("run");
  { RunDirLock lock(run, "--out"); }
  EXPECT_TRUE(std::filesystem::exists(d.file("run/.lock")));
  EXPECT_EQ(lock_text(d, "run"), "");
  RunDirLock again(run, "--out");
  EXPECT_EQ(again.taken_over().pid, 0);  // released cleanly: nobody to take over from
}

TEST(RunDirLock, AnotherProcessIsRefusedUntilItIsKilledThenTakenOver) {
  TempDir d("lock_killed");
  const std::string run = d.file("run");
  const pid_t child = holder_process(run);
  const std::string msg = error_of([&] { RunDirLock lock(run, "merge --out"); });
  EXPECT_NE(msg.find("merge --out " + run), std::string::npos) << msg;
  EXPECT_NE(msg.find("pid " + std::to_string(child) + " on host " + host_name()), std::string::npos) << msg;
  kill_and_reap(child);  // kill -9: the kernel drops the lock, the file still names the child
  EXPECT_EQ(read_lock_holder(d.file("run/.lock")).pid, static_cast<long>(child));
  RunDirLock lock(run, "--out");
  EXPECT_EQ(lock.taken_over().pid, static_cast<long>(child));
  EXPECT_EQ(read_lock_holder(lock.path()).pid, static_cast<long>(::getpid()));
}

TEST(RunDirLock, ChildrenOfTheHolderAreRecognised) {
  TempDir d("lock_parent");
  const std::string run = d.file("run");
  auto child_says = [&]() {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(lock_held_by_parent(run) ? 10 : 11);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  EXPECT_EQ(child_says(), 11);  // no lock file yet
  {
    RunDirLock lock(run, "--out");
    EXPECT_EQ(child_says(), 10);
    EXPECT_FALSE(lock_held_by_parent(run));  // this process holds it, its parent does not
  }
  EXPECT_EQ(child_says(), 11);  // released
  // Held by an unrelated process (a sibling): not the parent's.
  const pid_t other = holder_process(run);
  EXPECT_EQ(child_says(), 11);
  kill_and_reap(other);
}

TEST(RunDirLock, UnwritableDirectoryIsNamed) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes anywhere";
  TempDir d("lock_ro");
  std::filesystem::create_directories(d.file("ro"));
  std::filesystem::permissions(d.file("ro"), std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  const std::string msg = error_of([&] { RunDirLock lock(d.file("ro/run"), "--out"); });
  std::filesystem::permissions(d.file("ro"), std::filesystem::perms::owner_all);
  EXPECT_NE(msg.find("--out " + d.file("ro/run")), std::string::npos) << msg;
  EXPECT_NE(msg.find("Permission denied"), std::string::npos) << msg;
}
