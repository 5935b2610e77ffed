// Contention of timed regions: /proc and cgroup parsing on fixture text, the busy rule, and a busy-loop child
// process on one of our cores detected by the probe.
#include <gtest/gtest.h>

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "harness/measure/contention.h"

namespace {

sb::ReadFileFn fake_fs(const std::map<std::string, std::string>& files) {
  return [files](const std::string& path) -> std::optional<std::string> {
    const auto it = files.find(path);
    if (it == files.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace

TEST(Contention, ParsesProcStat) {
  const std::string text =
      "cpu  46923 10 9621 33327 678 0 240 498 0 0\n"
      "cpu0 23250 0 4206 17844 75 0 27 235 0 0\n"
      "intr 123 4 5\nctxt 99\nprocs_running 5\nprocs_blocked 0\n";
  const sb::ProcStat s = sb::parse_proc_stat(text);
  ASSERT_TRUE(s.ok);
  EXPECT_EQ(s.total, 46923 + 10 + 9621 + 33327 + 678 + 0 + 240 + 498);  // guest fields are inside user already
  EXPECT_EQ(s.steal, 498);
  EXPECT_EQ(s.procs_running, 5);
  // Old kernels: no steal column, no procs_running.
  const sb::ProcStat old = sb::parse_proc_stat("cpu 1 2 3 4 5\n");
  ASSERT_TRUE(old.ok);
  EXPECT_EQ(old.total, 15);
  EXPECT_EQ(old.steal, 0);
  EXPECT_EQ(old.procs_running, -1);
  EXPECT_FALSE(sb::parse_proc_stat("").ok);
  EXPECT_FALSE(sb::parse_proc_stat("cpu0 1 2 3 4\n").ok);  // per-CPU lines are not the aggregate
}

TEST(Contention, ParsesLoadavgTaskStateAndSchedstat) {
  EXPECT_EQ(sb::parse_loadavg_running("3.01 1.59 0.67 4/108 11335\n"), 4);
  EXPECT_EQ(sb::parse_loadavg_running("3.01 1.59 0.67\n"), -1);
  EXPECT_EQ(sb::parse_loadavg_running("1 2 3 /108 5"), -1);
  EXPECT_EQ(sb::parse_task_state("11443 (cat) R 11391 11391 8263 0"), 'R');
  EXPECT_EQ(sb::parse_task_state("77 (a) b (c)) S 1 2"), 'S');  // a command name holding ") "
  EXPECT_EQ(sb::parse_task_state("garbage"), 0);
  EXPECT_EQ(sb::parse_schedstat_wait("54243213 18533934 43\n"), 18533934);
  EXPECT_EQ(sb::parse_schedstat_wait(""), -1);
}

TEST(Contention, ParsesCgroupQuotas) {
  EXPECT_DOUBLE_EQ(sb::parse_cpu_max("max 100000\n"), 0.0);
  EXPECT_DOUBLE_EQ(sb::parse_cpu_max("150000 100000\n"), 1.5);
  EXPECT_DOUBLE_EQ(sb::parse_cpu_max("oops"), -1.0);
  EXPECT_DOUBLE_EQ(sb::parse_cpu_max("150000"), -1.0);
  EXPECT_DOUBLE_EQ(sb::parse_cfs_quota("-1\n", "100000\n"), 0.0);
  EXPECT_DOUBLE_EQ(sb::parse_cfs_quota("200000\n", "100000\n"), 2.0);
  EXPECT_DOUBLE_EQ(sb::parse_cfs_quota("x", "100000"), -1.0);

  // cgroup v2: the tightest of the cgroup and its ancestors.
  std::string source;
  const auto v2 = fake_fs({{"/cg/cpu.max", "max 100000\n"},
                           {"/cg/jobs/cpu.max", "300000 100000\n"},
                           {"/cg/jobs/42/cpu.max", "150000 100000\n"}});
  EXPECT_DOUBLE_EQ(sb::cgroup_cpu_quota("0::/jobs/42\n", v2, &source, "/cg"), 1.5);
  EXPECT_EQ(source, "/cg/jobs/42/cpu.max");
  EXPECT_DOUBLE_EQ(sb::cgroup_cpu_quota("0::/jobs\n", v2, &source, "/cg"), 3.0);
  source.clear();
  EXPECT_DOUBLE_EQ(sb::cgroup_cpu_quota("0::/\n", v2, &source, "/cg"), 0.0);  // "max": none
  EXPECT_EQ(source, "");

  // cgroup v1: the hierarchy naming the cpu controller, mounted under its controllers' names.
  const auto v1 = fake_fs({{"/cg/cpu,cpuacct/slurm/job7/cpu.cfs_quota_us", "400000\n"},
                           {"/cg/cpu,cpuacct/slurm/job7/cpu.cfs_period_us", "100000\n"},
                           {"/cg/cpu,cpuacct/cpu.cfs_quota_us", "-1\n"},
                           {"/cg/cpu,cpuacct/cpu.cfs_period_us", "100000\n"}});
  EXPECT_DOUBLE_EQ(sb::cgroup_cpu_quota("4:memory:/slurm/job7\n2:cpu,cpuacct:/slurm/job7\n0::/\n", v1, &source, "/cg"),
                   4.0);
  EXPECT_EQ(source, "/cg/cpu,cpuacct/slurm/job7/cpu.cfs_quota_us");
  EXPECT_DOUBLE_EQ(sb::cgroup_cpu_quota("2:cpuacct:/slurm/job7\n", v1, &source, "/cg"), 0.0);  // not the cpu one
  EXPECT_DOUBLE_EQ(sb::cgroup_cpu_quota("", v1, &source, "/cg"), 0.0);

  // This process: at least one usable core, never more than its affinity mask.
  const sb::CpuAllowance& a = sb::cpu_allowance();
  EXPECT_GE(a.usable, 1);
  EXPECT_LE(a.usable, a.affinity);
}

TEST(Contention, BusyRule) {
  sb::Contention c;
  c.threads = 2, c.usable_cpus = 2, c.samples = 6, c.runnable_others = 0, c.run_wait_share = 0.01, c.steal_share = 0;
  sb::judge_contention(c);
  EXPECT_FALSE(c.busy);
  EXPECT_TRUE(c.reasons.empty());
  c.cpu_share = 0.3;  // not judged: serial parts and passive waits lower it on an idle machine
  sb::judge_contention(c);
  EXPECT_FALSE(c.busy);
  c.runnable_others = 1;  // one other task, no free core
  sb::judge_contention(c);
  EXPECT_TRUE(c.busy);
  ASSERT_EQ(c.reasons.size(), 1u);
  EXPECT_NE(c.reasons[0].find("other runnable"), std::string::npos) << c.reasons[0];
  c.cpu_share = 0.95;  // ... while our threads ran the whole region: they lost nothing to it (seen on a quiet machine)
  sb::judge_contention(c);
  EXPECT_FALSE(c.busy);
  c.cpu_share = 0.3;
  c.threads = 1;  // one thread leaves a core free for it
  sb::judge_contention(c);
  EXPECT_FALSE(c.busy);
  c.run_wait_share = 0.2;
  c.steal_share = 0.06;
  c.runnable_others = 0, c.runnable_others_max = 0;  // waits with nobody else seen: wake-up latency, not judged
  sb::judge_contention(c);
  ASSERT_EQ(c.reasons.size(), 1u);
  EXPECT_NE(c.reasons[0].find("steal"), std::string::npos) << c.reasons[0];
  c.runnable_others = 1, c.runnable_others_max = 1;  // one other task beside our one thread, and we waited for it
  sb::judge_contention(c);
  EXPECT_EQ(c.reasons.size(), 2u);
  c.cpu_share = 0.97;  // ... but the thread ran the whole region: its waits were not lost to the other task
  sb::judge_contention(c);
  ASSERT_EQ(c.reasons.size(), 1u);
  EXPECT_NE(c.reasons[0].find("steal"), std::string::npos) << c.reasons[0];
  // A quiet machine's short calls (results/busy_machine/cpu-2core-idle): 2 threads on 2 cores that waited 57% of the
  // time behind each other while kept busy, one other task seen in one sample of nine: not busy.
  sb::Contention q;
  q.threads = 2, q.usable_cpus = 2, q.samples = 9, q.runnable_others = 0, q.runnable_others_max = 1;
  q.run_wait_share = 0.57, q.steal_share = 0, q.cpu_share = 1.07;
  sb::judge_contention(q);
  EXPECT_FALSE(q.busy) << q.reasons.front();
  q.cpu_share = 0.75;  // a serial part lowers the share, but nobody else was runnable in most samples
  sb::judge_contention(q);
  EXPECT_FALSE(q.busy) << q.reasons.front();
  q.threads = 1, q.runnable_others = 1;  // one free core, one other task in most samples, and we waited for it
  sb::judge_contention(q);
  ASSERT_EQ(q.reasons.size(), 1u);
  EXPECT_NE(q.reasons[0].find("waited for a CPU"), std::string::npos) << q.reasons[0];
  c.cpu_share = 0.3;
  c.run_wait_share = -1, c.steal_share = -1;  // unknown: not judged
  c.threads = 3;
  c.runnable_others = 0;
  sb::judge_contention(c);
  ASSERT_EQ(c.reasons.size(), 1u);
  EXPECT_NE(c.reasons[0].find("3 threads on 2 usable cores"), std::string::npos) << c.reasons[0];
  nlohmann::json record;
  sb::contention_to_json(c, record);
  EXPECT_EQ(record["busy_machine"], true);
  EXPECT_EQ(record["busy_reasons"].size(), 1u);
  EXPECT_TRUE(record["contention"]["run_wait_share"].is_null());
  EXPECT_EQ(record["contention"]["rule"], sb::kBusyRule);
}

// A busy-loop child pinned to one of our cores, while we keep every usable core busy: detected as busy, with our
// threads getting less than their cores.
TEST(Contention, BusyLoopChildOnOurCoreIsDetected) {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; ++c) {
    if (CPU_ISSET(c, &mine)) first = c;
  }
  ASSERT_GE(first, 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    sched_setaffinity(0, sizeof one, &one);
    volatile uint64_t x = 0;
    for (;;) x = x + 1;  // killed by the parent
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the child is running
  const int64_t threads = sb::cpu_allowance().usable;
  sb::ContentionProbe probe(threads);
  probe.start();
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int64_t t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      volatile uint64_t x = 0;
      while (!stop.load(std::memory_order_relaxed)) x = x + 1;
    });
  }
  for (int i = 0; i < 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    probe.sample();
  }
  stop = true;
  for (std::thread& w : workers) w.join();
  const sb::Contention c = probe.stop();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_TRUE(c.busy) << "cpu_share " << c.cpu_share << ", others " << c.runnable_others << ", wait "
                      << c.run_wait_share;
  EXPECT_GE(c.runnable_others, 1.0);
  EXPECT_GE(c.samples, 8);
  EXPECT_GT(c.wall_s, 0.3);
  EXPECT_GT(c.cpu_s, 0.0);
  // The child shares one of our cores: our threads get less than all of theirs (about half of that core is the
  // child's; at least a fifth of it whatever the scheduler's fairness).
  EXPECT_LT(c.cpu_s, c.wall_s * (static_cast<double>(threads) - 0.2)) << "cpu_share " << c.cpu_share;
  if (c.run_wait_share >= 0.0) EXPECT_GT(c.run_wait_share, 0.0);
}
