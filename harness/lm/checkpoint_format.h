// The checkpoint file format, without LibTorch: a checksummed envelope around a JSON header and raw tensor bytes.
// Every field is checked before any byte is used, so a damaged or forged file is refused, never trusted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sb {

// One tensor of a checkpoint: its name, element type, shape and where its bytes lie in the data section.
struct CheckpointTensor {
  std::string name;
  std::string dtype;           // "float32", "float64", "int64" or "uint8"
  std::vector<int64_t> shape;
  size_t offset = 0;           // into the data section
  size_t nbytes = 0;           // numel * element size
};

// A parsed checkpoint: free-form metadata, the tensor table, and the payload the tensors' bytes live in.
struct CheckpointBody {
  nlohmann::json meta;
  std::vector<CheckpointTensor> tensors;
  std::string payload;
  size_t data_start = 0;       // where the data section begins in `payload`

  const char* bytes(const CheckpointTensor& t) const { return payload.data() + data_start + t.offset; }
  // The named tensor, or nullptr.
  const CheckpointTensor* find(const std::string& name) const;
};

// Bytes per element of a checkpoint dtype name; 0 for an unknown name.
size_t checkpoint_dtype_size(const std::string& dtype);

// Builds a payload: tensors are appended in order, then finish() lays out
// [u64 little-endian header length][JSON header {"meta", "tensors"}][data section].
class CheckpointWriter {
 public:
  void add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape, const void* bytes,
           size_t nbytes);
  std::string finish(const nlohmann::json& meta) const;

 private:
  std::vector<CheckpointTensor> tensors_;
  std::string data_;
};

// The whole file for `payload`: "SBCKPT2\n", 64 hex digits of SHA-256 over the payload, "\n", payload.
std::string checkpoint_file_bytes(const std::string& payload);
// The payload of a checkpoint file's bytes; throws sb::Error naming `path` when the header is missing, names an
// older format, or the checksum does not match (truncated, damaged or not a checkpoint).
std::string checkpoint_payload(const std::string& file_bytes, const std::string& path);
// Parses a payload; throws sb::Error naming `path` and the field when the header or any tensor entry is malformed,
// out of range or overlaps the end of the data.
CheckpointBody parse_checkpoint_body(std::string payload, const std::string& path);
// Reads and parses `path`; throws sb::Error naming the file when it is missing, not a regular file, unreadable,
// or fails checkpoint_payload / parse_checkpoint_body.
CheckpointBody read_checkpoint(const std::string& path);

}  // namespace sb
