// What other processes leave behind (issue 6, item 10): temp files of writers that crashed, which
// the next write cleans, and a lock holder that was stopped rather than killed, which waiters
// name while they wait.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>

#include "cache/atomic_file.hpp"
#include "cache/disk_cache.hpp"
#include "cache_test_util.hpp"

using namespace flashjit;
using namespace flashjit::cache;
using namespace flashjit::cache::test;
using namespace std::chrono_literals;

namespace {

void age(const std::string& path, std::chrono::seconds by) {
  timespec old[2] = {{::time(nullptr) - by.count(), 0}, {::time(nullptr) - by.count(), 0}};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), old, AT_SYMLINK_NOFOLLOW) == 0);
}

// A pid that is not running: a child that has already exited and been reaped.
long dead_pid() {
  pid_t pid = test_support::fork_child([] { return 0; });
  wait_child(pid);
  return pid;
}

}  // namespace

TEST_CASE("stale: the next write removes crashed writers' old temp files, and only those") {
  TempDir tmp;
  LogSink log;
  auto cache = open_cache(tmp / "root", &log);
  REQUIRE(cache.store(make_key("first"), "x").ok());  // creates the arch folder
  const std::string arch = tmp / "root/sm_90a";
  const std::string dead = std::to_string(dead_pid());

  const std::string crashed = arch + "/.tmp-" + dead + "-00000000deadbeef";  // old, writer gone: removed
  write_file(crashed, "half an entry");
  age(crashed, 3600s);
  const std::string recent = arch + "/.tmp-" + dead + "-00000000feedface";  // writer gone, but fresh
  write_file(recent, "may be a writer in another pid namespace");
  const std::string live = arch + "/" + make_temp_name();  // old, but its writer (us) is alive
  write_file(live, "a stopped writer");
  age(live, 3600s);
  const std::string folder = arch + "/.tmp-" + dead + "-00000000cafef00d";  // not a regular file
  REQUIRE(::mkdir(folder.c_str(), 0700) == 0);
  age(folder, 3600s);
  const std::string link = arch + "/.tmp-" + dead + "-00000000abad1dea";  // a symlink: never followed
  REQUIRE(::symlink((tmp / "root/target").c_str(), link.c_str()) == 0);
  write_file(tmp / "root/target", "must survive");
  age(link, 3600s);
  std::string foreign;  // someone else's, old, writer gone: not ours to remove
  if (::geteuid() == 0) {
    foreign = arch + "/.tmp-" + dead + "-00000000f0e1d2c3";
    write_file(foreign, "another user's");
    REQUIRE(::chown(foreign.c_str(), 54321, 54321) == 0);
    age(foreign, 3600s);
  }

  REQUIRE(cache.store(make_key("second"), "y").ok());
  CHECK_FALSE(exists(crashed));
  CHECK(exists(recent));
  CHECK(exists(live));
  CHECK(exists(folder));
  CHECK(exists(link));
  CHECK(read_file(tmp / "root/target") == "must survive");
  if (!foreign.empty()) CHECK(exists(foreign));
  CHECK(log.contains(crashed));
  CHECK(cache.load(make_key("first"))->has_value());
  CHECK(cache.load(make_key("second"))->has_value());
}

TEST_CASE("stale: a stopped lock holder is named while others wait, and the wait still ends") {
  TempDir tmp;
  const std::string root = tmp / "root";
  const EntryKey key = make_key("slow");
  ChildToKill child;
  REQUIRE(child.pipe_ok());
  child.start([&]() -> int {
    Options o;
    o.root = root;
    auto cache = DiskCache::open(o);
    if (!cache.ok()) ::_exit(3);
    (void)cache->get_or_build(key, [&]() -> Result<std::string> {
      child.tell_parent();
      ::raise(SIGSTOP);  // stopped, not killed: its flock stays held
      return std::string("from child");
    });
    ::_exit(0);
  });
  REQUIRE(child.reached());

  LogSink log;
  Options o;
  o.root = root;
  o.logger = log.fn();
  o.lock_timeout = 1500ms;
  o.lock_wait_notice_after = 300ms;
  o.lock_wait_notice_every = 400ms;
  auto cache = DiskCache::open(o);
  REQUIRE(cache.ok());
  auto t0 = std::chrono::steady_clock::now();
  auto r = cache->get_or_build(key, [] { return Result<std::string>(std::string("from parent")); });
  auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(child.kill() == 128 + SIGKILL);
  child.close_pipe();
  REQUIRE(r.ok());
  CHECK(*r == "from parent");
  CHECK(waited >= 1500ms);  // the total timeout is kept
  const std::string pid = std::to_string(child.pid());
  CHECK_MESSAGE(log.contains("held by pid " + pid), "log lines:\n" << [&] {
    std::string all;
    for (const auto& l : log.lines()) all += l + "\n";
    return all;
  }());
  CHECK(log.contains("stopped"));
  CHECK(log.count("lock wait: waited") >= 2);  // periodically, not once
  CHECK(log.contains("building without it after 1.5 s"));
  CHECK(log.contains("waited 1500 ms for the lock"));  // and the end of the wait, as before
}
