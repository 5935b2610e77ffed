// Option parsing for the sparsebench subcommands.
#include "harness/cli/cli.h"

#include <algorithm>
#include <filesystem>
#include <limits>

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
      if (i + 1 >= argv.size()) {
        missing_value_ = name;  // an unknown name is the likelier mistake: check_known says which
        values_[name];
        continue;
      }
      values_[name].push_back(argv[++i]);
    }
  }
}

std::optional<std::string> Args::maybe(const std::string& name) const {
  auto it = values_.find(name);
  if (name == missing_value_) throw Error(fmt::format("option --{} needs a value", name));
  if (it == values_.end()) return std::nullopt;
  return it->second.back();
}

std::string Args::str(const std::string& name, const std::string& fallback) const {
  return maybe(name).value_or(fallback);
}

std::vector<std::string> Args::all(const std::string& name) const {
  if (name == missing_value_) throw Error(fmt::format("option --{} needs a value", name));
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

int64_t Args::integer(const std::string& name, int64_t fallback) const {
  auto v = maybe(name);
  if (!v) return fallback;
  return parse_int_option(name, *v, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
}

int64_t parse_int_option(const std::string& option, const std::string& value, int64_t lo, int64_t hi) {
  const auto parsed = parse_int64(value);
  if (!parsed) throw Error(fmt::format("--{}: expected an integer, got '{}'", option, value.substr(0, 60)));
  const int64_t out = *parsed;
  if (out < lo || out > hi) {
    if (hi == std::numeric_limits<int64_t>::max()) {
      throw Error(fmt::format("--{}: expected an integer >= {}, got {}", option, lo, out));
    }
    throw Error(fmt::format("--{}: expected an integer in [{}, {}], got {}", option, lo, hi, out));
  }
  return out;
}

double Args::real(const std::string& name, double fallback) const {
  auto v = maybe(name);
  if (!v) return fallback;
  const auto out = parse_double(*v);
  if (!out) throw Error(fmt::format("--{}: expected a number, got '{}'", name, *v));
  return *out;
}

namespace {

// Edit distance, for "did you mean" (option names are short).
size_t distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

void Args::check_known(const std::set<std::string>& known) const {
  for (const auto& [name, _] : values_) {
    if (known.count(name) || flags_.count(name)) continue;
    std::string best;
    size_t best_d = 3;  // suggest only close names
    for (const std::set<std::string>* names : {&known, &flags_}) {
      for (const std::string& k : *names) {
        const size_t d = distance(name, k);
        if (d < best_d) best_d = d, best = k;
      }
    }
    throw Error(fmt::format("unknown option --{}{}; see --help", name.substr(0, 60),
                            best.empty() ? "" : fmt::format(" (did you mean --{}?)", best)));
  }
  if (!missing_value_.empty()) throw Error(fmt::format("option --{} needs a value", missing_value_));
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
