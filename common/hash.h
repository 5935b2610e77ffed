// Small non-cryptographic hashes: FNV-1a over bytes (fingerprints, batch digests) and SplitMix64 (seed derivation).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace sb {

constexpr uint64_t kFnvBasis = 1469598103934665603ull;

// FNV-1a of `len` bytes continuing from `h` (start from kFnvBasis).
inline uint64_t fnv1a64(const void* data, size_t len, uint64_t h = kFnvBasis) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < len; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

// SplitMix64's finaliser: a well-mixed 64-bit value from any input (nearby seeds give unrelated streams).
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A seed for the stream named `name` under `seed`: the same (seed, name) always gives the same stream.
inline uint64_t derive_seed(uint64_t seed, const std::string& name) {
  return splitmix64(seed ^ fnv1a64(name.data(), name.size()));
}

}  // namespace sb
