// An exclusive lock on a lock file, via flock().
//
// Why flock: the kernel drops the lock when the last descriptor closes, so a writer killed with
// SIGKILL leaves no stale lock behind; and each FileLock opens the file itself, so two threads of
// one process exclude each other exactly like two processes do.
//
// Lock files may be removed (prune/clear) while nobody holds them. To make that safe, a remover
// only unlinks a file it has locked itself, and an acquirer that wins the lock checks that the
// name still refers to the file it locked, retrying otherwise. Lock files are reached relative to
// their folder's descriptor and never through a symlink.
//
// A holder that is stopped (SIGSTOP, a debugger), not killed, keeps its lock: waiters with a
// timeout then say, while they wait, who holds it and for how long they have waited.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "cache/posix_io.hpp"
#include "flashjit/status.hpp"

namespace flashjit::cache {

// A build takes about a second: after five seconds of waiting the holder is slow, stuck or
// stopped, and whoever waits should hear about it.
inline constexpr std::chrono::seconds kLockWaitNoticeAfter{5};
// Often enough to show a wait is still going on, rare enough not to flood a log over a wait of
// minutes.
inline constexpr std::chrono::seconds kLockWaitNoticeEvery{30};

// One notice of a wait that is still going on.
struct LockWait {
  std::string path;                  // the lock file
  std::chrono::milliseconds waited;  // so far
  std::chrono::milliseconds timeout;
  std::string holder;                // describe_holder(): "pid 1234 (T (stopped))", ...
};

struct LockWaitNotices {
  std::chrono::milliseconds first_after = kLockWaitNoticeAfter;
  std::chrono::milliseconds every = kLockWaitNoticeEvery;
  std::function<void(const LockWait&)> notify;  // empty: wait silently
};

class FileLock {
 public:
  // Waits as long as it takes.
  static Result<FileLock> acquire(const DirFd& dir, const std::string& name);

  // Returns nullopt if someone else holds the lock; never waits.
  static Result<std::optional<FileLock>> try_acquire(const DirFd& dir, const std::string& name);

  // Polls (backing off to a few tens of milliseconds) until `timeout`; nullopt when it ran out.
  // `notices.notify` hears about the wait after `first_after`, then every `every`.
  static Result<std::optional<FileLock>> acquire_for(const DirFd& dir, const std::string& name,
                                                     std::chrono::milliseconds timeout,
                                                     const LockWaitNotices& notices = {});

  FileLock(FileLock&&) = default;
  FileLock& operator=(FileLock&&) = default;
  ~FileLock() = default;  // closing the descriptor releases the lock

  void release() { fd_.reset(); }
  bool held() const { return fd_.valid(); }
  const std::string& path() const { return path_; }

 private:
  FileLock(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}
  UniqueFd fd_;
  std::string path_;
};

// Who holds the lock file `name` now, in describe_holder()'s words ("pid 1234 (T (stopped))"): for
// the message of a wait that ran out.
std::string describe_lock_holder(const DirFd& dir, const std::string& name);

// Removes a lock file if no one holds it (see above). Returns true if it was removed; false if it
// was held or already gone.
Result<bool> remove_lock_file_if_unheld(const DirFd& dir, const std::string& name);

}  // namespace flashjit::cache
