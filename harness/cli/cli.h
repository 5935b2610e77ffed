// Command-line plumbing shared by the sparsebench subcommands: option parsing and the command table.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace sb {

// Parses "--name value", "--name=value" and boolean "--flag" options plus positional arguments.
// Options listed in `flags` take no value; options may repeat (get_all). Unknown options are
// rejected by check_known() with a message naming them.
class Args {
 public:
  Args(const std::vector<std::string>& argv, const std::set<std::string>& flags);

  const std::vector<std::string>& positional() const { return positional_; }
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  bool flag(const std::string& name) const { return has(name); }
  std::string str(const std::string& name, const std::string& fallback) const;
  std::optional<std::string> maybe(const std::string& name) const;
  std::vector<std::string> all(const std::string& name) const;
  int64_t integer(const std::string& name, int64_t fallback) const;
  double real(const std::string& name, double fallback) const;
  // Throws sb::Error for any option not in `known` (flags included automatically).
  void check_known(const std::set<std::string>& known) const;

 private:
  std::set<std::string> flags_;
  std::string missing_value_;  // the last option had no value: reported by check_known, after unknown names
  std::vector<std::string> positional_;
  std::map<std::string, std::vector<std::string>> values_;
};

// Parses `value` of option --`option` as an integer in [lo, hi]; throws sb::Error naming the option.
int64_t parse_int_option(const std::string& option, const std::string& value, int64_t lo, int64_t hi);

// A file of the source tree (e.g. "plots/plot_run.py"): beside the sources this binary was built from, else in a
// directory above the binary; "" when not found.
std::string find_source_file(const std::string& relative);

// Subcommands: each takes the arguments after its name and returns the process exit code.
int cmd_patterns(const std::vector<std::string>& args);
int cmd_pattern(const std::vector<std::string>& args);
int cmd_bench(const std::vector<std::string>& args);
int cmd_train(const std::vector<std::string>& args);
int cmd_run(const std::vector<std::string>& args);
int cmd_plot(const std::vector<std::string>& args);
int cmd_schema(const std::vector<std::string>& args);
int cmd_merge(const std::vector<std::string>& args);
int cmd_run_point(const std::vector<std::string>& args);

// The sparsebench binary, which `run --jobs N` starts once per point (`run-point`); set by main. Left unset in other
// programs (tests), where --jobs above 1 is refused.
void set_point_executable(const std::string& path);

// Rewrites RUN_DIR/records.csv and draws the plots (plots/plot_run.py); 0 on success (harness/cli/cmd_plot.cpp).
int run_plot_script(const std::string& run_dir);

}  // namespace sb
