// Who holds a flock, for the messages of a process that waits for it. flock locks are not
// reported by fcntl(F_GETLK); the kernel lists them in /proc/locks, with the holder's pid as seen
// from this process's pid namespace.
#pragma once

#include <optional>
#include <string>

namespace flashjit::cache {

struct LockHolder {
  long pid = 0;       // <= 0: a process this pid namespace cannot see
  std::string state;  // from /proc/<pid>/status, e.g. "T (stopped)"; empty when unreadable
};

// The holder of a flock on the file open at `fd` (matched by device and inode in /proc/locks);
// nullopt when none is listed (released meanwhile) or /proc/locks cannot be read.
std::optional<LockHolder> flock_holder(int fd);

// "pid 1234 (T (stopped))", "pid 1234", "a process in another pid namespace",
// "an unknown process (not listed in /proc/locks)".
std::string describe_holder(const std::optional<LockHolder>& holder);

}  // namespace flashjit::cache
