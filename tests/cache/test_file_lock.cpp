#include "cache/file_lock.hpp"

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "cache_test_util.hpp"

using namespace flashjit;
using namespace flashjit::cache;
using namespace flashjit::cache::test;
using namespace std::chrono_literals;

namespace {

// A private temp folder and the name (and path) of the lock file the tests take in it.
struct LockDir {
  TempDir tmp;
  const PrivateDir dir = private_dir(tmp.path());
  const std::string name = "k.lock", path = tmp / name;
};

}  // namespace

TEST_CASE_FIXTURE(LockDir, "file_lock: excludes other threads of the same process") {
  std::atomic<int> inside{0};
  std::atomic<int> max_inside{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        auto lock = FileLock::acquire(dir, name);
        if (!lock.ok()) {
          failures++;
          continue;
        }
        int now = ++inside;
        int seen = max_inside.load();
        while (now > seen && !max_inside.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::sleep_for(100us);
        --inside;
      }
    });
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  CHECK(max_inside == 1);
}

TEST_CASE_FIXTURE(LockDir, "file_lock: try_acquire and acquire_for report a held lock") {
  auto held = FileLock::acquire(dir, name);
  REQUIRE(held.ok());
  CHECK(held->held());
  auto other = FileLock::try_acquire(dir, name);
  REQUIRE(other.ok());
  CHECK_FALSE(other->has_value());
  auto t0 = std::chrono::steady_clock::now();
  auto timed = FileLock::acquire_for(dir, name, 50ms);
  REQUIRE(timed.ok());
  CHECK_FALSE(timed->has_value());
  CHECK(std::chrono::steady_clock::now() - t0 >= 50ms);
  held->release();
  auto again = FileLock::try_acquire(dir, name);
  REQUIRE(again.ok());
  CHECK(again->has_value());
}

TEST_CASE_FIXTURE(LockDir, "file_lock: a SIGKILLed holder leaves no stale lock") {
  ChildToKill child;
  REQUIRE(child.pipe_ok());
  child.start([&]() -> int {
    auto lock = FileLock::acquire(dir, name);
    if (!lock.ok()) ::_exit(1);
    child.tell_parent();
    ::sleep(30);
    ::_exit(2);
  });
  REQUIRE(child.reached());
  CHECK_FALSE(FileLock::try_acquire(dir, name)->has_value());
  CHECK(child.kill() == 128 + SIGKILL);
  auto t0 = std::chrono::steady_clock::now();
  auto lock = FileLock::acquire_for(dir, name, 5s);
  REQUIRE(lock.ok());
  CHECK(lock->has_value());
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
  child.close_pipe();
}

TEST_CASE_FIXTURE(LockDir, "file_lock: lock files are removed only when unheld, and waiters survive removal") {
  auto held = FileLock::acquire(dir, name);
  REQUIRE(held.ok());
  CHECK(remove_lock_file_if_unheld(dir, name).value() == false);
  CHECK(exists(path));

  std::atomic<bool> waiter_done{false};
  std::thread waiter([&] {
    auto l = FileLock::acquire(dir, name);
    CHECK(l.ok());
    waiter_done = true;
  });
  std::this_thread::sleep_for(20ms);
  held->release();
  waiter.join();
  CHECK(waiter_done);
  CHECK(remove_lock_file_if_unheld(dir, name).value() == true);
  CHECK_FALSE(exists(path));
  CHECK(remove_lock_file_if_unheld(dir, name).value() == false);  // already gone
}

TEST_CASE_FIXTURE(LockDir, "file_lock: removal during a wait forces the waiter onto the new file") {
  auto first = FileLock::acquire(dir, name);
  REQUIRE(first.ok());
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    auto l = FileLock::acquire(dir, name);
    CHECK(l.ok());
    got = true;
    // The lock we hold must be on the file the path names now.
    auto now = FileLock::try_acquire(dir, name);
    CHECK(now.ok());
    CHECK_FALSE(now->has_value());
  });
  std::this_thread::sleep_for(20ms);
  // Simulate prune: unlink while holding, then let go; the waiter wakes on an unlinked inode.
  ::unlink(path.c_str());
  first->release();
  waiter.join();
  CHECK(got);
  CHECK(exists(path));
}

TEST_CASE("file_lock: a folder removed under it is an error naming the path") {
  TempDir tmp;
  REQUIRE(::mkdir((tmp / "gone").c_str(), 0700) == 0);
  const PrivateDir dir = private_dir(tmp / "gone");
  REQUIRE(::rmdir((tmp / "gone").c_str()) == 0);
  auto lock = FileLock::acquire(dir, "k.lock");
  REQUIRE_FALSE(lock.ok());
  CHECK(lock.error().message().find(tmp / "gone/k.lock") != std::string::npos);
}

TEST_CASE("file_lock: a symlink in place of a lock file is never followed") {
  TempDir tmp;
  const PrivateDir dir = private_dir(tmp.path());
  write_file(tmp / "target", "keep");
  REQUIRE(::symlink((tmp / "target").c_str(), (tmp / "k.lock").c_str()) == 0);
  auto lock = FileLock::try_acquire(dir, "k.lock");
  REQUIRE_FALSE(lock.ok());
  CHECK(read_file(tmp / "target") == "keep");
}

TEST_CASE("file_lock: a long wait is reported with the holder's pid and state, periodically") {
  TempDir tmp;
  const PrivateDir dir = private_dir(tmp.path());
  ChildToKill child;
  REQUIRE(child.pipe_ok());
  child.start([&]() -> int {
    auto lock = FileLock::acquire(dir, "k.lock");
    if (!lock.ok()) ::_exit(1);
    child.tell_parent();
    ::raise(SIGSTOP);  // stopped with the lock held
    ::_exit(2);
  });
  REQUIRE(child.reached());
  std::vector<LockWait> notices;
  LockWaitNotices n;
  n.first_after = 100ms;
  n.every = 150ms;
  n.notify = [&](const LockWait& w) { notices.push_back(w); };
  auto lock = FileLock::acquire_for(dir, "k.lock", 700ms, n);
  CHECK(child.kill() == 128 + SIGKILL);
  child.close_pipe();
  REQUIRE(lock.ok());
  CHECK_FALSE(lock->has_value());
  REQUIRE(notices.size() >= 3);
  CHECK(notices[0].waited >= 100ms);
  CHECK(notices[1].waited >= notices[0].waited + 150ms);
  CHECK(notices[0].timeout == 700ms);
  CHECK(notices[0].path == tmp / "k.lock");
  CHECK_MESSAGE(notices.back().holder.find("pid " + std::to_string(child.pid())) == 0, notices.back().holder);
  CHECK(notices.back().holder.find("stopped") != std::string::npos);
}

TEST_CASE("file_lock: a short wait is silent") {
  TempDir tmp;
  const PrivateDir dir = private_dir(tmp.path());
  auto held = FileLock::acquire(dir, "k.lock");
  REQUIRE(held.ok());
  int calls = 0;
  LockWaitNotices n;
  n.notify = [&](const LockWait&) { ++calls; };
  auto lock = FileLock::acquire_for(dir, "k.lock", 50ms, n);  // well under kLockWaitNoticeAfter
  REQUIRE(lock.ok());
  CHECK_FALSE(lock->has_value());
  CHECK(calls == 0);
}
