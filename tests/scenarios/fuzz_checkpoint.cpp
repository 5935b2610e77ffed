// libFuzzer target: checkpoint files -> the envelope reader (magic, checksum) and the guarded parse of the JSON
// info they carry; only sb::Error may escape. The LibTorch archive inside is exercised by seeded damage in
// tests/reliability/cases.py (corrupt_checkpoints). Built and run by tests/scenarios/run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string>

#include "harness/lm/checkpoint_format.h"
#include "common/json_guard.h"
#include "common/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    // As read from disk, and wrapped in a valid envelope so the payload reaches the info parser.
    (void)sb::checkpoint_payload(bytes, "fuzz.pt");
    const std::string payload = sb::checkpoint_payload(sb::checkpoint_file_bytes(bytes), "fuzz.pt");
    const nlohmann::json info = sb::parse_json_guarded(payload, "fuzz.pt: info", false);
    (void)sb::json_excerpt(info, 60);
  } catch (const sb::Error&) {
  }
  return 0;
}
