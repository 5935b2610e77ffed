// Machine facts read from /proc: available memory, the CPU model and what tells CPUs of one name apart.
#include "harness/measure/machine.h"

#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

namespace sb {

int64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return static_cast<int64_t>(sysconf(_SC_AVPHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

namespace {

// The value after ':' of the first line whose name (before ':', trimmed) is `key`, trimmed; empty when absent.
std::string field(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(name.find_last_not_of(" \t") + 1);
    if (name != key) continue;
    const auto begin = line.find_first_not_of(" \t", colon + 1);
    return begin == std::string::npos ? std::string() : line.substr(begin);
  }
  return {};
}

}  // namespace

std::string cpu_summary_from(const std::string& cpuinfo) {
  std::string name = field(cpuinfo, "model name");
  if (name.empty()) name = "unknown";
  std::vector<std::string> facts;
  const std::string family = field(cpuinfo, "cpu family"), model = field(cpuinfo, "model");
  if (!family.empty() && !model.empty()) facts.push_back("family " + family + " model " + model);
  std::set<std::string> flags;
  std::istringstream words(field(cpuinfo, "flags") + " " + field(cpuinfo, "Features"));
  for (std::string w; words >> w;) flags.insert(w);
  // Widest first; x86 and ARM name their extensions differently, so one list serves both.
  const std::pair<const char*, const char*> isas[] = {{"avx512f", "AVX-512"}, {"avx2", "AVX2"}, {"avx", "AVX"},
                                                      {"sse4_2", "SSE4.2"},   {"sve", "SVE"},   {"asimd", "NEON"}};
  for (const auto& [flag, isa] : isas) {
    if (flags.count(flag)) {
      facts.push_back(isa);
      break;
    }
  }
  if (facts.empty()) return name;
  std::string out = name + " (";
  for (size_t i = 0; i < facts.size(); ++i) out += (i ? ", " : "") + facts[i];
  return out + ")";
}

std::string cpu_summary() {
  std::ifstream in("/proc/cpuinfo");
  std::stringstream text;
  text << in.rdbuf();
  return cpu_summary_from(text.str());
}

}  // namespace sb
