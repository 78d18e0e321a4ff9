// A bound on how deeply JSON from outside may nest, checked on the raw text before parsing.
// nlohmann's parser is iterative, but copying, comparing and dumping a parsed value recurse once
// per level: `tune --workload` on 200,000 nested brackets ran out of stack (issue 6, defect 3).
// Refusing deep text up front makes every later walk of the value safe, whatever it does.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "flashjit/status.hpp"

namespace flashjit {

// flashjit's own files nest at most 5 levels (a tuning file's candidate tilings); 64 leaves
// room for wrappers while a walk that deep needs a few kilobytes of stack.
inline constexpr std::size_t kMaxJsonDepth = 64;

// Code::invalid_argument naming `source`, the limit and the byte offset where the text goes
// deeper than `max_depth` arrays and objects. Brackets inside strings do not count; the text
// need not be valid JSON (the parser judges that afterwards).
Status check_json_depth(std::string_view text, const std::string& source, std::size_t max_depth = kMaxJsonDepth);

}  // namespace flashjit
