// libFuzzer target: checkpoint files -> the envelope reader (magic, checksum) and the body parser (header length,
// JSON header, tensor table bounds); only sb::Error may escape, and every accepted tensor lies inside the payload.
// Built and run by tests/scenarios/run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "harness/lm/checkpoint_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    // As read from disk, and wrapped in a valid envelope so the payload reaches the body parser.
    (void)sb::checkpoint_payload(bytes, "fuzz.pt");
    const sb::CheckpointBody body =
        sb::parse_checkpoint_body(sb::checkpoint_payload(sb::checkpoint_file_bytes(bytes), "fuzz.pt"), "fuzz.pt");
    for (const auto& t : body.tensors) {
      if (body.data_start + t.offset + t.nbytes > body.payload.size()) std::abort();
      if (t.nbytes > 0) {
        volatile char last = body.bytes(t)[t.nbytes - 1];  // in bounds, or ASan says so
        (void)last;
      }
    }
  } catch (const sb::Error&) {
  }
  return 0;
}
