// c10d process groups (Gloo on CPU, NCCL on CUDA) behind one small interface, and the bucketed gradient mean.
// SB_WITH_GLOO / SB_WITH_NCCL come from CMake's check that this LibTorch's headers and libraries provide them.
#include "harness/parallel/process_group.h"

#include <cstdlib>

#include <fmt/format.h>
#include <torch/version.h>

#if defined(SB_WITH_GLOO) || defined(SB_WITH_NCCL)
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif
#ifdef SB_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef SB_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "common/error.h"
#include "harness/measure/device.h"

namespace sb {

namespace {

std::string first_line(const std::string& s) {
  const std::string line = s.substr(0, s.find('\n'));
  return line.size() > 400 ? line.substr(0, 400) + "..." : line;
}

// Rank 0 hosts the TCP store, unless torchrun's agent already does.
[[maybe_unused]] bool hosts_store(const RankLayout& layout) {
  return layout.rank == 0 && layout.agent_store_prefix.empty();
}

}  // namespace

bool process_group_available(const std::string& device, std::string* why) {
  std::string reason;
#ifndef SB_WITH_GLOO
  if (device == "cpu") {
    reason = "this build has no Gloo process group (LibTorch's c10d with Gloo was not found at configure time; "
             "on Debian install libgloo-dev and reconfigure)";
  }
#endif
#ifndef SB_WITH_NCCL
  if (device == "cuda") {
    reason = "this build has no NCCL process group (it needs a CUDA build of LibTorch 2.x whose c10d has NCCL)";
  }
#endif
  if (why) *why = reason;
  return reason.empty();
}

#if defined(SB_WITH_GLOO) || defined(SB_WITH_NCCL)
// LibTorch 2.x split ProcessGroup into a dispatching front and per-device Backends; 1.x backends are groups.
#if TORCH_VERSION_MAJOR >= 2
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif

struct ProcessGroup::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<BackendBase> group;
};

ProcessGroup::ProcessGroup(const RankLayout& layout, const torch::Device& device, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()), rank_(layout.rank), size_(layout.world_size) {
  std::string why;
  if (!process_group_available(device.is_cuda() ? "cuda" : "cpu", &why)) throw Error(why);
  const std::string where = fmt::format("{}:{}", layout.master_addr, layout.master_port);
  try {
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<uint16_t>(layout.master_port);
    opts.isServer = hosts_store(layout);
    opts.numWorkers = static_cast<size_t>(layout.world_size);
    opts.waitWorkers = true;
    opts.timeout = timeout;
    impl_->store = c10::make_intrusive<c10d::TCPStore>(layout.master_addr, opts);
    if (!layout.agent_store_prefix.empty()) {
      impl_->store = c10::make_intrusive<c10d::PrefixStore>(layout.agent_store_prefix, impl_->store);
    }
  } catch (const std::exception& e) {
    // torchrun's agent hosts the store with its own torch: a launcher of another release speaks another protocol.
    const std::string hint =
        layout.agent_store_prefix.empty()
            ? ""
            : fmt::format(" (is torchrun from the same torch release as this build's LibTorch {}? the store "
                          "protocol differs between releases)",
                          libtorch_version());
    throw RankFailure(fmt::format(
        "rank {} of {}: cannot meet the other ranks at {} ({} from the {}) within {} s: {}{}", rank_, size_, where,
        hosts_store(layout) ? "hosting the store" : "the store", layout.source,
        std::chrono::duration_cast<std::chrono::seconds>(timeout).count(), first_line(e.what()), hint));
  }
  try {
    if (device.is_cuda()) {
#ifdef SB_WITH_NCCL
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = timeout;
      impl_->group = c10::make_intrusive<c10d::ProcessGroupNCCL>(impl_->store, rank_, size_, opts);
      backend_ = "nccl";
#endif
    } else {
#ifdef SB_WITH_GLOO
      auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
      // Local ranks talk over loopback; elsewhere GLOO_SOCKET_IFNAME picks the interface (as in PyTorch), else
      // the address this machine's hostname resolves to.
      const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
      if (layout.master_addr == "127.0.0.1" || layout.master_addr == "localhost") {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      } else if (ifname && *ifname) {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
      } else {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      }
      opts->threads = 2;
      impl_->group = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, rank_, size_, opts);
      backend_ = "gloo";
#endif
    }
  } catch (const std::exception& e) {
    throw RankFailure(fmt::format("rank {} of {}: cannot connect the {} process group through {}: {}", rank_, size_,
                                  device.is_cuda() ? "NCCL" : "Gloo", where, first_line(e.what())));
  }
}

ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::fail(const std::string& what, const std::exception& e) const {
  throw RankFailure(fmt::format("rank {} of {}: {} failed: another rank stopped, was killed or did not answer in "
                                "time ({}: {})",
                                rank_, size_, what, backend_, first_line(e.what())));
}

void ProcessGroup::all_reduce_sum(std::vector<torch::Tensor>& tensors, const std::string& what) {
  try {
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (torch::Tensor& t : tensors) {
      std::vector<torch::Tensor> one{t};
      works.push_back(impl_->group->allreduce(one));
    }
    for (auto& w : works) w->wait();
  } catch (const std::exception& e) {
    fail(what, e);
  }
}

void ProcessGroup::broadcast(std::vector<torch::Tensor>& tensors, int root, const std::string& what) {
  try {
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (torch::Tensor& t : tensors) {
      std::vector<torch::Tensor> one{t};
      works.push_back(impl_->group->broadcast(one, opts));
    }
    for (auto& w : works) w->wait();
  } catch (const std::exception& e) {
    fail(what, e);
  }
}

std::vector<std::string> ProcessGroup::all_gather_text(const std::string& key, const std::string& mine) {
  std::vector<std::string> out;
  try {
    impl_->store->set(fmt::format("sb/{}/{}", key, rank_), std::vector<uint8_t>(mine.begin(), mine.end()));
    for (int r = 0; r < size_; ++r) {
      const std::vector<uint8_t> v = impl_->store->get(fmt::format("sb/{}/{}", key, r));
      out.emplace_back(v.begin(), v.end());
    }
  } catch (const std::exception& e) {
    fail("exchanging " + key, e);
  }
  return out;
}

#else  // no c10d backend in this build

struct ProcessGroup::Impl {};

ProcessGroup::ProcessGroup(const RankLayout& layout, const torch::Device& device, std::chrono::milliseconds)
    : rank_(layout.rank), size_(layout.world_size) {
  std::string why;
  process_group_available(device.is_cuda() ? "cuda" : "cpu", &why);
  throw Error(fmt::format("world size {} ({}): {}", layout.world_size, layout.source, why));
}
ProcessGroup::~ProcessGroup() = default;
void ProcessGroup::fail(const std::string& what, const std::exception& e) const {
  throw RankFailure(fmt::format("{}: {}", what, e.what()));
}
void ProcessGroup::all_reduce_sum(std::vector<torch::Tensor>&, const std::string&) {}
void ProcessGroup::broadcast(std::vector<torch::Tensor>&, int, const std::string&) {}
std::vector<std::string> ProcessGroup::all_gather_text(const std::string&, const std::string& mine) { return {mine}; }

#endif

void ProcessGroup::all_reduce_sum(torch::Tensor& tensor, const std::string& what) {
  std::vector<torch::Tensor> one{tensor};
  all_reduce_sum(one, what);
}

GradientBuckets::GradientBuckets(std::vector<torch::Tensor> params, int64_t bucket_bytes)
    : params_(std::move(params)) {
  if (bucket_bytes < 1) throw Error(fmt::format("gradient buckets: expected a size >= 1 byte, got {}", bucket_bytes));
  int64_t filled = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& p = params_[i];
    const int64_t bytes = p.numel() * static_cast<int64_t>(p.element_size());
    bool fresh = buckets_.empty() || filled + bytes > bucket_bytes;
    if (!fresh) {
      const torch::Tensor& head = params_[buckets_.back().params.front()];
      fresh = head.scalar_type() != p.scalar_type() || head.device() != p.device();
    }
    if (fresh) {
      buckets_.emplace_back();
      filled = 0;
    }
    buckets_.back().params.push_back(i);
    filled += bytes;
  }
  for (Bucket& b : buckets_) {
    int64_t n = 0;
    for (size_t i : b.params) n += params_[i].numel();
    b.flat = torch::empty({n}, params_[b.params.front()].options().requires_grad(false));
  }
}

void GradientBuckets::average(ProcessGroup& pg, std::vector<torch::Tensor> also_sum) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flats = std::move(also_sum);
  for (Bucket& b : buckets_) {
    int64_t at = 0;
    for (size_t i : b.params) {
      const torch::Tensor& p = params_[i];
      auto slot = b.flat.narrow(0, at, p.numel());
      if (p.grad().defined()) slot.copy_(p.grad().reshape({-1}));
      else slot.zero_();
      at += p.numel();
    }
    flats.push_back(b.flat);
  }
  pg.all_reduce_sum(flats, "the gradient all-reduce");
  for (Bucket& b : buckets_) {
    b.flat.div_(pg.size());
    int64_t at = 0;
    for (size_t i : b.params) {
      torch::Tensor p = params_[i];
      auto slot = b.flat.narrow(0, at, p.numel()).view(p.sizes());
      if (p.grad().defined()) p.mutable_grad().copy_(slot);
      else p.mutable_grad() = slot.clone();
      at += p.numel();
    }
  }
}

}  // namespace sb
