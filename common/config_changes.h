// Resume checks: the settings that differ between the configuration a run recorded and the one given now.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sb {

struct ConfigChange {
  std::string key;  // slash path, e.g. "lr" or "axes/lengths"
  nlohmann::json before, after;
};

// Every leaf that differs (objects are compared key by key, anything else as a whole); keys in `ignored`
// (slash paths) are left out.
std::vector<ConfigChange> config_changes(const nlohmann::json& before, const nlohmann::json& after,
                                         const std::vector<std::string>& ignored = {});

// "lr 0.003 -> 0.1, seed 3 -> 99" (values cut short).
std::string describe_changes(const std::vector<ConfigChange>& changes);

// {"lr": {"before": 0.003, "after": 0.1}, ...} for the records.
nlohmann::json changes_json(const std::vector<ConfigChange>& changes);

// Throws sb::Error unless `changes` is empty or `allowed`: "WHAT: settings differ from ...: ...; ...".
void refuse_changes(const std::vector<ConfigChange>& changes, bool allowed, const std::string& what,
                    const std::string& recorded_in);

}  // namespace sb
