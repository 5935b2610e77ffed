// libFuzzer target: scenario text -> parse -> validate -> (small ones) expand; only sb::Error may escape the library.
// Built and run by tests/scenarios/run_fuzz.sh (clang++ -fsanitize=fuzzer,address,undefined, no LibTorch).
#include <cstddef>
#include <cstdint>
#include <string>

#include "harness/scenario/scenario.h"
#include "common/error.h"

namespace {

// Expansion builds graphs; keep it to documents whose product of axes and lengths stay small.
bool small_enough(const sb::json& doc) {
  const sb::json& axes = doc["axes"];
  auto count = [](const sb::json& v) -> size_t { return v.is_array() ? v.size() : 1; };
  size_t points = count(axes["lengths"]);
  for (const sb::json& n : axes["lengths"]) {
    if (n.get<int64_t>() > 256) return false;
  }
  size_t entries = 0;
  for (const sb::json& e : axes["patterns"]) {
    size_t combos = 1;
    for (const auto& [key, value] : e.items()) {
      if (key == "name" || key == "label" || key == "attention" || key == "solve" || key == "max_length") continue;
      combos *= count(value);
      if (value.is_array()) {
        for (const sb::json& x : value) {
          if (x.is_number() && x.get<double>() > 1024) return false;
        }
      } else if (value.is_number() && value.get<double>() > 1024) {
        return false;
      }
    }
    entries += combos;
  }
  points *= entries;
  for (const char* k : {"tokens", "batch", "causal", "threads", "modes"}) {
    if (axes.contains(k)) points *= count(axes[k]);
  }
  return points <= 64;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const sb::json doc = sb::parse_scenario_text(text, "fuzz.json");
    const sb::Scenario s = sb::scenario_from_json(doc, "fuzz.json");
    if (small_enough(s.doc)) {
      for (const sb::Point& p : sb::expand_scenario(s)) (void)sb::point_to_json(s, p);
    }
  } catch (const sb::Error&) {
    // Rejected input: the message is the product; anything else escaping is a bug the fuzzer reports.
  }
  return 0;
}
