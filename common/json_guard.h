// Guards for JSON from users: bounded nesting, duplicate keys, and excerpts that never recurse deeply.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace sb {

// Deepest nesting of arrays/objects accepted anywhere (scenario files need about 5).
constexpr int kMaxJsonDepth = 64;

// 1-based line and column of byte offset `pos` in `text`.
std::pair<size_t, size_t> text_line_col(const std::string& text, size_t pos);
// One JSON-pointer token: '~' and '/' escaped as ~0 and ~1.
std::string json_pointer_token(const std::string& key);

// Scans JSON text before it is parsed: throws sb::Error "WHAT:LINE:COL: ..." when arrays/objects nest deeper
// than kMaxJsonDepth, or "WHAT: /pointer: duplicate key ..." when `duplicates` and an object repeats a key.
// Malformed text is left for the parser to report.
void check_json_text(const std::string& text, const std::string& what, bool duplicates = true);

// The JSON pointer of the value being read at byte `pos` of `text` ("" at the top level), e.g. where a parser
// stopped; linear, never recursive.
std::string json_pointer_at(const std::string& text, size_t pos);

// check_json_text, then nlohmann's parser; a malformed document throws sb::Error "WHAT: malformed JSON: ...".
nlohmann::json parse_json_guarded(const std::string& text, const std::string& what, bool duplicates = true);

// At most `max_chars` characters of `v` as JSON ("..." marks a cut); never descends more than a few levels,
// so any value, however deep, is safe to show in a message.
std::string json_excerpt(const nlohmann::json& v, size_t max_chars = 60);

}  // namespace sb
