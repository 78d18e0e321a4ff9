#include "cache/file_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

namespace flashjit::cache {

namespace {

enum class Attempt { locked, busy, replaced };

// One try: open (creating) the lock file, flock it, and make sure the path still names the file
// we locked. `wait` selects a blocking flock.
Result<Attempt> attempt(const std::string& path, bool wait, UniqueFd& out) {
  auto fd = open_fd(path, O_RDWR | O_CREAT | O_NOFOLLOW, 0600);
  if (!fd) return std::move(fd).error();
  int op = LOCK_EX | (wait ? 0 : LOCK_NB);
  while (::flock(fd->get(), op) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) return Attempt::busy;
    return sys_error(Code::io_error, "cannot lock", path, errno);
  }
  auto held = file_id_of_fd(fd->get(), path);
  if (!held) return std::move(held).error();
  auto now = file_id_of_path(path);
  if (!now) {
    if (now.error().code() == Code::not_found) return Attempt::replaced;
    return std::move(now).error();
  }
  if (*now != *held) return Attempt::replaced;  // removed (and maybe recreated) while we waited
  out = std::move(fd).value();
  return Attempt::locked;
}

}  // namespace

Result<FileLock> FileLock::acquire(const std::string& path) {
  for (;;) {
    UniqueFd fd;
    auto a = attempt(path, /*wait=*/true, fd);
    if (!a) return std::move(a).error();
    if (*a == Attempt::locked) return FileLock(std::move(fd), path);
  }
}

Result<std::optional<FileLock>> FileLock::try_acquire(const std::string& path) {
  for (;;) {
    UniqueFd fd;
    auto a = attempt(path, /*wait=*/false, fd);
    if (!a) return std::move(a).error();
    if (*a == Attempt::busy) return std::optional<FileLock>();
    if (*a == Attempt::locked) return std::optional<FileLock>(FileLock(std::move(fd), path));
  }
}

Result<std::optional<FileLock>> FileLock::acquire_for(const std::string& path, std::chrono::milliseconds timeout) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    auto r = try_acquire(path);
    if (!r || r->has_value()) return r;
    auto now = clock::now();
    if (now >= deadline) return std::optional<FileLock>();
    // Backing off keeps many waiters cheap; the cap bounds the delay after a holder lets go
    // (builds take seconds, so a few tens of milliseconds do not matter).
    std::this_thread::sleep_for(std::min<clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

Result<bool> remove_lock_file_if_unheld(const std::string& path) {
  auto fd = open_fd(path, O_RDWR | O_NOFOLLOW);
  if (!fd) {
    if (fd.error().code() == Code::not_found) return false;
    return std::move(fd).error();
  }
  while (::flock(fd->get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) return false;
    return sys_error(Code::io_error, "cannot lock", path, errno);
  }
  auto held = file_id_of_fd(fd->get(), path);
  auto now = file_id_of_path(path);
  if (!held || !now || *held != *now) return false;  // someone else already replaced it
  // Unlink while still holding the lock: waiters on this file will see it is gone and retry.
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return false;
    return sys_error(Code::io_error, "cannot remove lock file", path, errno);
  }
  return true;
}

}  // namespace flashjit::cache
