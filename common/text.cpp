// Strict number parsing (no partial reads, no silent overflow) and duration formatting.
#include "common/text.h"

#include <cctype>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace sb {

namespace {

// std::stoll and std::stod skip leading white space but stop at trailing: refused at both ends alike.
bool padded(const std::string& s) {
  return s.empty() || std::isspace(static_cast<unsigned char>(s.front())) ||
         std::isspace(static_cast<unsigned char>(s.back()));
}

}  // namespace

std::optional<int64_t> parse_int64(const std::string& s) {
  if (padded(s)) return std::nullopt;
  size_t used = 0;
  long long out = 0;
  try {
    out = std::stoll(s, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used == 0 || used != s.size()) return std::nullopt;
  return static_cast<int64_t>(out);
}

std::optional<double> parse_double(const std::string& s) {
  if (padded(s)) return std::nullopt;
  size_t used = 0;
  double out = 0;
  try {
    out = std::stod(s, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used == 0 || used != s.size() || !std::isfinite(out)) return std::nullopt;
  return out;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto total = static_cast<int64_t>(seconds + 0.5);
  if (total >= 3600) return fmt::format("{}h{:02}m", total / 3600, (total / 60) % 60);
  return fmt::format("{}m{:02}s", total / 60, total % 60);
}

}  // namespace sb
