// Little-endian integer encoding for the cache's binary formats (entry files, bundles), written
// byte by byte so files are identical whatever the host's byte order and alignment.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace flashjit::cache {

inline void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void put_u16(std::string& out, std::uint16_t v) { put_le(out, v, 2); }
inline void put_u32(std::string& out, std::uint32_t v) { put_le(out, v, 4); }
inline void put_u64(std::string& out, std::uint64_t v) { put_le(out, v, 8); }

inline std::uint64_t get_le(const char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

// Reads fields off the front of a byte string; every read is bounds-checked, so untrusted input
// can at worst make a read fail (nullopt), never read past the end.
class ByteReader {
 public:
  explicit ByteReader(std::string_view bytes) : rest_(bytes) {}

  std::optional<std::uint64_t> uint(int bytes) {
    if (rest_.size() < static_cast<std::size_t>(bytes)) return std::nullopt;
    std::uint64_t v = get_le(rest_.data(), bytes);
    rest_.remove_prefix(bytes);
    return v;
  }
  std::optional<std::string_view> take(std::uint64_t n) {
    if (rest_.size() < n) return std::nullopt;
    std::string_view v = rest_.substr(0, n);
    rest_.remove_prefix(n);
    return v;
  }
  std::size_t remaining() const { return rest_.size(); }

 private:
  std::string_view rest_;
};

}  // namespace flashjit::cache
