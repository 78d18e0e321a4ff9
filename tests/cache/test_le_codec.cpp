#include "cache/le_codec.hpp"

#include <doctest/doctest.h>

using namespace flashjit::cache;

TEST_CASE("le_codec: integers round trip in little-endian order") {
  std::string s;
  put_u16(s, 0x1234);
  put_u32(s, 0xdeadbeef);
  put_u64(s, 0x0102030405060708ull);
  REQUIRE(s.size() == 14);
  CHECK(static_cast<unsigned char>(s[0]) == 0x34);
  CHECK(static_cast<unsigned char>(s[2]) == 0xef);
  CHECK(static_cast<unsigned char>(s[6]) == 0x08);
  ByteReader r(s);
  CHECK(r.uint(2) == 0x1234u);
  CHECK(r.uint(4) == 0xdeadbeefu);
  CHECK(r.uint(8) == 0x0102030405060708ull);
  CHECK(r.remaining() == 0);
}

TEST_CASE("le_codec: reads past the end fail instead of overrunning") {
  std::string s = "abc";
  ByteReader r(s);
  CHECK_FALSE(r.uint(4).has_value());
  CHECK_FALSE(r.take(4).has_value());
  CHECK(r.take(2) == std::string_view("ab"));
  CHECK_FALSE(r.uint(2).has_value());
  CHECK(r.take(~0ull >> 1) == std::nullopt);
  CHECK(r.remaining() == 1);
}
