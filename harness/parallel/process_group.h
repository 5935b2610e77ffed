// Data-parallel collectives over PyTorch's c10d: a process group (Gloo on CPU, NCCL on CUDA where built) and the
// bucketed gradient all-reduce of the trainer.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "harness/parallel/launch.h"

namespace sb {

// A collective failed or timed out: another rank stopped, was killed or cannot be reached. Not a user error
// (`sparsebench train` exits 1 with this message).
struct RankFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Whether this build can run a process group for `device` ("cpu": Gloo, "cuda": NCCL); `why` says why not.
bool process_group_available(const std::string& device, std::string* why);

class ProcessGroup {
 public:
  // Joins the group of `layout` (rank 0 hosts the TCP store at MASTER_ADDR:MASTER_PORT). Every collective and
  // the rendezvous give up after `timeout`, with a RankFailure naming this rank. Throws sb::Error when the build
  // has no backend for the device.
  ProcessGroup(const RankLayout& layout, const torch::Device& device, std::chrono::milliseconds timeout);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& backend() const { return backend_; }

  // Sums each tensor over the ranks, in place (all started, then all waited). `what` names the exchange in errors.
  void all_reduce_sum(std::vector<torch::Tensor>& tensors, const std::string& what);
  void all_reduce_sum(torch::Tensor& tensor, const std::string& what);
  // Copies `root`'s tensors to every rank, in place.
  void broadcast(std::vector<torch::Tensor>& tensors, int root, const std::string& what);
  // Every rank's `mine`, in rank order (through the store, under `key`).
  std::vector<std::string> all_gather_text(const std::string& key, const std::string& mine);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, size_ = 1;
  std::string backend_;
  [[noreturn]] void fail(const std::string& what, const std::exception& e) const;
};

// The trainer's gradient exchange: parameters packed in order into flat buckets of at most `bucket_bytes` (a
// larger parameter has a bucket of its own; dtypes and devices never share one). average() makes every gradient
// the mean over the ranks: copy into the bucket, all-reduce, divide by the world size, copy back.
class GradientBuckets {
 public:
  static constexpr int64_t kDefaultBytes = int64_t{4} << 20;

  GradientBuckets(std::vector<torch::Tensor> params, int64_t bucket_bytes = kDefaultBytes);
  int64_t count() const { return static_cast<int64_t>(buckets_.size()); }
  // A parameter without a gradient counts as zeros and has one afterwards (every rank then updates it alike).
  // `also_sum` (e.g. the loss) are summed over the ranks in the same exchange.
  void average(ProcessGroup& pg, std::vector<torch::Tensor> also_sum = {});

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    torch::Tensor flat;          // [sum of numel]
  };
  std::vector<torch::Tensor> params_;
  std::vector<Bucket> buckets_;
};

}  // namespace sb
