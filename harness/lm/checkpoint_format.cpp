// Checkpoint envelope: magic line, SHA-256 of the payload, payload; read with every failure named.
#include "harness/lm/checkpoint_format.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "common/sha256.h"
#include "common/error.h"

namespace sb {

namespace {

constexpr const char* kMagic = "SBCKPT1\n";
constexpr size_t kMagicLen = 8;
constexpr size_t kHeaderLen = kMagicLen + 64 + 1;

std::string sha_of(const std::string& s, size_t from) {
  return sha256_hex(reinterpret_cast<const uint8_t*>(s.data()) + from, s.size() - from);
}

}  // namespace

std::string checkpoint_file_bytes(const std::string& payload) {
  return std::string(kMagic) + sha_of(payload, 0) + "\n" + payload;
}

std::string checkpoint_payload(const std::string& file, const std::string& path) {
  if (file.size() < kHeaderLen || file.compare(0, kMagicLen, kMagic) != 0 || file[kHeaderLen - 1] != '\n') {
    throw Error(fmt::format("checkpoint '{}' is not a sparsebench checkpoint (bad header); delete it or drop --resume",
                            path));
  }
  if (file.compare(kMagicLen, 64, sha_of(file, kHeaderLen)) != 0) {
    throw Error(fmt::format("checkpoint '{}' is corrupt (checksum mismatch: truncated or damaged); delete it or "
                            "drop --resume to start over",
                            path));
  }
  return file.substr(kHeaderLen);
}

std::string read_checkpoint_payload(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (std::filesystem::exists(st) && !std::filesystem::is_regular_file(st)) {
    throw Error(fmt::format("checkpoint '{}' is not a regular file (a directory?); move it away or drop --resume",
                            path));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("checkpoint '{}': cannot open: {}", path, std::strerror(errno)));
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error(fmt::format("checkpoint '{}': read failed", path));
  return checkpoint_payload(file, path);
}

}  // namespace sb
