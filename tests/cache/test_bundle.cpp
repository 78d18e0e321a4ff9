#include "cache/bundle.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>

#include "cache/le_codec.hpp"
#include "cache_test_util.hpp"

using namespace flashjit;
using namespace flashjit::cache;
using namespace flashjit::cache::test;

namespace {

// Writes a bundle by hand, following the documented format, so tests can build hostile ones
// (export_bundle only ever writes valid entries).
struct RawEntry {
  std::string arch, name, hash, payload;
};
std::string raw_bundle(const std::vector<RawEntry>& entries) {
  std::string b(kBundleMagic, sizeof kBundleMagic);
  put_u32(b, kBundleFormatVersion);
  for (const RawEntry& e : entries) {
    b.push_back(1);
    for (const std::string* f : {&e.arch, &e.name, &e.hash}) {
      put_u16(b, static_cast<std::uint16_t>(f->size()));
      b += *f;
    }
    put_u64(b, e.payload.size());
    put_u64(b, hash64(e.payload));
    b += e.payload;
  }
  b.push_back(0);
  put_u64(b, entries.size());
  put_u64(b, hash64(b));
  return b;
}

void check_rejected_and_nothing_written(const TempDir& tmp, const std::string& bundle, Code code,
                                        const std::string& reason_part) {
  write_file(tmp / "in.fjb", bundle);
  auto target = open_cache(tmp / "target");
  auto r = import_bundle(target, tmp / "in.fjb");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == code);
  CHECK(r.error().message().find(tmp / "in.fjb") != std::string::npos);
  CHECK_MESSAGE(r.error().message().find(reason_part) != std::string::npos, r.error().message());
  CHECK(target.scan()->entries == 0);
  CHECK(files_in(tmp / "target").empty());  // not even an arch folder
  CHECK_FALSE(exists(tmp / "x"));
  CHECK_FALSE(exists(tmp / "target/x"));
}

}  // namespace

TEST_CASE("bundle: export then import into another root round-trips every entry") {
  TempDir tmp;
  auto source = open_cache(tmp / "source");
  std::vector<EntryKey> keys = {make_key("a", "sm_80"), make_key("b", "sm_80"), make_key("c", "sm_90a")};
  for (const EntryKey& k : keys) REQUIRE(source.store(k, payload_for(k, 3000)).ok());

  auto exported = export_bundle(source, tmp / "all.fjb");
  REQUIRE(exported.ok());
  CHECK(exported->entries == 3);
  CHECK(exported->payload_bytes == 9000);
  CHECK(exported->skipped.empty());
  CHECK(count_with_prefix(tmp.path(), ".tmp-") == 0);

  auto target = open_cache(tmp / "target");
  auto imported = import_bundle(target, tmp / "all.fjb");
  REQUIRE_MESSAGE(imported.ok(), (imported.ok() ? "" : imported.error().to_string()));
  CHECK(imported->entries == 3);
  CHECK(imported->imported == 3);
  CHECK(imported->already_present == 0);
  CHECK(imported->payload_bytes == 9000);
  for (const EntryKey& k : keys) CHECK(target.load(k).value() == payload_for(k, 3000));
  CHECK(mode_of(tmp / "target/sm_80") == 0700);

  // Importing again changes nothing.
  auto again = import_bundle(target, tmp / "all.fjb");
  REQUIRE(again.ok());
  CHECK(again->imported == 0);
  CHECK(again->already_present == 3);
  ImportOptions replace;
  replace.replace_existing = true;
  CHECK(import_bundle(target, tmp / "all.fjb", replace).value().imported == 3);
}

TEST_CASE("bundle: export of one arch, and of an empty cache") {
  TempDir tmp;
  auto source = open_cache(tmp / "source");
  REQUIRE(source.store(make_key("a", "sm_80"), "a").ok());
  REQUIRE(source.store(make_key("b", "sm_90a"), "b").ok());
  auto one = export_bundle(source, tmp / "one.fjb", std::string("sm_90a"));
  REQUIRE(one.ok());
  CHECK(one->entries == 1);
  auto target = open_cache(tmp / "target");
  REQUIRE(import_bundle(target, tmp / "one.fjb").ok());
  CHECK(target.load(make_key("b", "sm_90a"))->has_value());
  CHECK_FALSE(target.load(make_key("a", "sm_80"))->has_value());

  auto empty_cache = open_cache(tmp / "empty");
  auto none = export_bundle(empty_cache, tmp / "none.fjb");
  REQUIRE(none.ok());
  CHECK(none->entries == 0);
  auto imported = import_bundle(target, tmp / "none.fjb");
  REQUIRE(imported.ok());
  CHECK(imported->entries == 0);
  CHECK(export_bundle(source, tmp / "x.fjb", std::string("../sm_80")).error().code() == Code::invalid_argument);
}

TEST_CASE("bundle: export skips entries that fail verification") {
  TempDir tmp;
  auto source = open_cache(tmp / "source");
  EntryKey good = make_key("good"), bad = make_key("bad");
  REQUIRE(source.store(good, "good").ok());
  REQUIRE(source.store(bad, "bad!").ok());
  std::string b = read_file(source.entry_path(bad));
  b.back() ^= 1;
  write_file(source.entry_path(bad), b);
  auto exported = export_bundle(source, tmp / "b.fjb");
  REQUIRE(exported.ok());
  CHECK(exported->entries == 1);
  REQUIRE(exported->skipped.size() == 1);
  CHECK(exported->skipped[0].path == source.entry_path(bad));
}

TEST_CASE("bundle: a tampered bundle is rejected and nothing is written") {
  TempDir tmp;
  auto source = open_cache(tmp / "source");
  for (const EntryKey& k : {make_key("a"), make_key("b"), make_key("c")}) REQUIRE(source.store(k, payload_for(k, 2000)).ok());
  REQUIRE(export_bundle(source, tmp / "good.fjb").ok());
  std::string good = read_file(tmp / "good.fjb");

  SUBCASE("a flipped byte in the last payload: the first entries are not published either") {
    std::string b = good;
    b[b.size() - 40] ^= 0x01;
    check_rejected_and_nothing_written(tmp, b, Code::corrupt, "checksum mismatch");
  }
  SUBCASE("a flipped byte in a length field") {
    std::string b = good;
    b[13] ^= 0x10;
    check_rejected_and_nothing_written(tmp, b, Code::corrupt, "");
  }
  SUBCASE("truncated") {
    check_rejected_and_nothing_written(tmp, good.substr(0, good.size() - 9), Code::corrupt, "");
  }
  SUBCASE("bytes after the end record") {
    check_rejected_and_nothing_written(tmp, good + "x", Code::corrupt, "after the end record");
  }
  SUBCASE("wrong magic") {
    std::string b = good;
    b[0] = 'X';
    check_rejected_and_nothing_written(tmp, b, Code::corrupt, "bad magic");
  }
  SUBCASE("wrong version") {
    std::string b = good;
    b[8] = 7;
    check_rejected_and_nothing_written(tmp, b, Code::corrupt, "format version 7");
  }
  SUBCASE("path traversal in a name, with every checksum right") {
    std::string hash = hash_hex("x");
    std::string b = raw_bundle({{"sm_90a", "fine", hash, "p"}, {"sm_90a", "../x", hash, "evil"}});
    check_rejected_and_nothing_written(tmp, b, Code::invalid_argument, "'../x'");
  }
  SUBCASE("path traversal in an arch") {
    check_rejected_and_nothing_written(tmp, raw_bundle({{"../../x", "k", hash_hex("x"), "evil"}}),
                                       Code::invalid_argument, "arch");
  }
  SUBCASE("a malformed content hash") {
    check_rejected_and_nothing_written(tmp, raw_bundle({{"sm_90a", "k", "../../../x/0000000000000000", "evil"}}),
                                       Code::invalid_argument, "content_hash");
  }
  SUBCASE("a duplicate entry") {
    std::string hash = hash_hex("x");
    check_rejected_and_nothing_written(tmp, raw_bundle({{"sm_90a", "k", hash, "1"}, {"sm_90a", "k", hash, "2"}}),
                                       Code::corrupt, "duplicate");
  }
  SUBCASE("a wrong entry count") {
    std::string b = raw_bundle({{"sm_90a", "k", hash_hex("x"), "1"}});
    b[b.size() - 16] = 5;  // count says 5; fix the checksum so only the count is wrong
    b.resize(b.size() - 8);
    put_u64(b, hash64(b));
    check_rejected_and_nothing_written(tmp, b, Code::corrupt, "counts 5");
  }
  SUBCASE("an oversized payload length") {
    std::string b(kBundleMagic, sizeof kBundleMagic);
    put_u32(b, kBundleFormatVersion);
    b.push_back(1);
    for (std::string f : {std::string("sm_90a"), std::string("k"), hash_hex("x")}) {
      put_u16(b, static_cast<std::uint16_t>(f.size()));
      b += f;
    }
    put_u64(b, ~0ull);
    put_u64(b, 0);
    check_rejected_and_nothing_written(tmp, b, Code::corrupt, "limit");
  }
  SUBCASE("not a bundle at all") {
    check_rejected_and_nothing_written(tmp, "", Code::corrupt, "bad magic");
  }
}

TEST_CASE("bundle: the hand-written format matches what export writes") {
  TempDir tmp;
  auto source = open_cache(tmp / "source");
  EntryKey k = make_key("k");
  REQUIRE(source.store(k, "payload").ok());
  REQUIRE(export_bundle(source, tmp / "b.fjb").ok());
  CHECK(read_file(tmp / "b.fjb") == raw_bundle({{k.arch, k.name, k.content_hash, "payload"}}));
}

TEST_CASE("bundle: size limits and missing files") {
  TempDir tmp;
  auto target = open_cache(tmp / "target");
  auto missing = import_bundle(target, tmp / "nope.fjb");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code() == Code::not_found);
  write_file(tmp / "big.fjb", raw_bundle({{"sm_90a", "k", hash_hex("x"), std::string(5000, 'x')}}));
  ImportOptions small;
  small.max_bundle_bytes = 1000;
  auto big = import_bundle(target, tmp / "big.fjb", small);
  REQUIRE_FALSE(big.ok());
  CHECK(big.error().message().find("max_bundle_bytes") != std::string::npos);
  auto ok = import_bundle(target, tmp / "big.fjb");
  REQUIRE(ok.ok());
  CHECK(ok->imported == 1);
}
