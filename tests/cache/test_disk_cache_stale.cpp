// What other processes leave behind (issue 6, item 10): temp files of writers that crashed, which
// the next write cleans, and a lock holder that was stopped rather than killed, which waiters
// name while they wait; the maintenance lock's waits are bounded the same way (issue 21, G2).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>

#include "cache/atomic_file.hpp"
#include "cache/disk_cache.hpp"
#include "cache/disk_cache_state.hpp"
#include "cache/file_lock.hpp"
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

// A cache on `root` that waits 1.5 s for a lock (notices after 0.3 s, then every 0.4 s), logging
// to `log`.
Options quick_lock_options(const std::string& root, LogSink& log) {
  Options o;
  o.root = root;
  o.logger = log.fn();
  o.lock_timeout = 1500ms;
  o.lock_wait_notice_after = 300ms;
  o.lock_wait_notice_every = 400ms;
  return o;
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
  start_building_child(child, root, key, [] { ::raise(SIGSTOP); });  // stopped, not killed: its flock stays held
  REQUIRE(child.reached());

  LogSink log;
  auto cache = DiskCache::open(quick_lock_options(root, log));
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

// ---- issue 21 G2: a stopped holder of the maintenance lock ----

namespace {

// A cache root holding one entry (`kept`), and a process holding its maintenance lock, stopped:
// `flashjit cache prune` under Ctrl-Z.
class StoppedMaintenance {
 public:
  TempDir tmp;
  const std::string root = tmp / "root";
  const EntryKey kept = make_key("kept");
  LogSink log;

  StoppedMaintenance() {
    REQUIRE(open_cache(root).store(kept, payload_for(kept)).ok());
    REQUIRE(child_.pipe_ok());
    child_.start([&]() -> int {
      auto dir = PrivateDir::open_root(root, /*create=*/false);
      if (!dir.ok()) ::_exit(3);
      auto lock = FileLock::acquire(*dir, kMaintenanceLockName);
      if (!lock.ok()) ::_exit(4);
      child_.tell_parent();
      ::raise(SIGSTOP);  // stopped, not killed: its flock stays held
      ::_exit(0);
    });
    REQUIRE(child_.reached());
  }
  ~StoppedMaintenance() { release(); }

  std::string pid() const { return std::to_string(child_.pid()); }

  // A cache on `root` with quick_lock_options(), logging to `log`.
  DiskCache open(std::optional<std::uint64_t> max_bytes = std::nullopt) {
    Options o = quick_lock_options(root, log);
    o.max_bytes = max_bytes;
    auto c = DiskCache::open(o);
    REQUIRE(c.ok());
    return std::move(c).value();
  }

  // Runs `op` on another thread. A wait that never ends would hang the suite: past `limit` the
  // holder is killed (its lock goes with it) so that `op` returns, and the test fails.
  template <class Op>
  auto run_bounded(std::chrono::seconds limit, Op op) {
    auto done = std::async(std::launch::async, op);
    const bool in_time = done.wait_for(limit) == std::future_status::ready;
    CHECK_MESSAGE(in_time, "still waiting for the maintenance lock after " << limit.count() << " s");
    if (!in_time) release();
    return done.get();
  }

  void release() {
    if (released_) return;
    released_ = true;
    child_.kill();
  }

  std::string log_lines() const {
    std::string all;
    for (const auto& l : log.lines()) all += l + "\n";
    return all;
  }

 private:
  ChildToKill child_;
  bool released_ = false;
};

}  // namespace

TEST_CASE("stale: a stopped maintenance-lock holder delays a store by the lock timeout, naming it; no cap then") {
  StoppedMaintenance m;
  auto cache = m.open(/*max_bytes=*/1);  // every other entry would be evicted, if the cap were enforced
  const EntryKey stored = make_key("stored"), built = make_key("built");
  auto t0 = std::chrono::steady_clock::now();
  Status st = m.run_bounded(10s, [&] { return cache.store(stored, payload_for(stored)); });
  const auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(st.ok());
  CHECK(waited >= 1500ms);  // the whole timeout: a holder that is merely slow gets its chance
  // An application's first-use compile takes the same path after its build.
  auto r = m.run_bounded(10s, [&] {
    return cache.get_or_build(built, [&] { return Result<std::string>(payload_for(built)); });
  });
  CHECK(r.ok());
  m.release();

  INFO("log lines:\n" << m.log_lines());
  CHECK(m.log.count("held by pid " + m.pid()) >= 4);  // periodically, in both waits
  CHECK(m.log.contains("stopped"));
  CHECK(m.log.contains(m.root + "/.maintenance.lock"));
  CHECK(m.log.count("not enforcing the size cap this time") == 2);  // once per store, after its wait
  CHECK(cache.load(m.kept)->has_value());  // the cap was not enforced, so nothing was evicted
  CHECK(cache.load(stored)->has_value());
  CHECK(cache.load(built)->has_value());
}

TEST_CASE("stale: prune and clear give up after the lock timeout when a stopped process holds the maintenance lock") {
  StoppedMaintenance m;
  auto cache = m.open();
  auto pruned = m.run_bounded(10s, [&] { return cache.prune(0); });
  auto cleared = m.run_bounded(10s, [&] { return cache.clear(); });
  m.release();

  for (const auto* e : {pruned.ok() ? nullptr : &pruned.error(), cleared.ok() ? nullptr : &cleared.error()}) {
    REQUIRE(e != nullptr);
    const std::string text = e->to_string();
    INFO(text);
    CHECK(text.find(m.root + "/.maintenance.lock") != std::string::npos);
    CHECK(text.find("held by pid " + m.pid()) != std::string::npos);
    CHECK(text.find("stopped") != std::string::npos);
    CHECK(text.find("1.5 s") != std::string::npos);
  }
  CHECK(m.log.contains("lock wait: waited"));
  CHECK(cache.load(m.kept)->has_value());  // nothing was removed
}
