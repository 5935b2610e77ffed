// Option parsing for the sparsebench subcommands.
#include "harness/cli/cli.h"

#include <filesystem>

#include <fmt/format.h>

#include "common/error.h"
#include "common/text.h"

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
  const auto out = parse_int64(*v);
  if (!out) throw Error(fmt::format("--{}: expected an integer, got '{}'", name, *v));
  return *out;
}

double Args::real(const std::string& name, double fallback) const {
  auto v = maybe(name);
  if (!v) return fallback;
  const auto out = parse_double(*v);
  if (!out) throw Error(fmt::format("--{}: expected a number, got '{}'", name, *v));
  return *out;
}

void Args::check_known(const std::set<std::string>& known) const {
  for (const auto& [name, _] : values_) {
    if (!known.count(name) && !flags_.count(name)) {
      throw Error(fmt::format("unknown option --{}; see --help", name));
    }
  }
}

std::string find_source_file(const std::string& relative) {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
#ifdef SB_SOURCE_DIR
  candidates.emplace_back(fs::path(SB_SOURCE_DIR) / relative);
#endif
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
      candidates.push_back(dir / relative);
    }
  }
  for (const fs::path& p : candidates) {
    if (fs::exists(p, ec)) return p.string();
  }
  return "";
}

}  // namespace sb
