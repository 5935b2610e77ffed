// OpProfile: RecordFunction start/end callbacks keep a per-thread stack of frames to turn nested operator
// times into self times, summed per category.
#include "harness/measure/op_profile.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include <ATen/record_function.h>

#include "common/error.h"

namespace sb {

namespace {

struct Frame {
  int64_t start_ns;
  int64_t child_ns;
  int category;
  bool owns_children;  // sparsebench's own ops count the LibTorch ops they call (copies, workspaces) as theirs
};

OpProfile* g_active = nullptr;
std::thread::id g_thread;
int g_phase = 0;
thread_local std::vector<Frame> t_stack;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int categorise(const char* name) {
  static const char* kMatmul[] = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addmv", "aten::mv"};
  if (std::strncmp(name, "sparsebench::graph_attention", 28) == 0) return OpProfile::kGraphAttention;
  if (std::strcmp(name, "sparsebench::dropout") == 0) return OpProfile::kDropout;
  if (std::strcmp(name, "sparsebench::matmul") == 0) return OpProfile::kMatmul;  // fast_linear (oneDNN)
  for (const char* m : kMatmul) {
    if (std::strcmp(name, m) == 0) return OpProfile::kMatmul;
  }
  if (std::strstr(name, "layer_norm") != nullptr) return OpProfile::kLayerNorm;
  if (std::strstr(name, "gelu") != nullptr) return OpProfile::kGelu;
  return OpProfile::kOther;
}

}  // namespace

struct OpProfileAccess {
  static std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
    if (g_active == nullptr || std::this_thread::get_id() != g_thread) return nullptr;
    Frame f{now_ns(), 0, categorise(fn.name()), false};
    if (!t_stack.empty() && t_stack.back().owns_children) {
      f.category = t_stack.back().category;
      f.owns_children = true;
    } else {
      // fast_linear's frame also owns its children (allocations, the oneDNN call); aten's matmuls do not.
      f.owns_children = f.category == OpProfile::kGraphAttention || f.category == OpProfile::kDropout ||
                        (f.category == OpProfile::kMatmul && std::strcmp(fn.name(), "sparsebench::matmul") == 0);
    }
    t_stack.push_back(f);
    return nullptr;
  }
  static void on_end(const at::RecordFunction&, at::ObserverContext*) {
    if (g_active == nullptr || std::this_thread::get_id() != g_thread || t_stack.empty()) return;
    const Frame f = t_stack.back();
    t_stack.pop_back();
    const int64_t total = now_ns() - f.start_ns;
    if (!t_stack.empty()) t_stack.back().child_ns += total;
    g_active->ns_[g_phase][f.category] += total - f.child_ns;
  }
};

const char* OpProfile::category_name(int c) {
  static const char* kNames[] = {"graph_attention", "matmul", "layer_norm", "gelu", "dropout", "other_ops"};
  return kNames[c];
}

void OpProfile::start(int phase) {
  if (g_active != nullptr && g_active != this) throw Error("OpProfile: another profile is already active");
  if (phase < 0 || phase >= kPhases) throw Error("OpProfile: phase out of range");
  g_active = this;
  g_thread = std::this_thread::get_id();
  g_phase = phase;
  t_stack.clear();
  if (!active_) {
    handle_ = at::addGlobalCallback(
        at::RecordFunctionCallback(&OpProfileAccess::on_start, &OpProfileAccess::on_end)
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION, at::RecordScope::USER_SCOPE}));
    active_ = true;
  }
}

void OpProfile::stop() {
  if (g_active == this) g_active = nullptr;
}

OpProfile::~OpProfile() {
  stop();
  if (active_) at::removeCallback(handle_);
}

}  // namespace sb
