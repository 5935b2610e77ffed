// Comparing a recorded run configuration with a new one, for --resume and --allow-changes.
#include "common/config_changes.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/json_guard.h"
#include "common/error.h"

namespace sb {

namespace {

void diff(const nlohmann::json& a, const nlohmann::json& b, const std::string& path, int depth,
          const std::vector<std::string>& ignored, std::vector<ConfigChange>& out) {
  if (std::find(ignored.begin(), ignored.end(), path) != ignored.end()) return;
  if (a.is_object() && b.is_object() && depth < kMaxJsonDepth) {
    for (const auto& [k, v] : a.items()) {
      const std::string sub = path.empty() ? k : path + "/" + k;
      diff(v, b.contains(k) ? b[k] : nlohmann::json(), sub, depth + 1, ignored, out);
    }
    for (const auto& [k, v] : b.items()) {
      if (!a.contains(k)) diff(nlohmann::json(), v, path.empty() ? k : path + "/" + k, depth + 1, ignored, out);
    }
    return;
  }
  if (a != b) out.push_back({path.empty() ? "/" : path, a, b});
}

}  // namespace

std::vector<ConfigChange> config_changes(const nlohmann::json& before, const nlohmann::json& after,
                                         const std::vector<std::string>& ignored) {
  std::vector<ConfigChange> out;
  diff(before, after, "", 0, ignored, out);
  return out;
}

std::string describe_changes(const std::vector<ConfigChange>& changes) {
  std::vector<std::string> parts;
  for (const ConfigChange& c : changes) {
    auto show = [](const nlohmann::json& v) { return v.is_null() ? std::string("(unset)") : json_excerpt(v, 40); };
    parts.push_back(fmt::format("{} {} -> {}", c.key, show(c.before), show(c.after)));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

nlohmann::json changes_json(const std::vector<ConfigChange>& changes) {
  nlohmann::json out = nlohmann::json::object();
  for (const ConfigChange& c : changes) out[c.key] = {{"before", c.before}, {"after", c.after}};
  return out;
}

void refuse_changes(const std::vector<ConfigChange>& changes, bool allowed, const std::string& what,
                    const std::string& recorded_in) {
  if (changes.empty() || allowed) return;
  throw Error(fmt::format("{}: settings differ from those recorded in '{}': {}; resume with the same settings, or "
                          "add --allow-changes to continue with the new ones (both are recorded)",
                          what, recorded_in, describe_changes(changes)));
}

}  // namespace sb
