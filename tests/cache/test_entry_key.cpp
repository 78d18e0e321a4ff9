#include "cache/entry_key.hpp"

#include "cache/cache_dir.hpp"

#include <doctest/doctest.h>

#include "cache_test_util.hpp"

using namespace flashjit;
using namespace flashjit::cache;

namespace {
const std::string kHash = "0123456789abcdef0123456789abcdef";
}

TEST_CASE("entry_key: readable file names carry a 16-digit hash prefix") {
  EntryKey key{"sm_80", "fa2_sm80-f16-d128x128-causal-m128n64w4s2", kHash};
  REQUIRE(validate_entry_key(key).ok());
  CHECK(entry_file_name(key) == "fa2_sm80-f16-d128x128-causal-m128n64w4s2-0123456789abcdef.fjk");
  CHECK(lock_file_name(key) == "fa2_sm80-f16-d128x128-causal-m128n64w4s2-0123456789abcdef.lock");
  CHECK(entry_identity(key) == "sm_80/fa2_sm80-f16-d128x128-causal-m128n64w4s2/" + kHash);
}

TEST_CASE("entry_key: identities and file names parse back") {
  EntryKey key{"sm_90a", "k-1.v2", kHash};
  auto parsed = parse_entry_identity(entry_identity(key));
  REQUIRE(parsed.has_value());
  CHECK(*parsed == key);
  auto file = parse_entry_file_name(entry_file_name(key));
  REQUIRE(file.has_value());
  CHECK(file->name == "k-1.v2");
  CHECK(file->hash_prefix == "0123456789abcdef");

  CHECK_FALSE(parse_entry_identity("sm_90a/../x/" + kHash).has_value());
  CHECK_FALSE(parse_entry_identity("sm_90a/name").has_value());
  CHECK_FALSE(parse_entry_identity("../sm_90a/name/" + kHash).has_value());
  CHECK_FALSE(parse_entry_file_name(".tmp-12-abcdef0123456789").has_value());
  CHECK_FALSE(parse_entry_file_name("name-0123456789abcdef.lock").has_value());
  CHECK_FALSE(parse_entry_file_name("name-0123456789ABCDEF.fjk").has_value());
  CHECK_FALSE(parse_entry_file_name("-0123456789abcdef.fjk").has_value());
}

TEST_CASE("entry_key: validation names the field and refuses anything path-like") {
  CHECK(is_valid_entry_name("a"));
  CHECK(is_valid_entry_name(std::string(kMaxEntryNameBytes, 'x')));
  CHECK_FALSE(is_valid_entry_name(std::string(kMaxEntryNameBytes + 1, 'x')));
  for (const char* bad : {"", ".", "..", "../x", "a/b", ".hidden", "a b", "a\\b", "ä", "x\n"})
    CHECK_MESSAGE(!is_valid_entry_name(bad), bad);

  CHECK(is_valid_content_hash(kHash));
  CHECK_FALSE(is_valid_content_hash("0123456789abcde"));  // too short for the file name prefix
  CHECK_FALSE(is_valid_content_hash("0123456789ABCDEF0123456789abcdef"));
  CHECK_FALSE(is_valid_content_hash(std::string(kMaxContentHashDigits + 1, 'a')));

  auto r = validate_entry_key(EntryKey{"sm_80", "../evil", kHash});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == Code::invalid_argument);
  CHECK(r.error().message().find("name '../evil'") != std::string::npos);
  CHECK(validate_entry_key(EntryKey{"../sm_80", "k", kHash}).error().message().find("arch") != std::string::npos);
  CHECK(validate_entry_key(EntryKey{"sm_80", "k", "xyz"}).error().message().find("content_hash") != std::string::npos);
}

TEST_CASE("entry_key: a refused key is echoed escaped, as bundles carry untrusted names") {
  auto bad = validate_entry_key(EntryKey{"sm_80", "x\x1b]0;pwned\x07", kHash});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message().find("'x\\x1b]0;pwned\\x07'") != std::string::npos);
  CHECK(bad.error().to_string().find('\x1b') == std::string::npos);
  auto arch = validate_arch("sm_\xff" + std::string(4096, '8'));
  REQUIRE_FALSE(arch.ok());
  CHECK(arch.error().to_string().find("sm_\\xff") != std::string::npos);
  CHECK(arch.error().to_string().size() < 2048);
}
