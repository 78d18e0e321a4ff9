// Management operations of DiskCache (cache/disk_cache_manage.cpp).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

#include "cache/atomic_file.hpp"
#include "cache/disk_cache.hpp"
#include "cache/entry_file.hpp"
#include "cache/file_lock.hpp"
#include "cache_test_util.hpp"

using namespace flashjit;
using namespace flashjit::cache;
using namespace flashjit::cache::test;
using namespace std::chrono_literals;

namespace {

std::uint64_t size_of(const DiskCache& cache, const EntryKey& key, std::size_t payload) {
  (void)cache;
  return entry_file_bytes(entry_identity(key).size(), payload);
}

}  // namespace

TEST_CASE("manage: scan counts entries and bytes per arch") {
  TempDir tmp;
  auto cache = open_cache(tmp / "root");
  EntryKey a = make_key("a", "sm_80"), b = make_key("b", "sm_80"), c = make_key("c", "sm_90a");
  REQUIRE(cache.store(a, std::string(100, 'a')).ok());
  REQUIRE(cache.store(b, std::string(200, 'b')).ok());
  REQUIRE(cache.store(c, std::string(300, 'c')).ok());
  ::mkdir((tmp / "root/not_an_arch").c_str(), 0700);  // ignored
  write_file(tmp / "root/sm_80/README", "stray files are not entries");

  auto s = cache.scan();
  REQUIRE(s.ok());
  REQUIRE(s->arches.size() == 2);
  CHECK(s->arches[0].arch == "sm_80");
  CHECK(s->arches[0].entries == 2);
  CHECK(s->arches[0].bytes == size_of(cache, a, 100) + size_of(cache, b, 200));
  CHECK(s->arches[1].arch == "sm_90a");
  CHECK(s->arches[1].entries == 1);
  CHECK(s->entries == 3);
  CHECK(s->bytes == size_of(cache, a, 100) + size_of(cache, b, 200) + size_of(cache, c, 300));
  CHECK(s->temp_files == 0);
  CHECK(s->lock_files == 3);
}

TEST_CASE("manage: list gives keys, paths, sizes and last use") {
  TempDir tmp;
  auto cache = open_cache(tmp / "root");
  EntryKey a = make_key("a", "sm_80"), b = make_key("b", "sm_90a");
  auto before = std::chrono::system_clock::now() - 1s;
  REQUIRE(cache.store(a, "aaa").ok());
  REQUIRE(cache.store(b, "bbbb").ok());

  auto all = cache.list();
  REQUIRE(all.ok());
  REQUIRE(all->size() == 2);
  CHECK((*all)[0].key == a);
  CHECK((*all)[0].path == cache.entry_path(a));
  CHECK((*all)[0].file_bytes == size_of(cache, a, 3));
  CHECK((*all)[0].last_used >= before);
  CHECK((*all)[0].problem.empty());
  CHECK((*all)[1].key == b);

  auto one = cache.list(std::string("sm_90a"));
  REQUIRE(one.ok());
  REQUIRE(one->size() == 1);
  CHECK((*one)[0].key == b);
  CHECK(cache.list(std::string("sm_100")).value().empty());
  CHECK(cache.list(std::string("../etc")).error().code() == Code::invalid_argument);

  // An entry whose header is damaged is still listed, with the problem.
  std::string damaged = read_file(cache.entry_path(a));
  damaged[0] = 'X';
  write_file(cache.entry_path(a), damaged);
  auto after = cache.list(std::string("sm_80"));
  REQUIRE(after.ok());
  REQUIRE(after->size() == 1);
  CHECK((*after)[0].problem == "bad magic");
  CHECK((*after)[0].key.name == "a");
}

TEST_CASE("manage: verify reports bad entries and optionally removes them") {
  TempDir tmp;
  auto cache = open_cache(tmp / "root");
  EntryKey good = make_key("good"), flipped = make_key("flipped"), moved = make_key("moved"), src = make_key("src");
  for (const EntryKey& k : {good, flipped, src}) REQUIRE(cache.store(k, payload_for(k, 500)).ok());
  std::string b = read_file(cache.entry_path(flipped));
  b[b.size() - 1] ^= 0x20;
  write_file(cache.entry_path(flipped), b);
  // An entry copied to another key's place: its bytes are intact, only the key gives it away.
  write_file(cache.entry_path(moved), read_file(cache.entry_path(src)));

  auto report = cache.verify();
  REQUIRE(report.ok());
  CHECK(report->checked == 4);
  CHECK(report->good == 2);
  REQUIRE(report->bad.size() == 2);
  CHECK(report->removed == 0);
  for (const BadEntry& bad : report->bad) {
    if (bad.path == cache.entry_path(flipped)) CHECK(bad.reason.find("checksum") != std::string::npos);
    else CHECK(bad.path == cache.entry_path(moved));
  }
  CHECK(exists(cache.entry_path(flipped)));

  auto fixed = cache.verify(/*remove_bad=*/true);
  REQUIRE(fixed.ok());
  CHECK(fixed->removed == 2);
  CHECK_FALSE(exists(cache.entry_path(flipped)));
  CHECK_FALSE(exists(cache.entry_path(moved)));
  auto clean = cache.verify();
  REQUIRE(clean.ok());
  CHECK(clean->bad.empty());
  CHECK(clean->good == 2);
}

TEST_CASE("manage: prune evicts least recently used down to the size given") {
  TempDir tmp;
  auto cache = open_cache(tmp / "root");
  std::vector<EntryKey> keys;
  for (int i = 0; i < 5; ++i) {
    keys.push_back(make_key("k" + std::to_string(i)));
    REQUIRE(cache.store(keys.back(), std::string(1000, 'x')).ok());
    std::this_thread::sleep_for(3ms);
  }
  REQUIRE(cache.load(keys[0])->has_value());  // k0 becomes the most recently used
  std::uint64_t one = size_of(cache, keys[0], 1000);
  auto r = cache.prune(2 * one);
  REQUIRE(r.ok());
  CHECK(r->evicted == 3);
  CHECK(r->bytes_freed == 3 * one);
  CHECK(r->bytes_after == 2 * one);
  CHECK(exists(cache.entry_path(keys[0])));
  CHECK(exists(cache.entry_path(keys[4])));
  for (int i = 1; i <= 3; ++i) CHECK_FALSE(exists(cache.entry_path(keys[i])));
  CHECK(cache.stats().evictions == 3);
}

TEST_CASE("manage: prune removes stale temp files and unused lock files, keeps live ones") {
  TempDir tmp;
  auto cache = open_cache(tmp / "root");
  EntryKey key = make_key("k");
  REQUIRE(cache.store(key, "x").ok());
  std::string arch = tmp / "root/sm_90a";
  write_file(arch + "/.tmp-999999999-00000000deadbeef", "crashed writer (no such pid)");
  std::string live = arch + "/" + make_temp_name();  // our pid, fresh: a writer at work
  write_file(live, "in progress");
  std::string old_live = arch + "/" + make_temp_name();
  write_file(old_live, "abandoned long ago");
  timespec old[2] = {{::time(nullptr) - 3600, 0}, {::time(nullptr) - 3600, 0}};
  ::utimensat(AT_FDCWD, old_live.c_str(), old, 0);

  EntryKey busy = make_key("busy");
  std::string busy_lock = arch + "/locks/" + lock_file_name(busy);
  auto held = FileLock::acquire(private_dir(arch + "/locks"), lock_file_name(busy));
  REQUIRE(held.ok());

  auto r = cache.prune(cache.max_bytes());
  REQUIRE(r.ok());
  CHECK(r->evicted == 0);
  CHECK(r->temp_files_removed == 2);
  CHECK(r->lock_files_removed == 1);  // k's lock; busy's is held
  CHECK(exists(live));
  CHECK_FALSE(exists(old_live));
  CHECK(exists(busy_lock));
  CHECK(cache.load(key)->has_value());
}

TEST_CASE("manage: clear one arch or all") {
  TempDir tmp;
  auto cache = open_cache(tmp / "root");
  EntryKey a = make_key("a", "sm_80"), b = make_key("b", "sm_90a"), c = make_key("c", "sm_90a");
  for (const EntryKey& k : {a, b, c}) REQUIRE(cache.store(k, "payload").ok());

  auto one = cache.clear(std::string("sm_90a"));
  REQUIRE(one.ok());
  CHECK(one->entries_removed == 2);
  CHECK(one->bytes_freed == size_of(cache, b, 7) + size_of(cache, c, 7));
  CHECK(one->lock_files_removed == 2);
  CHECK(cache.load(a)->has_value());
  CHECK_FALSE(cache.load(b)->has_value());

  CHECK(cache.clear(std::string("sm_75")).value().entries_removed == 0);  // no folder: nothing to do
  CHECK(cache.clear(std::string("sm_80/..")).error().code() == Code::invalid_argument);

  auto all = cache.clear();
  REQUIRE(all.ok());
  CHECK(all->entries_removed == 1);
  CHECK(cache.scan()->entries == 0);
  // The cache keeps working after a clear.
  REQUIRE(cache.store(a, "again").ok());
  CHECK(cache.load(a).value() == std::string("again"));
}
