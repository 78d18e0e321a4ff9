// Shared by the JSON fuzz targets: the text goes through the same entry as a file given on the
// command line, then the parsed value is walked the ways that recurse (depth measured, dumped),
// so a nesting bound that let too much through would show as a stack overflow or a failed check.
#pragma once

#include <nlohmann/json.hpp>

#include "base/json_depth.hpp"
#include "fuzz_support.hpp"
#include "json_input.hpp"

namespace flashjit::fuzz {

// Nesting of a parsed value; stops counting past `limit` (the check below then fails).
inline std::size_t json_depth(const nlohmann::json& v, std::size_t limit) {
  if (!v.is_structured() || limit == 0) return 0;
  std::size_t deepest = 0;
  for (const auto& child : v) {
    const std::size_t d = json_depth(child, limit - 1);
    if (d > deepest) deepest = d;
  }
  return deepest + 1;
}

// parse_json_text's result, checked: an accepted document is no deeper than the bound and can
// be dumped; a refusal has a printable message.
inline Result<nlohmann::json> parse_checked(std::string_view text) {
  auto doc = tools::parse_json_text(text, "fuzz.json");
  if (!doc.ok()) {
    check_printable(doc.error().message(), "parse error message has raw bytes");
    return doc;
  }
  check(json_depth(doc.value(), kMaxJsonDepth + 1) <= kMaxJsonDepth, "accepted JSON nested deeper than the bound");
  (void)doc->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return doc;
}

}  // namespace flashjit::fuzz
