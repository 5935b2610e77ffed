// Option parsing for the sparsebench subcommands.
#include "harness/cli/cli.h"

#include <fmt/format.h>

#include "common/error.h"

namespace sb {

Args::Args(const std::vector<std::string>& argv, const std::set<std::string>& flags) : flags_(flags) {
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.size() < 3 || a.rfind("--", 0) != 0) {
      positional_.push_back(a);
      continue;
    }
    const auto eq = a.find('=');
    const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    if (eq != std::string::npos) {
      if (flags_.count(name)) throw Error(fmt::format("option --{} takes no value", name));
      values_[name].push_back(a.substr(eq + 1));
    } else if (flags_.count(name)) {
      values_[name].push_back("1");
    } else {
      if (i + 1 >= argv.size()) throw Error(fmt::format("option --{} needs a value", name));
      values_[name].push_back(argv[++i]);
    }
  }
}

std::optional<std::string> Args::maybe(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second.back();
}

std::string Args::str(const std::string& name, const std::string& fallback) const {
  return maybe(name).value_or(fallback);
}

std::vector<std::string> Args::all(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

int64_t Args::integer(const std::string& name, int64_t fallback) const {
  auto v = maybe(name);
  if (!v) return fallback;
  size_t used = 0;
  int64_t out = 0;
  try {
    out = std::stoll(*v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v->size()) throw Error(fmt::format("--{}: expected an integer, got '{}'", name, *v));
  return out;
}

double Args::real(const std::string& name, double fallback) const {
  auto v = maybe(name);
  if (!v) return fallback;
  size_t used = 0;
  double out = 0;
  try {
    out = std::stod(*v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v->size()) throw Error(fmt::format("--{}: expected a number, got '{}'", name, *v));
  return out;
}

void Args::check_known(const std::set<std::string>& known) const {
  for (const auto& [name, _] : values_) {
    if (!known.count(name) && !flags_.count(name)) {
      throw Error(fmt::format("unknown option --{}; see --help", name));
    }
  }
}

}  // namespace sb
