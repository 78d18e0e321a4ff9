#include "cache/file_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "cache/lock_holder.hpp"

namespace flashjit::cache {

namespace {

enum class Attempt { locked, busy, replaced };

// Whether `name` in `dir` still refers to the file open at `fd`.
Result<bool> still_named(const DirFd& dir, const std::string& name, int fd) {
  auto held = file_id_of_fd(fd, dir.path_of(name));
  if (!held) return std::move(held).error();
  auto now = stat_at(dir, name);
  if (!now) {
    if (now.error().code() == Code::not_found) return false;
    return std::move(now).error();
  }
  return FileId{static_cast<unsigned long long>(now->st_dev), static_cast<unsigned long long>(now->st_ino)} == *held;
}

// One try: open (creating) the lock file, flock it, and make sure the name still refers to the
// file we locked. `wait` selects a blocking flock. `busy_fd`, when given, keeps the descriptor of
// a busy lock file (to ask who holds it).
Result<Attempt> attempt(const DirFd& dir, const std::string& name, bool wait, UniqueFd& out,
                        UniqueFd* busy_fd = nullptr) {
  auto fd = open_at(dir, name, O_RDWR | O_CREAT | O_NOFOLLOW, 0600);
  if (!fd) return std::move(fd).error();
  int op = LOCK_EX | (wait ? 0 : LOCK_NB);
  while (::flock(fd->get(), op) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) {
      if (busy_fd) *busy_fd = std::move(fd).value();
      return Attempt::busy;
    }
    return sys_error(Code::io_error, "cannot lock", dir.path_of(name), errno);
  }
  auto same = still_named(dir, name, fd->get());
  if (!same) return std::move(same).error();
  if (!*same) return Attempt::replaced;  // removed (and maybe recreated) while we waited
  out = std::move(fd).value();
  return Attempt::locked;
}

}  // namespace

Result<FileLock> FileLock::acquire(const DirFd& dir, const std::string& name) {
  for (;;) {
    UniqueFd fd;
    auto a = attempt(dir, name, /*wait=*/true, fd);
    if (!a) return std::move(a).error();
    if (*a == Attempt::locked) return FileLock(std::move(fd), dir.path_of(name));
  }
}

Result<std::optional<FileLock>> FileLock::try_acquire(const DirFd& dir, const std::string& name) {
  for (;;) {
    UniqueFd fd;
    auto a = attempt(dir, name, /*wait=*/false, fd);
    if (!a) return std::move(a).error();
    if (*a == Attempt::busy) return std::optional<FileLock>();
    if (*a == Attempt::locked) return std::optional<FileLock>(FileLock(std::move(fd), dir.path_of(name)));
  }
}

Result<std::optional<FileLock>> FileLock::acquire_for(const DirFd& dir, const std::string& name,
                                                     std::chrono::milliseconds timeout,
                                                     const LockWaitNotices& notices) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto deadline = start + timeout;
  auto next_notice = start + notices.first_after;
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    UniqueFd fd, busy;
    auto a = attempt(dir, name, /*wait=*/false, fd, notices.notify ? &busy : nullptr);
    if (!a) return std::move(a).error();
    if (*a == Attempt::locked) return std::optional<FileLock>(FileLock(std::move(fd), dir.path_of(name)));
    if (*a == Attempt::replaced) continue;
    auto now = clock::now();
    if (now >= deadline) return std::optional<FileLock>();
    if (notices.notify && now >= next_notice) {
      notices.notify(LockWait{dir.path_of(name), std::chrono::duration_cast<std::chrono::milliseconds>(now - start),
                              timeout, describe_holder(flock_holder(busy.get()))});
      next_notice = now + std::max(notices.every, std::chrono::milliseconds(1));
    }
    // Backing off keeps many waiters cheap; the cap bounds the delay after a holder lets go
    // (builds take seconds, so a few tens of milliseconds do not matter).
    std::this_thread::sleep_for(std::min<clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

std::string describe_lock_holder(const DirFd& dir, const std::string& name) {
  auto fd = open_at(dir, name, O_RDONLY | O_NOFOLLOW);
  return describe_holder(fd ? flock_holder(fd->get()) : std::nullopt);
}

Result<bool> remove_lock_file_if_unheld(const DirFd& dir, const std::string& name) {
  const std::string path = dir.path_of(name);
  auto fd = open_at(dir, name, O_RDWR | O_NOFOLLOW);
  if (!fd) {
    if (fd.error().code() == Code::not_found) return false;
    return std::move(fd).error();
  }
  while (::flock(fd->get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) return false;
    return sys_error(Code::io_error, "cannot lock", path, errno);
  }
  auto same = still_named(dir, name, fd->get());
  if (!same || !*same) return false;  // someone else already replaced it
  // Unlink while still holding the lock: waiters on this file will see it is gone and retry.
  if (::unlinkat(dir.fd(), name.c_str(), 0) != 0) {
    if (errno == ENOENT) return false;
    return sys_error(Code::io_error, "cannot remove lock file", path, errno);
  }
  return true;
}

}  // namespace flashjit::cache
