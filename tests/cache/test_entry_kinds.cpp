// Things other than a good entry file at an entry's name (issue 6, defects 2 and 7): a FIFO, a
// folder, a symlink, a file of another owner or one others may write. None may block a reader,
// none may be used, each is reported by list and verify, and a store that cannot replace one
// says so.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>

#include "cache/entry_file.hpp"
#include "cache_test_util.hpp"

using namespace flashjit;
using namespace flashjit::cache;
using namespace flashjit::cache::test;
using namespace std::chrono_literals;

using test_support::run_bounded;

TEST_CASE("entry kinds: a FIFO in place of an entry never blocks; it is a miss, replaced by the next build") {
  TempDir tmp;
  const std::string root = tmp / "root";
  auto cache = open_cache(root);
  const EntryKey key = make_key("k");
  REQUIRE(cache.store(make_key("other"), "x").ok());  // creates the arch folder
  REQUIRE(::mkfifo(cache.entry_path(key).c_str(), 0600) == 0);

  const int code = run_bounded(5, [&] {
    LogSink log;
    auto c = open_cache(root, &log);
    auto r = c.load(key);
    if (!r.ok() || r->has_value()) return 1;
    if (!log.contains("FIFO")) return 2;
    auto built = c.get_or_build(key, builder_of("built"));
    if (!built.ok() || *built != "built") return 3;
    auto again = c.load(key);
    return again.ok() && again->has_value() && **again == "built" ? 0 : 4;
  });
  CHECK(code == 0);  // 128 + SIGALRM (142) means it blocked
}

TEST_CASE("entry kinds: list and verify report a FIFO and a folder at an entry's name, and do not block") {
  TempDir tmp;
  const std::string root = tmp / "root";
  auto cache = open_cache(root);
  const EntryKey good = make_key("good"), fifo = make_key("fifo"), dir = make_key("dir");
  REQUIRE(cache.store(good, "x").ok());
  REQUIRE(::mkfifo(cache.entry_path(fifo).c_str(), 0600) == 0);
  REQUIRE(::mkdir(cache.entry_path(dir).c_str(), 0700) == 0);

  const int code = run_bounded(5, [&] {
    auto c = open_cache(root);
    auto listed = c.list();
    if (!listed.ok() || listed->size() != 3) return 1;
    for (const EntryInfo& e : *listed) {
      if (e.key.name == "good" && !e.problem.empty()) return 2;
      if (e.key.name == "fifo" && e.problem.find("FIFO") == std::string::npos) return 3;
      if (e.key.name == "dir" && e.problem.find("folder") == std::string::npos) return 4;
    }
    auto verified = c.verify();
    if (!verified.ok() || verified->good != 1 || verified->bad.size() != 2) return 5;
    return 0;
  });
  CHECK(code == 0);
}

TEST_CASE("entry kinds: a folder in place of an entry makes the store fail visibly") {
  TempDir tmp;
  LogSink log;
  auto cache = open_cache(tmp / "root", &log);
  const EntryKey key = make_key("k");
  REQUIRE(cache.store(make_key("other"), "x").ok());
  REQUIRE(::mkdir(cache.entry_path(key).c_str(), 0700) == 0);

  auto stored = cache.store(key, "payload");
  REQUIRE_FALSE(stored.ok());
  CHECK(stored.error().message().find(cache.entry_path(key)) != std::string::npos);

  std::optional<Error> store_error;
  auto r = cache.get_or_build(key, builder_of("payload"), nullptr, &store_error);
  REQUIRE(r.ok());  // the caller still gets what was built
  CHECK(*r == "payload");
  REQUIRE(store_error.has_value());  // and learns it was not kept
  CHECK(store_error->message().find(cache.entry_path(key)) != std::string::npos);
  CHECK(store_error->message().find("a folder is in its place") != std::string::npos);
  CHECK(cache.stats().store_failures == 1);
  CHECK(log.contains("could not store"));
  CHECK(exists(cache.entry_path(key)));  // a folder is never removed by the cache
  CHECK(cache.verify(/*remove_bad=*/true)->removed == 0);
}

TEST_CASE("entry kinds: a symlink, another owner's file or one others may write is never used") {
  TempDir tmp;
  LogSink log;
  auto cache = open_cache(tmp / "root", &log);
  const EntryKey key = make_key("k");
  REQUIRE(cache.store(key, "good").ok());
  const std::string path = cache.entry_path(key);
  std::string reason;

  SUBCASE("a symlink to a valid entry elsewhere") {
    write_file(tmp / "elsewhere.fjk", read_file(path));
    ::chmod((tmp / "elsewhere.fjk").c_str(), 0600);
    REQUIRE(::unlink(path.c_str()) == 0);
    REQUIRE(::symlink((tmp / "elsewhere.fjk").c_str(), path.c_str()) == 0);
    reason = "symbolic link";
  }
  SUBCASE("writable by others") {
    REQUIRE(::chmod(path.c_str(), 0666) == 0);
    reason = "writable by group or others";
  }
  SUBCASE("writable by the group") {
    REQUIRE(::chmod(path.c_str(), 0620) == 0);
    reason = "writable by group or others";
  }
  SUBCASE("owned by another uid") {
    if (::geteuid() != 0) return;  // only root can give a file away
    REQUIRE(::chown(path.c_str(), 54321, 54321) == 0);
    reason = "owned by uid 54321";
  }
  auto r = cache.load(key);
  REQUIRE(r.ok());
  CHECK_FALSE(r->has_value());
  CHECK_MESSAGE(log.contains(reason), reason);
  auto listed = cache.list();
  REQUIRE(listed.ok());
  // The bad file was removed by the load (it is rebuilt on next use), or, should it still be
  // there, list names the problem.
  for (const EntryInfo& e : *listed) CHECK(e.problem.find(reason) != std::string::npos);
  auto rebuilt = cache.get_or_build(key, builder_of("good"));
  REQUIRE(rebuilt.ok());
  CHECK(cache.load(key).value() == std::string("good"));
}

TEST_CASE("entry kinds: a socket in place of an entry is a miss") {
  TempDir tmp;
  auto cache = open_cache(tmp / "root");
  const EntryKey key = make_key("k");
  REQUIRE(cache.store(make_key("other"), "x").ok());
  const std::string path = cache.entry_path(key);
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  REQUIRE(path.size() < sizeof addr.sun_path);
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  auto r = cache.load(key);
  ::close(s);
  REQUIRE(r.ok());
  CHECK_FALSE(r->has_value());
}
