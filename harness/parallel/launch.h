// Multi-process launch: the rank layout from torchrun's (or Slurm's) environment, and starting N local ranks.
// Plain C++, no LibTorch.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace sb {

// Where this process sits in a data-parallel run. A single process has world_size 1 and no rendezvous address.
struct RankLayout {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;  // ranks on this machine (splits the cores between them)
  std::string master_addr;   // rank 0's store: MASTER_ADDR:MASTER_PORT
  int master_port = 0;
  std::string source = "single process";  // "torchrun environment", "sparsebench --nproc launcher", "Slurm ..."
  // torchrun's agent hosts the store itself (TORCHELASTIC_USE_AGENT_STORE=True): every rank is a client and keys
  // go under this prefix ("/worker/attempt_N", N = TORCHELASTIC_RESTART_COUNT), as PyTorch's own ranks do.
  std::string agent_store_prefix;

  bool distributed() const { return world_size > 1; }
};

// Reads torchrun's contract (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT); without
// RANK/WORLD_SIZE but with MASTER_ADDR set, an srun step's SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID. `env`
// maps names to values (the process environment: environment_map()). Throws sb::Error naming the variable when
// one is malformed or missing.
RankLayout rank_layout_from_environment(const std::map<std::string, std::string>& env);
std::map<std::string, std::string> environment_map();

// A TCP port on 127.0.0.1 that was free a moment ago (for MASTER_PORT of local ranks).
int free_local_port();

// Starts `nproc` copies of this program (/proc/self/exe with `argv`), rank r with RANK=r, WORLD_SIZE=nproc,
// LOCAL_RANK=r, LOCAL_WORLD_SIZE=nproc, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT, and waits. When one exits
// non-zero or is killed, the others are stopped (SIGTERM, then SIGKILL after a grace period) and its exit status is
// returned (1 for a signal); SIGINT/SIGTERM/SIGHUP to this process reach every rank. Children die with this
// process. Returns 0 when every rank exits 0.
int run_local_ranks(const std::vector<std::string>& argv, int nproc);

}  // namespace sb
