// JSON input guards: a linear pre-scan for nesting depth and duplicate keys, and a depth-limited excerpt printer.
#include "common/json_guard.h"

#include <algorithm>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"

namespace sb {

std::pair<size_t, size_t> text_line_col(const std::string& text, size_t pos) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < pos && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return {line, col};
}

std::string json_pointer_token(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

namespace {

// The linear pre-scan: nesting depth and (when `duplicates`) repeated keys, stopping at byte `stop`; returns the
// JSON pointer of the value being read there.
std::string scan_json_text(const std::string& text, const std::string& what, bool duplicates, size_t stop) {
  struct Frame {
    bool object = false;
    std::set<std::string> keys;
    std::string key;   // the member being read (objects)
    size_t index = 0;  // the element being read (arrays)
  };
  std::vector<Frame> stack;
  auto pointer = [&]() {
    std::string p;
    for (const Frame& f : stack) p += "/" + (f.object ? json_pointer_token(f.key) : std::to_string(f.index));
    return p;
  };
  const size_t n = std::min(text.size(), stop);
  size_t i = 0;
  while (i < n) {
    const char c = text[i];
    if (c == '"') {
      const size_t start = i++;
      while (i < text.size() && text[i] != '"') i += text[i] == '\\' ? 2 : 1;
      if (i >= text.size()) return pointer();  // unterminated string: the parser reports it
      const std::string raw = text.substr(start + 1, i - start - 1);
      size_t j = ++i;
      while (j < text.size() && (text[j] == ' ' || text[j] == '\t' || text[j] == '\n' || text[j] == '\r')) ++j;
      if (j < text.size() && text[j] == ':' && !stack.empty() && stack.back().object) {
        Frame& f = stack.back();
        f.key = raw;
        if (duplicates && !f.keys.insert(raw).second) {
          const auto [line, col] = text_line_col(text, start);
          throw Error(fmt::format("{}: {}: duplicate key \"{}\" (line {}, column {}); each key may appear once",
                                  what, pointer(), raw.size() > 60 ? raw.substr(0, 57) + "..." : raw, line, col));
        }
      }
      continue;
    }
    if (c == '[' || c == '{') {
      if (stack.size() >= static_cast<size_t>(kMaxJsonDepth)) {
        const auto [line, col] = text_line_col(text, i);
        throw Error(fmt::format("{}:{}:{}: JSON nested deeper than {} levels", what, line, col, kMaxJsonDepth));
      }
      stack.emplace_back();
      stack.back().object = c == '{';
    } else if (c == ']' || c == '}') {
      if (!stack.empty()) stack.pop_back();
    } else if (c == ',' && !stack.empty() && !stack.back().object) {
      ++stack.back().index;
    }
    ++i;
  }
  return pointer();
}

}  // namespace

void check_json_text(const std::string& text, const std::string& what, bool duplicates) {
  scan_json_text(text, what, duplicates, std::string::npos);
}

std::string json_pointer_at(const std::string& text, size_t pos) {
  try {
    return scan_json_text(text, "", false, pos);
  } catch (const Error&) {
    return "";  // deeper than the guard allows: no pointer worth showing
  }
}

nlohmann::json parse_json_guarded(const std::string& text, const std::string& what, bool duplicates) {
  check_json_text(text, what, duplicates);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    std::string msg = e.what();
    const auto colon = msg.find("] ");
    if (colon != std::string::npos) msg = msg.substr(colon + 2);
    throw Error(fmt::format("{}: malformed JSON: {}", what, msg));
  }
}

namespace {

void excerpt(const nlohmann::json& v, int depth, size_t limit, std::string& out) {
  if (out.size() > limit) return;
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    out += nlohmann::json(s.substr(0, limit)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return;
  }
  if (!v.is_structured()) {
    out += v.dump();
    return;
  }
  const char* brackets = v.is_array() ? "[]" : "{}";
  if (depth >= 4 && !v.empty()) {
    out += fmt::format("{}...{}", brackets[0], brackets[1]);
    return;
  }
  out += brackets[0];
  bool first = true;
  for (auto it = v.begin(); it != v.end() && out.size() <= limit; ++it) {
    if (!first) out += ',';
    first = false;
    if (v.is_object()) excerpt(nlohmann::json(it.key()), depth + 1, limit, out), out += ':';
    excerpt(*it, depth + 1, limit, out);
  }
  out += brackets[1];
}

}  // namespace

std::string json_excerpt(const nlohmann::json& v, size_t max_chars) {
  std::string out;
  excerpt(v, 0, max_chars, out);
  if (out.size() > max_chars) out = out.substr(0, max_chars > 3 ? max_chars - 3 : 0) + "...";
  return out;
}

}  // namespace sb
