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
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "cache/posix_io.hpp"
#include "flashjit/status.hpp"

namespace flashjit::cache {

class FileLock {
 public:
  // Waits as long as it takes.
  static Result<FileLock> acquire(const DirFd& dir, const std::string& name);

  // Returns nullopt if someone else holds the lock; never waits.
  static Result<std::optional<FileLock>> try_acquire(const DirFd& dir, const std::string& name);

  // Polls (backing off to a few tens of milliseconds) until `timeout`; nullopt when it ran out.
  static Result<std::optional<FileLock>> acquire_for(const DirFd& dir, const std::string& name,
                                                     std::chrono::milliseconds timeout);

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

// Removes a lock file if no one holds it (see above). Returns true if it was removed; false if it
// was held or already gone.
Result<bool> remove_lock_file_if_unheld(const DirFd& dir, const std::string& name);

}  // namespace flashjit::cache
