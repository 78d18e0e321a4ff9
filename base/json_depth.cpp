#include "base/json_depth.hpp"

namespace flashjit {

Status check_json_depth(std::string_view text, const std::string& source, std::size_t max_depth) {
  std::size_t depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        return Error(Code::invalid_argument, source + ": JSON nested deeper than " + std::to_string(max_depth) +
                                                 " levels (at byte " + std::to_string(i) + ")");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return {};
}

}  // namespace flashjit
