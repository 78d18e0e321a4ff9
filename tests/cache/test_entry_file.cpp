#include "cache/entry_file.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/le_codec.hpp"
#include "cache_test_util.hpp"

using namespace flashjit;
using namespace flashjit::cache;
using namespace flashjit::cache::test;

namespace {

const std::string kKey = "sm_90a/kernel/0123456789abcdef0123456789abcdef";

std::string payload() {
  std::string p;
  for (int i = 0; i < 1000; ++i) p.push_back(static_cast<char>(i * 7));
  return p;
}

void check_corrupt(const PrivateDir& dir, const std::string& name, const std::string& expected_key,
                   const std::string& reason_part) {
  const std::string path = dir.path_of(name);
  FileId id;
  auto r = read_entry(dir, name, expected_key, &id);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == Code::corrupt);
  CHECK(r.error().message().find(path) != std::string::npos);
  auto reason = r.error().detail("reason");
  REQUIRE(reason.has_value());
  CHECK_MESSAGE(reason->find(reason_part) != std::string::npos, *reason);
  CHECK(id == file_id_of_path(path).value());  // says which file it judged
}

}  // namespace

TEST_CASE("entry_file: write then read round trip, header as documented") {
  TempDir dir;
  const PrivateDir d = private_dir(dir.path());
  std::string path = dir / "e.fjk";
  REQUIRE(write_entry(d, "e.fjk", kKey, payload()).ok());
  CHECK(mode_of(path) == 0600);
  auto r = read_entry(d, "e.fjk", kKey);
  REQUIRE(r.ok());
  CHECK(*r == payload());

  std::string bytes = read_file(path);
  CHECK(bytes.size() == entry_file_bytes(kKey.size(), payload().size()));
  CHECK(bytes.compare(0, 8, "FJKCACHE") == 0);
  CHECK(get_le(bytes.data() + 8, 4) == kEntryFormatVersion);
  CHECK(get_le(bytes.data() + 12, 4) == kKey.size());
  CHECK(bytes.compare(16, kKey.size(), kKey) == 0);
  CHECK(get_le(bytes.data() + 16 + kKey.size(), 8) == payload().size());
  CHECK(get_le(bytes.data() + 24 + kKey.size(), 8) == hash64(payload()));

  auto h = read_entry_header(d, "e.fjk");
  REQUIRE(h.ok());
  CHECK(h->key == kKey);
  CHECK(h->payload_size == payload().size());
  CHECK(h->header_bytes == 32 + kKey.size());
  CHECK(count_with_prefix(dir.path(), ".tmp-") == 0);
}

TEST_CASE("entry_file: an empty payload is a valid entry") {
  TempDir dir;
  const PrivateDir d = private_dir(dir.path());
  REQUIRE(write_entry(d, "e.fjk", kKey, "").ok());
  CHECK(read_entry(d, "e.fjk", kKey).value().empty());
}

TEST_CASE("entry_file: a missing file is not_found, not corrupt") {
  TempDir dir;
  auto r = read_entry(private_dir(dir.path()), "none.fjk", kKey);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == Code::not_found);
}

TEST_CASE("entry_file: every kind of damage is caught with its reason") {
  TempDir dir;
  const PrivateDir d = private_dir(dir.path());
  std::string path = dir / "e.fjk";
  auto fresh = [&] {
    REQUIRE(write_entry(d, "e.fjk", kKey, payload()).ok());
    return read_file(path);
  };

  SUBCASE("truncated payload") {
    std::string b = fresh();
    REQUIRE(::truncate(path.c_str(), static_cast<off_t>(b.size() - 10)) == 0);
    check_corrupt(d, "e.fjk", kKey, "payload bytes");
  }
  SUBCASE("truncated header") {
    fresh();
    REQUIRE(::truncate(path.c_str(), 10) == 0);
    check_corrupt(d, "e.fjk", kKey, "truncated header");
  }
  SUBCASE("empty file") {
    write_file(path, "");
    check_corrupt(d, "e.fjk", kKey, "truncated header");
  }
  SUBCASE("extra bytes appended") {
    write_file(path, fresh() + "x");
    check_corrupt(d, "e.fjk", kKey, "payload bytes");
  }
  SUBCASE("flipped payload byte") {
    std::string b = fresh();
    b[b.size() - 1] ^= 0x01;
    write_file(path, b);
    check_corrupt(d, "e.fjk", kKey, "checksum");
  }
  SUBCASE("wrong magic") {
    std::string b = fresh();
    b[0] = 'X';
    write_file(path, b);
    check_corrupt(d, "e.fjk", kKey, "bad magic");
  }
  SUBCASE("wrong version") {
    std::string b = fresh();
    b[8] = 99;
    write_file(path, b);
    check_corrupt(d, "e.fjk", kKey, "format version 99");
  }
  SUBCASE("absurd key length") {
    std::string b = fresh();
    b[15] = 0x7f;
    write_file(path, b);
    check_corrupt(d, "e.fjk", kKey, "key length");
  }
  SUBCASE("key mismatch") {
    fresh();
    check_corrupt(d, "e.fjk", "sm_90a/kernel/ffffffffffffffff0123456789abcdef", "holds key");
  }
  SUBCASE("symlink instead of a file") {
    fresh();
    REQUIRE(::symlink(path.c_str(), (dir / "link.fjk").c_str()) == 0);
    check_corrupt(d, "link.fjk", kKey, "symbolic link");
  }
  SUBCASE("a FIFO: judged without blocking") {
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    check_corrupt(d, "e.fjk", kKey, "not a regular file (a FIFO)");
  }
  SUBCASE("a folder") {
    REQUIRE(::mkdir(path.c_str(), 0700) == 0);
    check_corrupt(d, "e.fjk", kKey, "not a regular file (a folder)");
  }
  SUBCASE("writable by others") {
    fresh();
    REQUIRE(::chmod(path.c_str(), 0602) == 0);
    check_corrupt(d, "e.fjk", kKey, "writable by group or others (mode 0602)");
  }
  SUBCASE("another user's") {
    if (::geteuid() != 0) return;  // only root can give a file away
    fresh();
    REQUIRE(::chown(path.c_str(), 54321, 54321) == 0);
    check_corrupt(d, "e.fjk", kKey, "owned by uid 54321");
  }
}

TEST_CASE("entry_file: keys must fit the format") {
  TempDir dir;
  const PrivateDir d = private_dir(dir.path());
  CHECK(write_entry(d, "e.fjk", "", "x").error().code() == Code::invalid_argument);
  CHECK(write_entry(d, "e.fjk", std::string(kMaxEntryKeyBytes + 1, 'k'), "x").error().code() ==
        Code::invalid_argument);
  CHECK_FALSE(exists(dir / "e.fjk"));
}

// ---- issue 21 ----

TEST_CASE("entry_file: a stored key's bytes are escaped where they are echoed (G7)") {
  TempDir dir;
  const PrivateDir d = private_dir(dir.path());
  // A damaged or hostile entry: its key holds terminal escapes (set the window title, clear the screen).
  const std::string hostile = "sm_90a/\x1b]0;owned\x07\x1b[2J/" + std::string(400, 'f');
  REQUIRE(write_entry(d, "e.fjk", hostile, payload()).ok());
  auto r = read_entry(d, "e.fjk", kKey);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == Code::corrupt);
  for (const std::string& text : {r.error().message(), r.error().detail("reason").value_or("")}) {
    INFO(text);
    CHECK(text.find('\x1b') == std::string::npos);
    CHECK(text.find('\x07') == std::string::npos);
    CHECK(text.find("sm_90a/\\x1b]0;owned\\x07\\x1b[2J/fff") != std::string::npos);
    CHECK(text.find("(" + std::to_string(hostile.size()) + " bytes)") != std::string::npos);  // cut, like other echoes
  }
}
