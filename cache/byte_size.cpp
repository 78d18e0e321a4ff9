#include "cache/byte_size.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "base/printable.hpp"

namespace flashjit::cache {

Result<std::uint64_t> parse_byte_size(const std::string& text, const std::string& option) {
  auto bad = [&] {
    return Error(Code::invalid_argument,
                 option + " must be a byte count such as 1048576, 512M or 2G (K, M, G, T are powers of 1024), got '" +
                     printable(text) + "'");
  };
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  const std::string number = text.substr(0, i);
  if (number.empty() || number == "." || number.find('.') != number.rfind('.')) return bad();
  std::string suffix = text.substr(i);
  int shift = 0;
  if (!suffix.empty()) {
    switch (suffix[0]) {
      case 'K': case 'k': shift = 10; break;
      case 'M': case 'm': shift = 20; break;
      case 'G': case 'g': shift = 30; break;
      case 'T': case 't': shift = 40; break;
      case 'B': case 'b': shift = -1; break;
      default: return bad();
    }
    const std::string tail = suffix.substr(1);
    if (shift == -1 ? !tail.empty() : !(tail.empty() || tail == "B" || tail == "iB" || tail == "b")) return bad();
    shift = std::max(shift, 0);
  }
  const bool fraction = number.find('.') != std::string::npos;
  if (fraction && shift == 0) return bad();  // "1.5" bytes is no byte count
  const long double value = std::strtold(number.c_str(), nullptr) * std::ldexp(1.0L, shift);
  if (!(value < 18446744073709551615.0L)) return bad();
  return static_cast<std::uint64_t>(std::roundl(value));  // not + 0.5: that rounds odd counts above 2^63 up
}

}  // namespace flashjit::cache
