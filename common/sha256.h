// SHA-256 as 64 lowercase hex digits (data provenance, checkpoint checksums, scenario hashes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace sb {

std::string sha256_hex(const uint8_t* data, size_t size);
std::string sha256_hex(const std::string& data);

}  // namespace sb
