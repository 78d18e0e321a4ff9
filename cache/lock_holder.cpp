#include "cache/lock_holder.hpp"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace flashjit::cache {

namespace {

// The "State:" line of /proc/<pid>/status without its label: "T (stopped)", "S (sleeping)".
std::string process_state(long pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("State:", 0) == 0) {
      std::size_t start = line.find_first_not_of(" \t", 6);
      return start == std::string::npos ? std::string() : line.substr(start);
    }
  return {};
}

}  // namespace

std::optional<LockHolder> flock_holder(int fd) {
  struct stat st{};
  if (::fstat(fd, &st) != 0) return std::nullopt;
  char dev_ino[64];
  std::snprintf(dev_ino, sizeof dev_ino, "%02x:%02x:%llu", major(st.st_dev), minor(st.st_dev),
                static_cast<unsigned long long>(st.st_ino));
  // Lines look like "3: FLOCK  ADVISORY  WRITE 1234 00:2d:5678 0 EOF"; a waiter blocked on a lock
  // has "->" after the number and is skipped.
  std::ifstream locks("/proc/locks");
  for (std::string line; std::getline(locks, line);) {
    std::istringstream in(line);
    std::string ordinal, kind, advisory, access, pid, where;
    if (!(in >> ordinal >> kind)) continue;
    if (kind == "->" || kind != "FLOCK") continue;
    if (!(in >> advisory >> access >> pid >> where) || where != dev_ino) continue;
    LockHolder h;
    h.pid = std::strtol(pid.c_str(), nullptr, 10);  // 0 when unparsable: "unknown" below
    if (h.pid > 0) h.state = process_state(h.pid);
    return h;
  }
  return std::nullopt;
}

std::string describe_holder(const std::optional<LockHolder>& holder) {
  if (!holder) return "an unknown process (not listed in /proc/locks)";
  if (holder->pid <= 0) return "a process in another pid namespace";
  std::string out = "pid " + std::to_string(holder->pid);
  if (!holder->state.empty()) out += " (" + holder->state + ")";
  return out;
}

}  // namespace flashjit::cache
