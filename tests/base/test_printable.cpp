// Echoing outside text and numbers into messages: what passes through, what is escaped, where
// long text is cut, and floats that read back as themselves.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "base/printable.hpp"

using namespace flashjit;

namespace {

// Whether `s` is safe on a terminal: no C0/DEL byte and no ESC introducer at all.
bool terminal_safe(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7f) return false;
  return true;
}

}  // namespace

TEST_CASE("printable ASCII and valid UTF-8 pass through unchanged") {
  CHECK(printable("sm_90a") == "sm_90a");
  CHECK(printable("/tmp/a b/c.json") == "/tmp/a b/c.json");
  CHECK(printable("") == "");
  CHECK(printable("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
}

TEST_CASE("control bytes, escape sequences and the backslash become \\xNN") {
  CHECK(printable("a\nb") == "a\\x0ab");
  CHECK(printable("\x1b[2J\x1b]0;pwned\x07") == "\\x1b[2J\\x1b]0;pwned\\x07");
  CHECK(printable(std::string("a\0b", 3)) == "a\\x00b");
  CHECK(printable("\x7f") == "\\x7f");
  CHECK(printable("C:\\x") == "C:\\x5cx");  // a literal backslash cannot pass for an escape
  CHECK(terminal_safe(printable("\x1b[31mred\x1b[0m\r\t")));
}

TEST_CASE("invalid UTF-8 and hidden controls are escaped byte by byte") {
  CHECK(printable("\xff\xfe") == "\\xff\\xfe");
  CHECK(printable("\xc3") == "\\xc3");                  // truncated sequence
  CHECK(printable("\xc0\xaf") == "\\xc0\\xaf");         // overlong '/'
  CHECK(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");  // UTF-16 surrogate
  CHECK(printable("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
  CHECK(printable("\xc2\x9b" "2J") == "\\xc2\\x9b2J");  // C1 CSI
  CHECK(printable("a\xe2\x80\xae" "b") == "a\\xe2\\x80\\xaeb");  // right-to-left override
  CHECK(printable("\xc3(") == "\\xc3(");                // bad continuation: only the lead escaped
}

TEST_CASE("long text is cut at a character boundary with its full size") {
  const std::string mb(1 << 20, 'a');
  const std::string p = printable(mb);
  CHECK(p == std::string(kMaxEchoBytes, 'a') + "... (1048576 bytes)");
  CHECK(printable("abcdef", 3) == "abc... (6 bytes)");
  CHECK(printable("ab\xc3\xa9", 3) == "ab... (4 bytes)");  // é would straddle the cut
  CHECK(printable("abc", 3) == "abc");
}

TEST_CASE("floats print in their shortest round-trip form") {
  CHECK(printable(-1e-30f) == "-1e-30");
  CHECK(printable(-1e-30) == "-1e-30");
  CHECK(printable(0.125) == "0.125");
  CHECK(printable(1.0f / 3.0f) == "0.33333334");
  CHECK(printable(std::numeric_limits<double>::infinity()) == "inf");
  CHECK(printable(-std::numeric_limits<float>::infinity()) == "-inf");
  CHECK(printable(std::nanf("")).find("nan") != std::string::npos);
  CHECK(std::stod(printable(0.1)) == 0.1);
}
