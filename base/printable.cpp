#include "base/printable.hpp"

#include <charconv>
#include <cstdint>

namespace flashjit {

namespace {

// Room for any double or float in shortest round-trip form ("-2.2250738585072014e-308").
constexpr std::size_t kMaxNumberChars = 32;

void escape_byte(std::string& out, unsigned char b) {
  static const char hex[] = "0123456789abcdef";
  out += "\\x";
  out += hex[b >> 4];
  out += hex[b & 0xf];
}

bool is_continuation(unsigned char b) { return (b & 0xc0) == 0x80; }

// Characters that are valid but act on a terminal or reorder what is shown around them: C1
// controls (U+0080..U+009F, e.g. the one-byte CSI) and the bidirectional marks and overrides
// (the "Trojan Source" characters), plus the Unicode line separators.
bool is_hidden_control(std::uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || cp == 0x061c || cp == 0x200e || cp == 0x200f ||
         (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

// Length (2..4) of the well-formed UTF-8 sequence at text[i] (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF) and its code point; 0 when the bytes there are not one.
std::size_t utf8_sequence(std::string_view text, std::size_t i, std::uint32_t* cp) {
  const auto b0 = static_cast<unsigned char>(text[i]);
  std::size_t len = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // allowed range of the second byte
  if (b0 >= 0xc2 && b0 <= 0xdf) len = 2;
  else if (b0 == 0xe0) len = 3, lo = 0xa0;
  else if (b0 >= 0xe1 && b0 <= 0xec) len = 3;
  else if (b0 == 0xed) len = 3, hi = 0x9f;
  else if (b0 >= 0xee && b0 <= 0xef) len = 3;
  else if (b0 == 0xf0) len = 4, lo = 0x90;
  else if (b0 >= 0xf1 && b0 <= 0xf3) len = 4;
  else if (b0 == 0xf4) len = 4, hi = 0x8f;
  else return 0;
  if (text.size() - i < len) return 0;
  const auto b1 = static_cast<unsigned char>(text[i + 1]);
  if (b1 < lo || b1 > hi) return 0;
  for (std::size_t k = 2; k < len; ++k)
    if (!is_continuation(static_cast<unsigned char>(text[i + k]))) return 0;
  std::uint32_t v = b0 & (0x7f >> len);
  for (std::size_t k = 1; k < len; ++k) v = (v << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3f);
  *cp = v;
  return len;
}

template <class T>
std::string shortest(T value) {
  char buf[kMaxNumberChars];
  const auto r = std::to_chars(buf, buf + sizeof buf, value);
  if (r.ec != std::errc()) return "?";
  return std::string(buf, r.ptr);
}

}  // namespace

std::string printable(std::string_view text, std::size_t max_bytes) {
  std::string out;
  out.reserve(text.size() < max_bytes ? text.size() : max_bytes);
  std::size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<unsigned char>(text[i]);
    std::uint32_t cp = 0;
    const std::size_t len = b < 0x80 ? 1 : utf8_sequence(text, i, &cp);
    const std::size_t step = len ? len : 1;
    if (i + step > max_bytes) break;
    if (len == 1 && b >= 0x20 && b < 0x7f && b != '\\') {
      out += static_cast<char>(b);
    } else if (len > 1 && !is_hidden_control(cp)) {
      out.append(text.substr(i, len));
    } else {
      for (std::size_t k = 0; k < step; ++k) escape_byte(out, static_cast<unsigned char>(text[i + k]));
    }
    i += step;
  }
  if (i < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

std::string printable(double value) { return shortest(value); }
std::string printable(float value) { return shortest(value); }

}  // namespace flashjit
