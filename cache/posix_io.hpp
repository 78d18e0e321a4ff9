// Thin wrappers over the POSIX calls the cache needs, turning errno into flashjit::Error values
// that name the path and the failed operation. Nothing here knows about cache entries.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flashjit/status.hpp"

namespace flashjit::cache {

// "<what> '<path>': <strerror(err)>", with details "path" and "errno". ENOENT maps to
// Code::not_found so callers can tell a miss from a failure; everything else to `code`.
Error sys_error(Code code, const std::string& what, const std::string& path, int err);

// Owns a file descriptor; closes it on destruction. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Which file a path or descriptor refers to; tells a replaced file from the one we read.
struct FileId {
  unsigned long long dev = 0;
  unsigned long long ino = 0;
  bool operator==(const FileId& o) const { return dev == o.dev && ino == o.ino; }
  bool operator!=(const FileId& o) const { return !(*this == o); }
};
Result<FileId> file_id_of_fd(int fd, const std::string& path);
Result<FileId> file_id_of_path(const std::string& path);  // does not follow a final symlink

// Opens with O_CLOEXEC added; retries on EINTR.
Result<UniqueFd> open_fd(const std::string& path, int flags, unsigned mode = 0);

// Writes every byte (retrying short writes and EINTR).
Status write_all(int fd, std::string_view bytes, const std::string& path);

// Reads up to n bytes, stopping early only at end of file; returns how many were read.
Result<std::size_t> read_up_to(int fd, char* buf, std::size_t n, const std::string& path);

// Flushes a folder's metadata so a rename into it survives a power loss.
Status fsync_dir(const std::string& dir);

struct DirEntry {
  std::string name;
  bool is_dir = false;
  bool is_regular = false;  // false for symlinks, sockets, ... (never followed)
};

// Entries of a folder except "." and "..", sorted by name; uses lstat semantics.
Result<std::vector<DirEntry>> list_dir(const std::string& dir);

// Removes a file; a file that is already gone is not an error (another process won the race).
Status unlink_if_exists(const std::string& path);

std::string join_path(const std::string& dir, const std::string& name);
std::string parent_path(const std::string& path);
std::string file_name(const std::string& path);

}  // namespace flashjit::cache
