// The nesting bound on outside JSON: counted on the raw text, strings excluded, cheap enough to
// run before every parse.
#include <doctest/doctest.h>

#include <string>

#include "base/json_depth.hpp"

using namespace flashjit;

namespace {

std::string nested(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

}  // namespace

TEST_CASE("nesting up to the limit passes, one level more is refused with its position") {
  CHECK(check_json_depth(nested(kMaxJsonDepth), "f.json").ok());
  auto deep = check_json_depth(nested(kMaxJsonDepth + 1), "f.json");
  REQUIRE_FALSE(deep.ok());
  CHECK(deep.error().code() == Code::invalid_argument);
  CHECK(deep.error().message() == "f.json: JSON nested deeper than 64 levels (at byte 64)");
  CHECK_FALSE(check_json_depth(std::string(200000, '['), "f.json").ok());  // the reproducer's prefix
  CHECK_FALSE(check_json_depth(std::string(100, '{'), "f.json", 3).ok());
}

TEST_CASE("depth is nesting, not a count of brackets") {
  std::string wide = "[";
  for (int i = 0; i < 10000; ++i) wide += "[{}],";
  wide += "[]]";
  CHECK(check_json_depth(wide, "f.json", 3).ok());
  CHECK(check_json_depth("]]]]]][[[", "f.json", 3).ok());  // stray closers do not buy depth
  CHECK_FALSE(check_json_depth("]]]]]][[[[", "f.json", 3).ok());
}

TEST_CASE("brackets inside strings, escaped quotes included, are text") {
  CHECK(check_json_depth(R"(["[[[[[[", "{{{{{{"])", "f.json", 1).ok());
  CHECK(check_json_depth(R"(["a\"[[[[[[\\", "\\\"{{{{"])", "f.json", 1).ok());
  CHECK_FALSE(check_json_depth(R"(["a\\"[[])", "f.json", 2).ok());  // the string ended at \\"
  CHECK(check_json_depth(R"("unterminated [[[[[)", "f.json", 1).ok());
}
