#include "cache/disk_cache.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <thread>

#include "cache/atomic_file.hpp"
#include "cache/entry_file.hpp"
#include "cache_test_util.hpp"

using namespace flashjit;
using namespace flashjit::cache;
using namespace flashjit::cache::test;
using namespace std::chrono_literals;

TEST_CASE("disk_cache: store then load round trip; other keys miss") {
  TempDir tmp;
  auto cache = open_cache(tmp / "root");
  EntryKey key = make_key("fa2_sm80-f16-d128x128-causal-m128n64w4s2");
  std::string payload = payload_for(key, 5000);
  REQUIRE(cache.store(key, payload).ok());

  auto got = cache.load(key);
  REQUIRE(got.ok());
  REQUIRE(got->has_value());
  CHECK(**got == payload);

  EntryKey other_hash = key;
  other_hash.content_hash = hash_hex("something else");
  CHECK_FALSE(cache.load(other_hash).value().has_value());
  CHECK_FALSE(cache.load(make_key("other")).value().has_value());
  CHECK_FALSE(cache.load(make_key("fa2", "sm_80")).value().has_value());  // arch folder absent: a miss

  CacheStats s = cache.stats();
  CHECK(s.hits == 1);
  CHECK(s.misses == 3);
  CHECK(s.stores == 1);
  CHECK(s.bytes_read == payload.size());
  CHECK(s.bytes_written == entry_file_bytes(entry_identity(key).size(), payload.size()));
}

TEST_CASE("disk_cache: file names are readable and folders private") {
  TempDir tmp;
  auto cache = open_cache(tmp / "root");
  EntryKey key{"sm_90a", "fa2_sm80-f16-d128x128-causal-m128n64w4s2", "00112233445566778899aabbccddeeff"};
  REQUIRE(cache.store(key, "cubin").ok());
  std::string expected = tmp / "root/sm_90a/fa2_sm80-f16-d128x128-causal-m128n64w4s2-0011223344556677.fjk";
  CHECK(cache.entry_path(key) == expected);
  CHECK(exists(expected));
  CHECK(mode_of(tmp / "root") == 0700);
  CHECK(mode_of(tmp / "root/sm_90a") == 0700);
  CHECK(mode_of(tmp / "root/sm_90a/locks") == 0700);
  CHECK(count_with_prefix(tmp / "root/sm_90a", ".tmp-") == 0);
}

TEST_CASE("disk_cache: invalid keys are refused before touching the disk") {
  TempDir tmp;
  auto cache = open_cache(tmp / "root");
  for (EntryKey bad : {EntryKey{"sm_90a", "../escape", hash_hex("x")}, EntryKey{"../../tmp", "k", hash_hex("x")},
                       EntryKey{"sm_90a", "k", "../../../../etc/passwd"}, EntryKey{"sm_90a", "a/b", hash_hex("x")}}) {
    CHECK(cache.store(bad, "x").error().code() == Code::invalid_argument);
    CHECK(cache.load(bad).error().code() == Code::invalid_argument);
    CHECK(cache.get_or_build(bad, builder_of("x")).error().code() == Code::invalid_argument);
  }
  CHECK(files_in(tmp / "root").empty());
}

TEST_CASE("disk_cache: get_or_build builds once, then hits") {
  TempDir tmp;
  auto cache = open_cache(tmp / "root");
  EntryKey key = make_key("k");
  int runs = 0;
  LookupOutcome how{};
  auto first = cache.get_or_build(key, builder_of("payload", &runs), &how);
  REQUIRE(first.ok());
  CHECK(*first == "payload");
  CHECK(how == LookupOutcome::built);
  auto second = cache.get_or_build(key, builder_of("other", &runs), &how);
  REQUIRE(second.ok());
  CHECK(*second == "payload");
  CHECK(how == LookupOutcome::hit);
  CHECK(runs == 1);
  CacheStats s = cache.stats();
  CHECK(s.builds == 1);
  CHECK(s.hits == 1);
  CHECK(s.misses == 1);
  CHECK(s.build_ms >= 0);
}

TEST_CASE("disk_cache: a failed build is returned and nothing is stored") {
  TempDir tmp;
  auto cache = open_cache(tmp / "root");
  EntryKey key = make_key("k");
  auto r = cache.get_or_build(key, []() -> Result<std::string> {
    return Error(Code::compile_failed, "nvrtc said no").with("nvrtc_log", "error: x");
  });
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == Code::compile_failed);
  CHECK(r.error().detail("nvrtc_log") == std::string("error: x"));
  CHECK_FALSE(exists(cache.entry_path(key)));
  // The lock was released: the next attempt builds right away.
  auto again = cache.get_or_build(key, builder_of("ok"));
  REQUIRE(again.ok());
  CHECK(*again == "ok");
}

TEST_CASE("disk_cache: a build may not build another key while holding its lock") {
  TempDir tmp;
  auto cache = open_cache(tmp / "root");
  EntryKey outer = make_key("outer");
  EntryKey inner = make_key("inner");
  REQUIRE(cache.store(make_key("cached"), "c").ok());
  auto r = cache.get_or_build(outer, [&]() -> Result<std::string> {
    // A hit needs no lock, so it is allowed.
    auto hit = cache.get_or_build(make_key("cached"), builder_of("never"));
    if (!hit.ok() || *hit != "c") return Error(Code::internal, "nested hit failed");
    // Storing from inside a build must not wait on the lock this thread holds.
    if (!cache.store(make_key("side"), "s").ok()) return Error(Code::internal, "store failed");
    auto miss = cache.get_or_build(inner, builder_of("inner"));
    if (miss.ok() || miss.error().code() != Code::invalid_argument) return Error(Code::internal, "nested miss allowed");
    return std::string("outer");
  });
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().to_string()));
  CHECK(*r == "outer");
  CHECK(cache.load(make_key("side"))->has_value());
}

// ---- corruption ----

TEST_CASE("disk_cache: a corrupt entry is a miss, is logged and removed, and gets rebuilt") {
  TempDir tmp;
  LogSink log;
  auto cache = open_cache(tmp / "root", &log);
  EntryKey key = make_key("victim");
  std::string payload = payload_for(key, 4000);
  REQUIRE(cache.store(key, payload).ok());
  std::string path = cache.entry_path(key);
  std::string good = read_file(path);
  std::string reason;

  SUBCASE("truncated") {
    REQUIRE(::truncate(path.c_str(), static_cast<off_t>(good.size() / 2)) == 0);
    reason = "payload bytes";
  }
  SUBCASE("flipped payload byte") {
    std::string b = good;
    b[b.size() - 100] ^= 0x40;
    write_file(path, b);
    reason = "checksum";
  }
  SUBCASE("wrong magic") {
    std::string b = good;
    b[3] = '!';
    write_file(path, b);
    reason = "bad magic";
  }
  SUBCASE("wrong version") {
    std::string b = good;
    b[8] = static_cast<char>(kEntryFormatVersion + 1);
    write_file(path, b);
    reason = "format version";
  }
  SUBCASE("key mismatch: another key's file renamed into place") {
    EntryKey other = make_key("other");
    REQUIRE(cache.store(other, payload_for(other)).ok());
    REQUIRE(::rename(cache.entry_path(other).c_str(), path.c_str()) == 0);
    reason = "holds key";
  }

  auto r = cache.load(key);
  REQUIRE(r.ok());
  CHECK_FALSE(r->has_value());
  CHECK(cache.stats().corrupt == 1);
  CHECK(log.contains(path));
  CHECK_MESSAGE(log.contains(reason), reason);
  CHECK_FALSE(exists(path));  // removed, so it is rebuilt and replaced

  LookupOutcome how{};
  auto rebuilt = cache.get_or_build(key, builder_of(payload), &how);
  REQUIRE(rebuilt.ok());
  CHECK(how == LookupOutcome::built);
  CHECK(*rebuilt == payload);
  CHECK(read_file(path) == good);
  CHECK(cache.load(key).value() == payload);
}

TEST_CASE("disk_cache: get_or_build replaces a corrupt entry directly") {
  TempDir tmp;
  LogSink log;
  auto cache = open_cache(tmp / "root", &log);
  EntryKey key = make_key("k");
  REQUIRE(cache.store(key, "good payload").ok());
  std::string b = read_file(cache.entry_path(key));
  b.back() ^= 1;
  write_file(cache.entry_path(key), b);
  int runs = 0;
  auto r = cache.get_or_build(key, builder_of("good payload", &runs));
  REQUIRE(r.ok());
  CHECK(runs == 1);
  CHECK(cache.stats().corrupt == 1);
  CHECK(cache.load(key).value() == std::string("good payload"));
}

// ---- concurrency ----

TEST_CASE("disk_cache: threads and processes racing on get_or_build build each key once") {
  TempDir tmp;
  std::string root = tmp / "root";
  std::string build_log = tmp / "builds.log";
  const std::vector<EntryKey> keys = {make_key("k0"), make_key("k1"), make_key("k2")};
  const int kProcs = 4, kThreads = 4, kRounds = 5;

  // Each build appends its key name to a shared log (O_APPEND writes of a line are atomic), so
  // builds are counted across processes. Builds are slow to widen the race window.
  auto run_callers = [&](DiskCache& cache, int threads) {
    std::atomic<int> failures{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        for (int round = 0; round < kRounds; ++round)
          for (std::size_t i = 0; i < keys.size(); ++i) {
            const EntryKey& key = keys[(i + t) % keys.size()];
            auto r = cache.get_or_build(key, [&]() -> Result<std::string> {
              int fd = ::open(build_log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
              std::string line = key.name + "\n";
              (void)!::write(fd, line.data(), line.size());
              ::close(fd);
              std::this_thread::sleep_for(30ms);
              return payload_for(key, 20000);
            });
            if (!r.ok() || *r != payload_for(key, 20000)) failures++;
          }
      });
    for (auto& th : pool) th.join();
    return failures.load();
  };

  std::vector<pid_t> children;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = ::fork();
    if (pid == 0) {
      Options o;
      o.root = root;
      auto cache = DiskCache::open(o);
      if (!cache.ok()) ::_exit(3);
      ::_exit(run_callers(*cache, kThreads) == 0 ? 0 : 1);
    }
    children.push_back(pid);
  }
  auto cache = open_cache(root);
  CHECK(run_callers(cache, kThreads) == 0);
  for (pid_t pid : children) CHECK(wait_child(pid) == 0);

  std::map<std::string, int> builds;
  std::string text = read_file(build_log);
  std::size_t start = 0;
  for (std::size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
    builds[text.substr(start, nl - start)]++;
  for (const EntryKey& key : keys) CHECK_MESSAGE(builds[key.name] == 1, key.name);

  for (const EntryKey& key : keys) CHECK(cache.load(key).value() == payload_for(key, 20000));
  CHECK(count_with_prefix(root + "/sm_90a", ".tmp-") == 0);
  auto verify = cache.verify();
  REQUIRE(verify.ok());
  CHECK(verify->bad.empty());
  CHECK(verify->good == keys.size());
}

// ---- crashes ----

TEST_CASE("disk_cache: a builder killed with SIGKILL does not block the next one") {
  TempDir tmp;
  std::string root = tmp / "root";
  EntryKey key = make_key("slow");
  ChildToKill child;
  REQUIRE(child.pipe_ok());
  start_building_child(child, root, key, [] { ::sleep(60); });  // killed long before this ends
  REQUIRE(child.reached());  // the child holds the key's lock and is building
  CHECK(child.kill() == 128 + SIGKILL);
  child.close_pipe();

  auto cache = open_cache(root);
  auto t0 = std::chrono::steady_clock::now();
  LookupOutcome how{};
  auto r = cache.get_or_build(key, builder_of("from parent"), &how);
  auto waited = std::chrono::steady_clock::now() - t0;
  REQUIRE(r.ok());
  CHECK(*r == "from parent");
  CHECK(how == LookupOutcome::built);
  CHECK(waited < 1s);
}

TEST_CASE("disk_cache: a writer killed mid-write leaves no valid-looking entry, and prune cleans up") {
  TempDir tmp;
  std::string root = tmp / "root";
  auto cache = open_cache(root);
  EntryKey key = make_key("half");
  REQUIRE(cache.store(make_key("other"), "x").ok());  // creates the arch folder
  ChildToKill child;
  REQUIRE(child.pipe_ok());
  child.start([&]() -> int {
    std::string full = encode_entry_header(entry_identity(key), "payload payload") + "payload payload";
    auto w = AtomicFileWriter::create(cache.entry_path(key));
    if (!w.ok() || !w->write(full.substr(0, full.size() / 2)).ok()) ::_exit(1);
    child.tell_parent_and_pause();
  });
  REQUIRE(child.reached());
  CHECK(child.kill() == 128 + SIGKILL);
  child.close_pipe();

  CHECK_FALSE(cache.load(key).value().has_value());
  CHECK(count_with_prefix(root + "/sm_90a", ".tmp-") == 1);
  auto summary = cache.scan();
  REQUIRE(summary.ok());
  CHECK(summary->temp_files == 1);
  CHECK(summary->entries == 1);  // the temp file is not counted as an entry
  auto pruned = cache.prune(cache.max_bytes());
  REQUIRE(pruned.ok());
  CHECK(pruned->temp_files_removed == 1);
  CHECK(pruned->evicted == 0);
  CHECK(count_with_prefix(root + "/sm_90a", ".tmp-") == 0);
  CHECK(cache.load(make_key("other"))->has_value());
}

// ---- permissions ----

TEST_CASE("disk_cache: a root writable by others is refused at open and at load") {
  TempDir tmp;
  std::string root = tmp / "root";
  ::mkdir(root.c_str(), 0777);
  ::chmod(root.c_str(), 0777);
  Options o;
  o.root = root;
  auto refused = DiskCache::open(o);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code() == Code::permission_denied);
  CHECK(refused.error().message().find(root) != std::string::npos);

  ::chmod(root.c_str(), 0700);
  auto cache = open_cache(root);
  EntryKey key = make_key("k");
  REQUIRE(cache.store(key, "x").ok());

  ::chmod(root.c_str(), 0775);  // loosened after open
  auto load = cache.load(key);
  REQUIRE_FALSE(load.ok());
  CHECK(load.error().code() == Code::permission_denied);
  CHECK(load.error().message().find("'" + root + "'") != std::string::npos);
  CHECK(cache.get_or_build(key, builder_of("y")).error().code() == Code::permission_denied);
  CHECK(cache.store(key, "y").error().code() == Code::permission_denied);
  ::chmod(root.c_str(), 0700);

  ::chmod((root + "/sm_90a").c_str(), 0757);
  load = cache.load(key);
  REQUIRE_FALSE(load.ok());
  CHECK(load.error().code() == Code::permission_denied);
  CHECK(load.error().message().find(root + "/sm_90a") != std::string::npos);
  CHECK(cache.scan().error().code() == Code::permission_denied);
  ::chmod((root + "/sm_90a").c_str(), 0700);
  CHECK(cache.load(key).value() == std::string("x"));
}

TEST_CASE("disk_cache: folders it creates are 0700") {
  TempDir tmp;
  mode_t old = ::umask(0);
  auto cache = open_cache(tmp / "deep/er/root");
  REQUIRE(cache.store(make_key("k", "sm_80"), "x").ok());
  ::umask(old);
  for (const char* sub : {"deep", "deep/er", "deep/er/root", "deep/er/root/sm_80", "deep/er/root/sm_80/locks"})
    CHECK_MESSAGE(mode_of(tmp / sub) == 0700, sub);
  CHECK(mode_of(cache.entry_path(make_key("k", "sm_80"))) == 0600);
}

// ---- size cap ----

TEST_CASE("disk_cache: the size cap evicts the least recently used entries") {
  TempDir tmp;
  LogSink log;
  EntryKey a = make_key("a"), b = make_key("b"), c = make_key("c"), d = make_key("d");
  const std::uint64_t entry = entry_file_bytes(entry_identity(a).size(), 1000);
  auto cache = open_cache(tmp / "root", &log, entry * 3 + entry / 2);  // room for three

  REQUIRE(cache.store(a, payload_for(a, 1000)).ok());
  std::this_thread::sleep_for(5ms);
  REQUIRE(cache.store(b, payload_for(b, 1000)).ok());
  std::this_thread::sleep_for(5ms);
  REQUIRE(cache.store(c, payload_for(c, 1000)).ok());
  std::this_thread::sleep_for(5ms);
  REQUIRE(cache.load(a)->has_value());  // a is now more recently used than b
  std::this_thread::sleep_for(5ms);
  REQUIRE(cache.store(d, payload_for(d, 1000)).ok());

  CHECK(exists(cache.entry_path(a)));
  CHECK_FALSE(exists(cache.entry_path(b)));
  CHECK(exists(cache.entry_path(c)));
  CHECK(exists(cache.entry_path(d)));
  CHECK(cache.stats().evictions == 1);
  CHECK(log.contains("evicted"));
  CHECK(cache.scan()->bytes <= cache.max_bytes());
}

TEST_CASE("disk_cache: the entry just stored is never evicted, even when alone over the cap") {
  TempDir tmp;
  auto cache = open_cache(tmp / "root", nullptr, 100);
  REQUIRE(cache.store(make_key("a", "sm_80"), std::string(500, 'a')).ok());
  std::this_thread::sleep_for(2ms);
  LookupOutcome how{};
  REQUIRE(cache.get_or_build(make_key("b", "sm_90a"), builder_of(std::string(500, 'b')), &how).ok());
  CHECK(how == LookupOutcome::built);
  CHECK_FALSE(exists(cache.entry_path(make_key("a", "sm_80"))));  // the cap spans arches
  CHECK(exists(cache.entry_path(make_key("b", "sm_90a"))));
}

TEST_CASE("disk_cache: max_bytes comes from Options, else FLASHJIT_CACHE_MAX_BYTES, else 2 GiB") {
  TempDir tmp;
  Options o;
  o.root = tmp / "root";
  {
    EnvGuard unset("FLASHJIT_CACHE_MAX_BYTES", std::nullopt);
    CHECK(DiskCache::open(o)->max_bytes() == kDefaultMaxBytes);
  }
  {
    EnvGuard env("FLASHJIT_CACHE_MAX_BYTES", "3M");
    CHECK(DiskCache::open(o)->max_bytes() == 3ull << 20);
    Options explicit_cap = o;
    explicit_cap.max_bytes = 12345;
    CHECK(DiskCache::open(explicit_cap)->max_bytes() == 12345);
  }
  {
    EnvGuard env("FLASHJIT_CACHE_MAX_BYTES", "1048576");
    CHECK(DiskCache::open(o)->max_bytes() == 1048576);
  }
  {
    EnvGuard env("FLASHJIT_CACHE_MAX_BYTES", "2GiB");
    CHECK(DiskCache::open(o)->max_bytes() == 2ull << 30);
  }
  for (const char* bad : {"lots", "0", "12X", "-5", "99999999999999999999999"}) {
    EnvGuard env("FLASHJIT_CACHE_MAX_BYTES", bad);
    auto r = DiskCache::open(o);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Code::invalid_argument);
    CHECK(r.error().message().find("FLASHJIT_CACHE_MAX_BYTES") != std::string::npos);
  }
}

TEST_CASE("disk_cache: the root comes from the environment when Options.root is unset") {
  TempDir tmp;
  EnvGuard max("FLASHJIT_CACHE_MAX_BYTES", std::nullopt);
  {
    EnvGuard env("FLASHJIT_CACHE_DIR", tmp / "from-env");
    auto c = DiskCache::open();
    REQUIRE(c.ok());
    CHECK(c->root() == tmp / "from-env");
    CHECK(mode_of(tmp / "from-env") == 0700);
  }
  {
    EnvGuard env("FLASHJIT_CACHE_DIR", std::nullopt);
    EnvGuard xdg("XDG_CACHE_HOME", tmp / "xdg");
    auto c = DiskCache::open();
    REQUIRE(c.ok());
    CHECK(c->root() == tmp / "xdg/flashjit");
  }
  {
    EnvGuard env("FLASHJIT_CACHE_DIR", std::nullopt);
    EnvGuard xdg("XDG_CACHE_HOME", std::nullopt);
    EnvGuard home("HOME", tmp / "home");
    auto c = DiskCache::open();
    REQUIRE(c.ok());
    CHECK(c->root() == tmp / "home/.cache/flashjit");
    CHECK(mode_of(tmp / "home/.cache") == 0700);
  }
}

TEST_CASE("disk_cache: FLASHJIT_LOG sends log lines to stderr by default") {
  // Only checks that opening with the variable set works and a logged event does not crash;
  // the line itself goes to the test's stderr.
  TempDir tmp;
  EnvGuard env("FLASHJIT_LOG", "1");
  Options o;
  o.root = tmp / "root";
  auto cache = DiskCache::open(o);
  REQUIRE(cache.ok());
  EntryKey key = make_key("k");
  REQUIRE(cache->store(key, "x").ok());
  write_file(cache->entry_path(key), "garbage");
  CHECK_FALSE(cache->load(key)->has_value());
  CHECK(cache->stats().corrupt == 1);
}

TEST_CASE("disk_cache: a cache folder deleted while in use is recreated on the next store") {
  TempDir tmp;
  auto cache = open_cache(tmp / "root");
  EntryKey key = make_key("k");
  REQUIRE(cache.store(key, "x").ok());
  std::error_code ec;
  std::filesystem::remove_all(tmp / "root", ec);
  CHECK_FALSE(cache.load(key).value().has_value());
  auto r = cache.get_or_build(key, builder_of("y"));
  REQUIRE(r.ok());
  CHECK(cache.load(key).value() == std::string("y"));
  CHECK(mode_of(tmp / "root") == 0700);
}

// ---- issue 21 ----

TEST_CASE("disk_cache: the log line of an entry holding another key escapes that key (G7)") {
  TempDir tmp;
  LogSink log;
  auto cache = open_cache(tmp / "root", &log);
  const EntryKey key = make_key("k");
  REQUIRE(cache.store(key, "x").ok());
  REQUIRE(write_entry(private_dir(tmp / "root/sm_90a"), entry_file_name(key), "sm_90a/\x1b[2J\x1b]0;owned\x07/0", "x").ok());
  auto r = cache.load(key);
  REQUIRE(r.ok());
  CHECK_FALSE(r->has_value());  // a miss, logged
  REQUIRE(log.contains("holds key"));
  for (const auto& line : log.lines()) {
    INFO(line);
    CHECK(line.find('\x1b') == std::string::npos);
    CHECK(line.find('\x07') == std::string::npos);
  }
  CHECK(log.contains("sm_90a/\\x1b[2J\\x1b]0;owned\\x07/0"));
}
