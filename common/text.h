// Strict number parsing and duration formatting shared by every layer's option and file readers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace sb {

// The whole of `s` as a base-10 integer (leading sign allowed); nullopt when anything else is there (white space
// at either end included) or it overflows.
std::optional<int64_t> parse_int64(const std::string& s);

// The whole of `s` as a finite number (no white space at either end); nullopt otherwise.
std::optional<double> parse_double(const std::string& s);

// "12m05s", "1h02m"; "?" when negative or not finite.
std::string format_duration(double seconds);

}  // namespace sb
