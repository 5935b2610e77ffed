// Byte-level enwik8 data: file loading, the train/valid/test split, hashing and sampling of windows.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "common/sha256.h"

namespace sb {

struct Split {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// The shortest file that trains at `context`: valid and test (5% each) must hold a window.
inline int64_t min_data_bytes(int64_t context) { return 20 * (context + 2); }

// Checks, without reading it, that `path` is a regular, non-empty file of at least min_bytes; throws sb::Error
// naming the file otherwise (a directory, /dev/zero, a missing file).
void check_data_file(const std::string& path, int64_t min_bytes);

// A whole enwik8 file in memory with its 90/5/5 split (the full file: [0,90M) / [90M,95M) / [95M,100M)).
class Enwik8 {
 public:
  // Throws sb::Error naming the file when it is missing, unreadable, empty or shorter than min_bytes.
  explicit Enwik8(const std::string& path, int64_t min_bytes = 1);

  const std::string& path() const { return path_; }
  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }
  const std::string& sha256() const { return sha256_; }
  bool is_full_enwik8() const { return size() == kFullSize; }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  Split train() const { return train_; }
  Split valid() const { return valid_; }
  Split test() const { return test_; }

  // Path, size, sha256 and split, as recorded in results.
  nlohmann::json provenance() const;

  static constexpr int64_t kFullSize = 100000000;

 private:
  std::string path_;
  std::vector<uint8_t> bytes_;
  std::string sha256_;
  Split train_, valid_, test_;
};

// The file at `path` read and hashed once per process (a sweep's points and their training runs share it); a later
// call checks min_bytes against it. Throws as Enwik8's constructor does.
std::shared_ptr<const Enwik8> shared_enwik8(const std::string& path, int64_t min_bytes = 1);
// Enwik8 files this process has read (the records show how many a point read).
int64_t enwik8_file_reads();

// Samples `batch` random windows of `length` bytes from `split`; returns [batch, length] int64.
torch::Tensor sample_windows(const Enwik8& data, Split split, int64_t batch, int64_t length, std::mt19937_64& rng);
// Draws the `batch` window starts of one step from `rng` (every rank draws them all, so the stream stays shared)
// and returns only rows [first_row, first_row + rows): [rows, length] int64. Rank r of W with `rows` = b takes
// rows [r*b, (r+1)*b) of the global batch of W*b windows that one process with batch W*b would train on.
torch::Tensor sample_windows(const Enwik8& data, Split split, int64_t batch, int64_t length, std::mt19937_64& rng,
                             int64_t first_row, int64_t rows);

// Evaluation windows covering every byte of a split once (after its first): windows of `context`
// inputs advancing by context/2; the first window scores all its targets, later ones the second half.
struct EvalWindow {
  int64_t start = 0;        // inputs are bytes [start, start + len), targets [start + 1, start + len + 1)
  int64_t len = 0;
  int64_t score_from = 0;   // targets with index >= score_from (within the window) are scored
};
// `limit` > 0 scores only about the first `limit` targets of the split.
std::vector<EvalWindow> eval_windows(Split split, int64_t context, int64_t limit = 0);

// Windows of `c` inputs that score the `limit` targets after the split's first `history` bytes (history >= c), each
// seeing between c - c/4 + 1 and c bytes of history: the same targets for every c <= history, so BPC at
// several available contexts compares like with like. Empty when the split holds no such target.
std::vector<EvalWindow> lens_windows(Split split, int64_t history, int64_t c, int64_t limit);

}  // namespace sb
