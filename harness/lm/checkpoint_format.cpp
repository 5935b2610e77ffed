// Checkpoint file format: envelope (magic, SHA-256) and a bounds-checked JSON + raw-bytes body.
#include "harness/lm/checkpoint_format.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include <fmt/format.h>

#include "common/error.h"
#include "common/json_guard.h"
#include "common/sha256.h"

namespace sb {

namespace {

constexpr const char* kMagic = "SBCKPT2\n";
constexpr const char* kOldMagic = "SBCKPT1\n";
constexpr size_t kMagicLen = 8;
constexpr size_t kHeaderLen = kMagicLen + 64 + 1;
constexpr size_t kLengthBytes = 8;
// Far above any model this harness trains, far below what overflows size_t arithmetic.
constexpr int64_t kMaxDim = int64_t{1} << 40;
constexpr uint64_t kMaxNumel = uint64_t{1} << 44;
constexpr size_t kMaxRank = 8;

std::string sha_of(const std::string& s, size_t from) {
  return sha256_hex(reinterpret_cast<const uint8_t*>(s.data()) + from, s.size() - from);
}

[[noreturn]] void damaged(const std::string& path, const std::string& what) {
  throw Error(fmt::format("checkpoint '{}' is damaged ({}); delete it or drop --resume to start over", path, what));
}

// A non-negative integer field of a tensor entry, or a damaged-file error naming it.
uint64_t entry_uint(const nlohmann::json& e, const char* key, const std::string& path, const std::string& where) {
  const auto it = e.find(key);
  if (it == e.end() || !it->is_number_unsigned()) damaged(path, fmt::format("{}: '{}' is not a non-negative integer", where, key));
  return it->get<uint64_t>();
}

}  // namespace

const CheckpointTensor* CheckpointBody::find(const std::string& name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

size_t checkpoint_dtype_size(const std::string& dtype) {
  if (dtype == "float32") return 4;
  if (dtype == "float64" || dtype == "int64") return 8;
  if (dtype == "uint8") return 1;
  return 0;
}

void CheckpointWriter::add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
                           const void* bytes, size_t nbytes) {
  CheckpointTensor t{name, dtype, shape, data_.size(), nbytes};
  data_.append(static_cast<const char*>(bytes), nbytes);
  tensors_.push_back(std::move(t));
}

std::string CheckpointWriter::finish(const nlohmann::json& meta) const {
  nlohmann::json table = nlohmann::json::array();
  for (const auto& t : tensors_) {
    table.push_back({{"name", t.name}, {"dtype", t.dtype}, {"shape", t.shape}, {"offset", t.offset},
                     {"nbytes", t.nbytes}});
  }
  const std::string header = nlohmann::json{{"meta", meta}, {"tensors", table}}.dump();
  std::string out(kLengthBytes, '\0');
  uint64_t len = header.size();
  for (size_t i = 0; i < kLengthBytes; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  out += header;
  out += data_;
  return out;
}

std::string checkpoint_file_bytes(const std::string& payload) {
  return std::string(kMagic) + sha_of(payload, 0) + "\n" + payload;
}

std::string checkpoint_payload(const std::string& file, const std::string& path) {
  if (file.size() >= kMagicLen && file.compare(0, kMagicLen, kOldMagic) == 0) {
    throw Error(fmt::format("checkpoint '{}' has format 1 (LibTorch archive), which this version no longer reads; "
                            "delete it or drop --resume to start over",
                            path));
  }
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

CheckpointBody parse_checkpoint_body(std::string payload, const std::string& path) {
  if (payload.size() < kLengthBytes) damaged(path, "no header length");
  uint64_t len = 0;
  for (size_t i = 0; i < kLengthBytes; ++i) len |= uint64_t{static_cast<uint8_t>(payload[i])} << (8 * i);
  if (len > payload.size() - kLengthBytes) damaged(path, fmt::format("header length {} exceeds the file", len));
  const nlohmann::json header =
      parse_json_guarded(payload.substr(kLengthBytes, len), fmt::format("checkpoint '{}': header", path), false);
  if (!header.is_object() || !header.contains("meta") || !header["meta"].is_object() || !header.contains("tensors") ||
      !header["tensors"].is_array()) {
    damaged(path, "header lacks the 'meta' object or the 'tensors' array");
  }
  CheckpointBody body;
  body.data_start = kLengthBytes + len;
  const uint64_t data_size = payload.size() - body.data_start;
  std::set<std::string> names;
  size_t index = 0;
  for (const auto& e : header["tensors"]) {
    const std::string where = fmt::format("/tensors/{}", index++);
    if (!e.is_object()) damaged(path, fmt::format("{} is not an object", where));
    CheckpointTensor t;
    if (!e.contains("name") || !e["name"].is_string() || e["name"].get_ref<const std::string&>().empty()) {
      damaged(path, fmt::format("{}: 'name' is not a non-empty string", where));
    }
    t.name = e["name"].get<std::string>();
    if (!names.insert(t.name).second) damaged(path, fmt::format("{}: tensor '{}' appears twice", where, t.name));
    if (!e.contains("dtype") || !e["dtype"].is_string() || checkpoint_dtype_size(e["dtype"].get<std::string>()) == 0) {
      damaged(path, fmt::format("{}: 'dtype' is not one of float32, float64, int64, uint8", where));
    }
    t.dtype = e["dtype"].get<std::string>();
    if (!e.contains("shape") || !e["shape"].is_array() || e["shape"].size() > kMaxRank) {
      damaged(path, fmt::format("{}: 'shape' is not an array of at most {} sizes", where, kMaxRank));
    }
    uint64_t numel = 1;
    for (const auto& d : e["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(kMaxDim)) {
        damaged(path, fmt::format("{}: 'shape' holds {} (expected sizes in [0, 2^40])", where, json_excerpt(d)));
      }
      t.shape.push_back(d.get<int64_t>());
      numel = (numel == 0 || d.get<uint64_t>() == 0) ? 0 : numel * d.get<uint64_t>();
      if (numel > kMaxNumel) damaged(path, fmt::format("{}: 'shape' has more than 2^44 elements", where));
    }
    const uint64_t offset = entry_uint(e, "offset", path, where);
    const uint64_t nbytes = entry_uint(e, "nbytes", path, where);
    if (nbytes != numel * checkpoint_dtype_size(t.dtype)) {
      damaged(path, fmt::format("{}: 'nbytes' {} does not match shape and dtype", where, nbytes));
    }
    if (offset > data_size || nbytes > data_size - offset) {
      damaged(path, fmt::format("{}: bytes [{}, +{}) lie outside the {}-byte data section", where, offset, nbytes,
                                data_size));
    }
    t.offset = offset;
    t.nbytes = nbytes;
    body.tensors.push_back(std::move(t));
  }
  body.meta = header["meta"];
  body.payload = std::move(payload);
  return body;
}

CheckpointBody read_checkpoint(const std::string& path) {
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
  return parse_checkpoint_body(checkpoint_payload(file, path), path);
}

}  // namespace sb
