// The checkpoint file's envelope, without LibTorch: "SBCKPT1\n", 64 hex digits of SHA-256 over the payload,
// "\n", then the payload (a LibTorch archive). Kept apart so the envelope reader can be fuzzed on its own.
#pragma once

#include <string>

namespace sb {

// The whole file for `payload`.
std::string checkpoint_file_bytes(const std::string& payload);

// The payload of a checkpoint file's bytes; throws sb::Error naming `path` when the header is missing or
// the checksum does not match (truncated, damaged or not a checkpoint).
std::string checkpoint_payload(const std::string& file_bytes, const std::string& path);

// Reads `path` and returns its payload; throws sb::Error naming the file when it is missing, not a regular
// file, unreadable, or fails checkpoint_payload.
std::string read_checkpoint_payload(const std::string& path);

}  // namespace sb
