// libFuzzer target: scenario text -> parse -> validate -> point count and cap -> (small graphs) expand, whose point
// count must be the one promised; only sb::Error may escape the library.
// Built and run by tests/scenarios/run_fuzz.sh (clang++ -fsanitize=fuzzer,address,undefined, no LibTorch).
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <string>
#include <vector>

#include "harness/scenario/scenario.h"
#include "common/error.h"

namespace {

// Expansion builds graphs: short lengths and small parameters keep each build quick; the point cap (lowered to
// kFuzzCap below) bounds how many.
constexpr int64_t kFuzzCap = 64;

bool small_graphs(const sb::json& doc) {
  const sb::json& axes = doc["axes"];
  for (const sb::json& n : axes["lengths"]) {
    if (n.get<int64_t>() > 256) return false;
  }
  for (const sb::json& e : axes["patterns"]) {
    for (const auto& [key, value] : e.items()) {
      if (key == "name" || key == "label" || key == "attention" || key == "solve" || key == "max_length") continue;
      for (const sb::json& x : value.is_array() ? value : sb::json::array({value})) {
        if (x.is_number() && x.get<double>() > 1024) return false;
      }
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const sb::json doc = sb::parse_scenario_text(text, "fuzz.json");
    sb::Scenario s = sb::scenario_from_json(doc, "fuzz.json");
    // The count from the axis sizes alone; any document, however large its product, is counted (or refused) here.
    const sb::PointCount count = sb::count_points(s);
    s.max_points = std::min<int64_t>(s.max_points, kFuzzCap);
    if (!small_graphs(s.doc)) {
      sb::check_point_count(s);  // the refusal path: must throw sb::Error or pass, never allocate per point
      return 0;
    }
    const std::vector<sb::Point> points = sb::expand_scenario(s);  // refused by the cap above kFuzzCap
    // The count promised before expanding is the number of points expansion makes.
    if (points.size() != count.total) __builtin_trap();
    for (const sb::Point& p : points) (void)sb::point_to_json(s, p);
  } catch (const sb::Error&) {
    // Rejected input: the message is the product; anything else escaping is a bug the fuzzer reports.
  }
  return 0;
}
