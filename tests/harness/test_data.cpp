// Data tests: SHA-256, the 90/5/5 split of the enwik8 prefix, evaluation windows, and bad-file messages.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "harness/lm/data.h"
#include "common/error.h"

namespace {

const std::string kPrefix = SB_SOURCE_DIR "/../shared/data/enwik8-head.bin";

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("sb_test_data_" + name)).string();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string error_of(const std::string& path, int64_t min_bytes) {
  try {
    sb::Enwik8 d(path, min_bytes);
  } catch (const sb::Error& e) {
    return e.what();
  }
  return "";
}

TEST(Sha256, KnownVectors) {
  auto h = [](const std::string& s) { return sb::sha256_hex(reinterpret_cast<const uint8_t*>(s.data()), s.size()); };
  EXPECT_EQ(h(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(h("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 56 bytes: the padding spills into a second block.
  EXPECT_EQ(h("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(h(std::string(1000, 'a')), "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
}

TEST(Enwik8, PrefixSplitAndHashes) {
  if (!std::filesystem::exists(kPrefix)) GTEST_SKIP() << "shared data not present: " << kPrefix;
  sb::Enwik8 d(kPrefix);
  EXPECT_EQ(d.size(), 4154399);
  EXPECT_FALSE(d.is_full_enwik8());
  EXPECT_EQ(d.sha256(), "d502ac7ecb9dd47a062e7d19b8dcd3c753b07c142e48b13dcd521cb747116bdd");
  EXPECT_EQ(sb::sha256_hex(d.bytes().data(), 1000000),
            "369b688978f649681136198fb96db14c1616756260c55fb4b65e9bc049552cad");
  EXPECT_EQ(d.train().begin, 0);
  EXPECT_EQ(d.train().end, 3738959);  // floor(0.90 * n)
  EXPECT_EQ(d.valid().begin, 3738959);
  EXPECT_EQ(d.valid().end, 3946679);  // floor(0.95 * n)
  EXPECT_EQ(d.test().begin, 3946679);
  EXPECT_EQ(d.test().end, 4154399);
  const auto p = d.provenance();
  EXPECT_EQ(p["sha256"], d.sha256());
  EXPECT_EQ(p["valid"]["bytes"], 207720);
  EXPECT_EQ(p["split_rule"], "proportional 90/5/5");
}

TEST(Enwik8, FullFileGetsStandardSplit) {
  // Only the size decides the rule; a sparse file of 10^8 bytes avoids holding real data.
  const std::string path = temp_path("full");
  std::filesystem::remove(path);
  { std::ofstream(path, std::ios::binary); }
  std::filesystem::resize_file(path, sb::Enwik8::kFullSize);
  sb::Enwik8 d(path);
  std::filesystem::remove(path);
  EXPECT_TRUE(d.is_full_enwik8());
  EXPECT_EQ(d.train().end, 90000000);
  EXPECT_EQ(d.valid().end, 95000000);
  EXPECT_EQ(d.test().end, 100000000);
  EXPECT_EQ(d.provenance()["split_rule"], "standard 90M/5M/5M");
}

TEST(Enwik8, BadFilesNameTheFile) {
  const std::string missing = temp_path("missing.bin");
  std::filesystem::remove(missing);
  std::string msg = error_of(missing, 1);
  EXPECT_NE(msg.find("data file '" + missing + "': cannot open"), std::string::npos) << msg;

  const std::string empty = temp_path("empty.bin");
  write_bytes(empty, "");
  msg = error_of(empty, 1);
  EXPECT_EQ(msg, "data file '" + empty + "' is empty");

  const std::string short_file = temp_path("short.bin");
  write_bytes(short_file, std::string(100, 'x'));
  msg = error_of(short_file, 1000);
  EXPECT_NE(msg.find("data file '" + short_file + "' is too short: 100 bytes, need at least 1000"),
            std::string::npos)
      << msg;
  std::filesystem::remove(empty);
  std::filesystem::remove(short_file);
}

// Every target of the split is scored exactly once, with at least half a context of history.
TEST(EvalWindows, CoverEveryTargetOnce) {
  for (int64_t size : {2, 3, 10, 17, 64, 65, 1000}) {
    for (int64_t context : {2, 4, 7, 16}) {
      sb::Split split{100, 100 + size};
      const auto windows = sb::eval_windows(split, context);
      std::vector<int> hits(static_cast<size_t>(size), 0);
      for (size_t w = 0; w < windows.size(); ++w) {
        const auto& win = windows[w];
        EXPECT_GE(win.start, split.begin);
        EXPECT_LE(win.start + win.len + 1, split.end);
        EXPECT_EQ(win.len, std::min(context, size - 1));
        if (w == 0) {
          EXPECT_EQ(win.score_from, 0);
        } else {
          EXPECT_GE(win.score_from + 1, context / 2) << "history for size " << size << " context " << context;
        }
        for (int64_t t = win.score_from; t < win.len; ++t) hits[static_cast<size_t>(win.start + t + 1 - 100)] += 1;
      }
      EXPECT_EQ(hits[0], 0);
      for (int64_t i = 1; i < size; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)], 1) << size << " " << context << " " << i;
    }
  }
}

TEST(EvalWindows, LimitStopsEarly) {
  const auto all = sb::eval_windows({0, 100001}, 512);
  const auto some = sb::eval_windows({0, 100001}, 512, 4096);
  EXPECT_LT(some.size(), all.size());
  int64_t scored = 0;
  for (const auto& w : some) scored += w.len - w.score_from;
  EXPECT_GE(scored, 4096);
  EXPECT_LT(scored, 4096 + 512);
}

// BPC by available context: every c scores the same targets once, each seeing between c - c/4 + 1 and c bytes.
TEST(LensWindows, SameTargetsForEveryContextWithBoundedHistory) {
  const sb::Split split{1000, 6000};
  const int64_t history = 64, limit = 777;
  for (int64_t c : {1, 2, 3, 16, 17, 64}) {
    const auto windows = sb::lens_windows(split, history, c, limit);
    std::vector<int> hits(static_cast<size_t>(split.size()), 0);
    for (const auto& w : windows) {
      EXPECT_EQ(w.len, c);
      EXPECT_GE(w.start, split.begin);
      for (int64_t t = w.score_from; t < w.len; ++t) {
        const int64_t seen = t + 1;  // inputs start .. start + t
        EXPECT_GE(seen, c - std::max<int64_t>(1, c / 4) + 1) << "c " << c;
        EXPECT_LE(seen, c);
        hits[static_cast<size_t>(w.start + t + 1 - split.begin)] += 1;
      }
    }
    for (int64_t i = 0; i < split.size(); ++i) {
      const bool scored = i >= history && i < history + limit;
      EXPECT_EQ(hits[static_cast<size_t>(i)], scored ? 1 : 0) << "c " << c << " byte " << i;
    }
  }
  EXPECT_TRUE(sb::lens_windows(split, 16, 32, limit).empty());  // c beyond the history it was promised
  int64_t scored = 0;  // the split's end caps the targets
  for (const auto& w : sb::lens_windows({0, 100}, 64, 16, 1000)) scored += w.len - w.score_from;
  EXPECT_EQ(scored, 36);
}

TEST(SampleWindows, StayInsideTheSplit) {
  const std::string path = temp_path("ramp.bin");
  std::string bytes(2000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i % 251);
  write_bytes(path, bytes);
  sb::Enwik8 d(path);
  std::filesystem::remove(path);
  std::mt19937_64 rng(3);
  auto w = sb::sample_windows(d, d.valid(), 64, 33, rng);
  ASSERT_EQ(w.sizes(), (std::vector<int64_t>{64, 33}));
  auto a = w.accessor<int64_t, 2>();
  for (int64_t i = 0; i < 64; ++i) {
    // A contiguous run of the ramp whose start lies in the valid split [1800, 1900 - 33] (1800 % 251 = 43).
    EXPECT_GE(a[i][0], 43);
    EXPECT_LE(a[i][0], 43 + 67);
    for (int64_t t = 1; t < 33; ++t) EXPECT_EQ(a[i][t], (a[i][t - 1] + 1) % 251);
  }
}

}  // namespace
