#include "cache/file_lock.hpp"

#include <doctest/doctest.h>
#include <signal.h>
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

TEST_CASE("file_lock: excludes other threads of the same process") {
  TempDir dir;
  std::string path = dir / "k.lock";
  std::atomic<int> inside{0};
  std::atomic<int> max_inside{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        auto lock = FileLock::acquire(path);
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

TEST_CASE("file_lock: try_acquire and acquire_for report a held lock") {
  TempDir dir;
  std::string path = dir / "k.lock";
  auto held = FileLock::acquire(path);
  REQUIRE(held.ok());
  CHECK(held->held());
  auto other = FileLock::try_acquire(path);
  REQUIRE(other.ok());
  CHECK_FALSE(other->has_value());
  auto t0 = std::chrono::steady_clock::now();
  auto timed = FileLock::acquire_for(path, 50ms);
  REQUIRE(timed.ok());
  CHECK_FALSE(timed->has_value());
  CHECK(std::chrono::steady_clock::now() - t0 >= 50ms);
  held->release();
  auto again = FileLock::try_acquire(path);
  REQUIRE(again.ok());
  CHECK(again->has_value());
}

TEST_CASE("file_lock: a SIGKILLed holder leaves no stale lock") {
  TempDir dir;
  std::string path = dir / "k.lock";
  ChildToKill child;
  REQUIRE(child.pipe_ok());
  child.start([&]() -> int {
    auto lock = FileLock::acquire(path);
    if (!lock.ok()) ::_exit(1);
    child.tell_parent();
    ::sleep(30);
    ::_exit(2);
  });
  REQUIRE(child.reached());
  CHECK_FALSE(FileLock::try_acquire(path)->has_value());
  CHECK(child.kill() == 128 + SIGKILL);
  auto t0 = std::chrono::steady_clock::now();
  auto lock = FileLock::acquire_for(path, 5s);
  REQUIRE(lock.ok());
  CHECK(lock->has_value());
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
  child.close_pipe();
}

TEST_CASE("file_lock: lock files are removed only when unheld, and waiters survive removal") {
  TempDir dir;
  std::string path = dir / "k.lock";
  auto held = FileLock::acquire(path);
  REQUIRE(held.ok());
  CHECK(remove_lock_file_if_unheld(path).value() == false);
  CHECK(exists(path));

  std::atomic<bool> waiter_done{false};
  std::thread waiter([&] {
    auto l = FileLock::acquire(path);
    CHECK(l.ok());
    waiter_done = true;
  });
  std::this_thread::sleep_for(20ms);
  held->release();
  waiter.join();
  CHECK(waiter_done);
  CHECK(remove_lock_file_if_unheld(path).value() == true);
  CHECK_FALSE(exists(path));
  CHECK(remove_lock_file_if_unheld(path).value() == false);  // already gone
}

TEST_CASE("file_lock: removal during a wait forces the waiter onto the new file") {
  TempDir dir;
  std::string path = dir / "k.lock";
  auto first = FileLock::acquire(path);
  REQUIRE(first.ok());
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    auto l = FileLock::acquire(path);
    CHECK(l.ok());
    got = true;
    // The lock we hold must be on the file the path names now.
    auto now = FileLock::try_acquire(path);
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

TEST_CASE("file_lock: a missing folder is an error naming the path") {
  TempDir dir;
  auto lock = FileLock::acquire(dir / "missing/k.lock");
  REQUIRE_FALSE(lock.ok());
  CHECK(lock.error().message().find(dir / "missing/k.lock") != std::string::npos);
}
