// libFuzzer target: command lines -> the option parser (Args), integer options, pattern parameters (--set k=v) and
// scenario overrides (--set path=value); only sb::Error may escape. Built and run by tests/scenarios/run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/cli/cli.h"
#include "common/limits.h"
#include "harness/scenario/scenario.h"
#include "common/error.h"
#include "patterns/pattern.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Arguments are separated by NUL bytes (or newlines), as argv would hold them.
  std::vector<std::string> argv(1);
  for (size_t i = 0; i < size; ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == '\0' || c == '\n') argv.emplace_back();
    else argv.back() += c;
  }
  try {
    const sb::Args a(argv, {"help", "resume", "dry-run", "causal", "overwrite"});
    a.check_known({"set", "n", "threads", "out", "lr", "steps"});
    (void)a.positional();
    (void)a.integer("n", 1);
    (void)a.real("lr", 0.1);
    (void)a.str("out", "x");
    if (auto t = a.maybe("threads")) (void)sb::parse_int_option("threads", *t, 0, sb::kMaxThreads);
    sb::json doc = {{"kind", "attention"}, {"axes", {{"patterns", {{{"name", "window"}}}}, {"lengths", {16}}}}};
    for (const std::string& s : a.all("set")) {
      sb::Params params;
      try {
        sb::parse_param_assignment(s, params);
      } catch (const sb::Error&) {
      }
      sb::apply_override(doc, s);
    }
    (void)sb::scenario_from_json(doc, "fuzz.json");
  } catch (const sb::Error&) {
    // A rejected command line: the message is the product.
  }
  return 0;
}
