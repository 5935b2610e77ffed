// OpProfile: where a training step's time goes, as self time of LibTorch operators grouped into categories.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

namespace sb {

// Counts, through LibTorch's RecordFunction callbacks, the self time (own time minus nested operators) of every
// operator run on the thread that called start(), between start() and stop(). On CPU the autograd engine runs
// backward on that thread too. One profile may be active at a time.
class OpProfile {
 public:
  enum Category { kGraphAttention, kMatmul, kLayerNorm, kGelu, kDropout, kOther, kCategories };
  static const char* category_name(int c);

  OpProfile() = default;
  ~OpProfile();
  OpProfile(const OpProfile&) = delete;
  OpProfile& operator=(const OpProfile&) = delete;

  // phase: an index < kPhases (e.g. 0 forward, 1 backward) under which this interval's times are summed.
  // The callbacks stay registered from the first start() until destruction; stop() only stops counting.
  void start(int phase);
  void stop();
  static constexpr int kPhases = 2;
  double seconds(int phase, int category) const { return ns_[phase][category] * 1e-9; }
  double seconds(int category) const { return seconds(0, category) + seconds(1, category); }

 private:
  std::array<std::array<int64_t, kCategories>, kPhases> ns_{};
  uint64_t handle_ = 0;
  bool active_ = false;
  friend struct OpProfileAccess;
};

}  // namespace sb
