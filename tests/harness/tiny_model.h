// tiny_model_config: a language model small enough for the harness tests (2 layers, 2 heads, no dropout), the
// sizes that differ between them given.
#pragma once

#include <cstdint>
#include <string>

#include "harness/lm/config.h"

namespace sb::test {

inline ModelConfig tiny_model_config(const std::string& pattern, int64_t context, int64_t dim, int64_t ffn) {
  ModelConfig c;
  c.pattern = pattern;
  c.context = context;
  c.layers = 2;
  c.dim = dim;
  c.heads = 2;
  c.ffn = ffn;
  c.dropout = 0.0;
  return c;
}

}  // namespace sb::test
