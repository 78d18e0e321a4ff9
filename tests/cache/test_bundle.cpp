#include "cache/bundle.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/entry_key.hpp"
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

// ---- issue 6 ----

TEST_CASE("bundle: a FIFO, a folder or a device given as the bundle is refused without blocking") {
  TempDir tmp;
  REQUIRE(::mkfifo((tmp / "pipe.fjb").c_str(), 0600) == 0);
  REQUIRE(::mkdir((tmp / "dir.fjb").c_str(), 0700) == 0);
  const std::string root = tmp / "target";
  const int code = test_support::run_bounded(5, [&] {
    auto target = open_cache(root);
    int bad = 0;
    for (const std::string& path : {tmp / "pipe.fjb", tmp / "dir.fjb", std::string("/dev/null")}) {
      auto r = import_bundle(target, path);
      if (r.ok() || r.error().message().find("not a regular file") == std::string::npos) bad |= 1;
      if (r.ok() || r.error().message().find(path) == std::string::npos) bad |= 2;
    }
    return bad;
  });
  CHECK(code == 0);  // 128 + SIGALRM means an open blocked
}

TEST_CASE("bundle: a huge file that is not a bundle is refused from its first bytes, never read whole") {
  TempDir tmp;
  auto target = open_cache(tmp / "target");
  const std::string big = tmp / "disk.img";
  {
    int fd = ::open(big.c_str(), O_CREAT | O_WRONLY, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(3ull << 30)) == 0);  // sparse: costs no disk
    REQUIRE(::pwrite(fd, "NOTABNDL", 8, 0) == 8);
    ::close(fd);
  }
  // rchar: the bytes this process has read through read() and friends.
  auto bytes_read = [] {
    std::string io = read_file("/proc/self/io");
    auto at = io.find("rchar: ");
    return at == std::string::npos ? 0ull : std::stoull(io.substr(at + 7));
  };
  const auto before = bytes_read();
  auto r = import_bundle(target, big);
  const auto read = bytes_read() - before;
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == Code::corrupt);
  CHECK(r.error().message().find("bad magic") != std::string::npos);
  CHECK_MESSAGE(read < (1u << 20), read << " bytes read to refuse a file that is not a bundle");
}

TEST_CASE("bundle: two keys that share an entry file name are a collision, reported and counted once") {
  TempDir tmp;
  // The same name and the same first 16 hex digits of the hash: the same file on disk.
  const std::string h1 = hash_hex("one");
  std::string h2 = h1;
  h2.back() = h2.back() == '0' ? '1' : '0';
  REQUIRE(entry_file_name({"sm_90a", "k", h1}) == entry_file_name({"sm_90a", "k", h2}));
  write_file(tmp / "c.fjb", raw_bundle({{"sm_90a", "k", h1, "first"}, {"sm_90a", "k", h2, "second"},
                                        {"sm_90a", "other", h1, "third"}}));
  auto target = open_cache(tmp / "target");
  auto r = import_bundle(target, tmp / "c.fjb");
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().to_string()));
  CHECK(r->entries == 3);
  CHECK(r->imported == 2);  // what was written, not what was asked for
  CHECK(r->payload_bytes == 10);
  REQUIRE(r->collisions.size() == 1);
  CHECK(r->collisions[0].key == entry_identity({"sm_90a", "k", h2}));
  CHECK(r->collisions[0].other_key == entry_identity({"sm_90a", "k", h1}));
  CHECK(r->collisions[0].path == target.entry_path({"sm_90a", "k", h1}));
  CHECK(target.scan()->entries == 2);
  CHECK(target.load({"sm_90a", "k", h1}).value() == std::string("first"));
  CHECK(target.load({"sm_90a", "other", h1}).value() == std::string("third"));
  CHECK_FALSE(target.load({"sm_90a", "k", h2}).value().has_value());
}

TEST_CASE("bundle: an entry whose file already holds another valid key of the cache is a collision; that entry stays") {
  TempDir tmp;
  const std::string h1 = hash_hex("mine");
  std::string h2 = h1;
  h2.back() = h2.back() == '0' ? '1' : '0';
  auto target = open_cache(tmp / "target");
  REQUIRE(target.store({"sm_90a", "k", h1}, "built here").ok());
  write_file(tmp / "b.fjb", raw_bundle({{"sm_90a", "k", h2, "from the bundle"}}));
  for (bool replace : {false, true}) {
    ImportOptions o;
    o.replace_existing = replace;
    auto r = import_bundle(target, tmp / "b.fjb", o);
    REQUIRE(r.ok());
    CHECK(r->imported == 0);
    REQUIRE(r->collisions.size() == 1);
    CHECK(r->collisions[0].other_key == entry_identity({"sm_90a", "k", h1}));
    CHECK(target.load({"sm_90a", "k", h1}).value() == std::string("built here"));
  }
  // A damaged entry at that file is not worth keeping: the bundle's replaces it.
  std::string b = read_file(target.entry_path({"sm_90a", "k", h1}));
  b.back() ^= 1;
  write_file(target.entry_path({"sm_90a", "k", h1}), b);
  auto r = import_bundle(target, tmp / "b.fjb");
  REQUIRE(r.ok());
  CHECK(r->imported == 1);
  CHECK(r->collisions.empty());
  CHECK(target.load({"sm_90a", "k", h2}).value() == std::string("from the bundle"));
}

// ---- issue 21 ----

TEST_CASE("bundle: export refuses an existing FILE that is not a regular file; nothing is written (G3)") {
  TempDir tmp;
  auto source = open_cache(tmp / "source");
  const EntryKey k = make_key("kernel");
  REQUIRE(source.store(k, "payload").ok());
  // Export publishes by renaming over FILE: over a FIFO or a device node that replaces the node
  // itself (run as root on /dev/null, it replaced /dev/null).
  REQUIRE(::mkfifo((tmp / "pipe.fjb").c_str(), 0600) == 0);
  REQUIRE(::symlink((tmp / "pipe.fjb").c_str(), (tmp / "link.fjb").c_str()) == 0);
  REQUIRE(::mkdir((tmp / "dir.fjb").c_str(), 0700) == 0);
  for (const std::string& path : {tmp / "pipe.fjb", tmp / "link.fjb", tmp / "dir.fjb"}) {
    auto r = export_bundle(source, path);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Code::invalid_argument);
    CHECK_MESSAGE(r.error().message().find("'" + path + "'") != std::string::npos, r.error().message());
    CHECK_MESSAGE(r.error().message().find("not a regular file") != std::string::npos, r.error().message());
    CHECK(r.error().detail("path") == path);
  }
  struct stat st{};
  REQUIRE(::lstat((tmp / "pipe.fjb").c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  REQUIRE(::lstat((tmp / "link.fjb").c_str(), &st) == 0);
  CHECK(S_ISLNK(st.st_mode));
  CHECK(files_in(tmp.path()).size() == 4);  // source, pipe, link, dir: no temp file left behind
  // A regular file is still replaced, as before.
  write_file(tmp / "old.fjb", "an older bundle");
  REQUIRE(export_bundle(source, tmp / "old.fjb").ok());
  CHECK(read_file(tmp / "old.fjb") != "an older bundle");
}
