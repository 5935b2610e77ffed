// Byte-level enwik8 data: loading, the 90/5/5 split, SHA-256 provenance and window sampling.
#include "harness/lm/data.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "common/error.h"

namespace sb {

namespace {

std::atomic<int64_t> g_file_reads{0};

std::string too_short(const std::string& path, int64_t size, int64_t min_bytes) {
  return fmt::format(
      "data file '{}' is too short: {} bytes, need at least {} (valid and test, 5% each, must hold a context window)",
      path, size, min_bytes);
}

}  // namespace


void check_data_file(const std::string& path, int64_t min_bytes) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(st)) {
    throw Error(fmt::format("data file '{}': cannot open: {}", path, ec ? ec.message() : std::strerror(ENOENT)));
  }
  if (std::filesystem::is_directory(st)) throw Error(fmt::format("data file '{}' is a directory, not a file", path));
  if (!std::filesystem::is_regular_file(st)) {
    throw Error(fmt::format("data file '{}' is not a regular file (a device or pipe?); pass an enwik8 file", path));
  }
  const auto size = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  if (ec) throw Error(fmt::format("data file '{}': cannot read its size: {}", path, ec.message()));
  if (size == 0) {
    // A size of 0 is not proof of emptiness: /proc and /sys files report 0 and still have bytes to read.
    std::FILE* f = std::fopen(path.c_str(), "rb");
    const bool has_bytes = f && std::fgetc(f) != EOF;
    if (f) std::fclose(f);
    if (has_bytes) {
      throw Error(fmt::format("data file '{}' reports size 0 but has bytes to read (a /proc or /sys file?); "
                              "pass an enwik8 file",
                              path));
    }
    throw Error(fmt::format("data file '{}' is empty", path));
  }
  if (size < min_bytes) {
    throw Error(too_short(path, size, min_bytes));
  }
}

Enwik8::Enwik8(const std::string& path, int64_t min_bytes) : path_(path) {
  check_data_file(path, min_bytes);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error(fmt::format("data file '{}': cannot open: {}", path, std::strerror(errno)));
  std::fseek(f, 0, SEEK_END);
  const long size = std::ftell(f);
  std::fseek(f, 0, SEEK_SET);
  if (size < 0) {
    std::fclose(f);
    throw Error(fmt::format("data file '{}': cannot read its size (not a regular file?)", path));
  }
  bytes_.resize(static_cast<size_t>(size));
  const size_t got = size ? std::fread(bytes_.data(), 1, bytes_.size(), f) : 0;
  std::fclose(f);
  if (got != bytes_.size()) throw Error(fmt::format("data file '{}': read {} of {} bytes", path, got, size));
  if (size == 0) throw Error(fmt::format("data file '{}' is empty", path));
  if (size < min_bytes) {
    throw Error(too_short(path, size, min_bytes));
  }
  g_file_reads.fetch_add(1, std::memory_order_relaxed);
  sha256_ = sha256_hex(bytes_.data(), bytes_.size());
  // 90/5/5; for the full 10^8-byte file this is the standard [0,90M) / [90M,95M) / [95M,100M).
  const int64_t n = this->size();
  train_ = {0, n * 90 / 100};
  valid_ = {train_.end, n * 95 / 100};
  test_ = {valid_.end, n};
}

nlohmann::json Enwik8::provenance() const {
  auto split = [](Split s) { return nlohmann::json{{"begin", s.begin}, {"end", s.end}, {"bytes", s.size()}}; };
  return {{"path", path_},
          {"bytes", size()},
          {"sha256", sha256_},
          {"full_enwik8", is_full_enwik8()},
          {"split_rule", is_full_enwik8() ? "standard 90M/5M/5M" : "proportional 90/5/5"},
          {"train", split(train_)},
          {"valid", split(valid_)},
          {"test", split(test_)}};
}

torch::Tensor sample_windows(const Enwik8& data, Split split, int64_t batch, int64_t length, std::mt19937_64& rng) {
  return sample_windows(data, split, batch, length, rng, 0, batch);
}

torch::Tensor sample_windows(const Enwik8& data, Split split, int64_t batch, int64_t length, std::mt19937_64& rng,
                             int64_t first_row, int64_t rows) {
  if (split.size() < length) {
    throw Error(fmt::format("data file '{}': split of {} bytes is shorter than a window of {}", data.path(),
                            split.size(), length));
  }
  if (first_row < 0 || rows < 0 || first_row + rows > batch) {
    throw Error(fmt::format("sample_windows: rows [{}, {}) are not inside a batch of {}", first_row,
                            first_row + rows, batch));
  }
  auto out = torch::empty({rows, length}, torch::kInt64);
  auto* o = out.data_ptr<int64_t>();
  const uint8_t* b = data.bytes().data();
  const uint64_t span = static_cast<uint64_t>(split.size() - length + 1);
  for (int64_t i = 0; i < batch; ++i) {
    // Plain modulo keeps the draw identical across standard libraries (the bias is negligible here).
    const int64_t start = split.begin + static_cast<int64_t>(rng() % span);
    if (i < first_row || i >= first_row + rows) continue;
    int64_t* row = o + (i - first_row) * length;
    for (int64_t t = 0; t < length; ++t) row[t] = b[start + t];
  }
  return out;
}

std::vector<EvalWindow> eval_windows(Split split, int64_t context, int64_t limit) {
  // Targets are split bytes begin+1 .. end-1 (the first byte has no history inside the split).
  std::vector<EvalWindow> out;
  const int64_t n_targets = split.size() - 1;
  if (n_targets <= 0 || context <= 0) return out;
  const int64_t want = limit > 0 ? std::min(limit, n_targets) : n_targets;
  const int64_t len = std::min(context, n_targets);
  const int64_t stride = std::max<int64_t>(1, context / 2);
  int64_t scored = 0;  // targets [0, scored) (relative to begin+1) are done
  int64_t start = 0;   // relative to begin
  while (scored < want) {
    // The last window slides back so it stays full length (more history, never less).
    if (start + len > n_targets) start = n_targets - len;
    EvalWindow w;
    w.start = split.begin + start;
    w.len = len;
    w.score_from = scored - start;
    out.push_back(w);
    scored = start + len;
    start += stride;
  }
  return out;
}

std::vector<EvalWindow> lens_windows(Split split, int64_t history, int64_t c, int64_t limit) {
  std::vector<EvalWindow> out;
  if (c <= 0 || history < c) return out;
  const int64_t first = split.begin + history;  // absolute index of the first target
  const int64_t want = std::min(limit, split.end - first);
  const int64_t chunk = std::max<int64_t>(1, c / 4);  // targets scored per window
  for (int64_t next = first; next < first + want;) {
    const int64_t last = std::min(next + chunk, first + want) - 1;
    EvalWindow w;
    w.len = c;
    w.start = last - c;                   // targets start+1 .. start+c: the window ends at `last`
    w.score_from = next - w.start - 1;    // target t of the window is byte start + t + 1
    out.push_back(w);
    next = last + 1;
  }
  return out;
}

std::shared_ptr<const Enwik8> shared_enwik8(const std::string& path, int64_t min_bytes) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const Enwik8>> files;
  std::lock_guard<std::mutex> lock(mutex);
  auto& held = files[path];
  if (!held) {
    held = std::make_shared<const Enwik8>(path, min_bytes);
  } else if (held->size() < min_bytes) {
    throw Error(too_short(path, held->size(), min_bytes));
  }
  return held;
}

int64_t enwik8_file_reads() { return g_file_reads.load(std::memory_order_relaxed); }

}  // namespace sb
