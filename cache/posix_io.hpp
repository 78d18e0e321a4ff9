// Thin wrappers over the POSIX calls the cache needs, turning errno into flashjit::Error values
// that name the path and the failed operation. Nothing here knows about cache entries.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "flashjit/status.hpp"

namespace flashjit::cache {

// "<what> '<path>': <strerror(err)>", with details "path" and "errno". ENOENT maps to
// Code::not_found so callers can tell a miss from a failure; everything else to `code`. The path
// is shown through printable(): paths start with what a person gave (--cache-dir, a bundle's
// name), which may hold terminal escapes or be 100,000 characters long.
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

// An open folder and the path it was opened by. The path is kept for messages only: files below
// are reached relative to the descriptor (openat and friends), so a folder renamed or swapped
// after it was opened cannot redirect them. Copies share one descriptor.
class DirFd {
 public:
  DirFd() = default;
  // Opens `path` as a folder (O_DIRECTORY; a symlink at the path is followed, as for any folder
  // a user names). No policy check: see private_dir.hpp for folders of the cache.
  static Result<DirFd> open(const std::string& path);
  // Takes ownership of a descriptor opened on a folder.
  DirFd(UniqueFd fd, std::string path);

  bool valid() const { return fd_ && fd_->valid(); }
  int fd() const { return fd_ ? fd_->get() : -1; }
  const std::string& path() const { return path_; }
  std::string path_of(std::string_view name) const;  // for messages

 private:
  std::shared_ptr<const UniqueFd> fd_;
  std::string path_;
};

// Opens with O_CLOEXEC added; retries on EINTR.
Result<UniqueFd> open_fd(const std::string& path, int flags, unsigned mode = 0);
// The same relative to a folder; `name` is one path component. Errors name dir.path_of(name).
Result<UniqueFd> open_at(const DirFd& dir, const std::string& name, int flags, unsigned mode = 0);

// "a FIFO", "a folder", "a symbolic link", "a socket", "a character device", "a block device",
// "a regular file": what a stat mode describes, for messages.
std::string file_type_name(unsigned mode);

// A file opened for reading that is known to be a regular file, and what fstat said of it.
struct OpenedFile {
  UniqueFd fd;
  std::uint64_t size = 0;
  FileId id;
  unsigned mode = 0;  // st_mode
  unsigned uid = 0;
  timespec mtime{};
};

// Opens a file for reading without ever blocking on it: O_NONBLOCK (a FIFO would otherwise wait
// for a writer, a device might wait for anything) and O_NOCTTY, then fstat on the descriptor;
// anything but a regular file is refused with Code::invalid_argument, the message naming the path
// and what it is (detail "reason": "is not a regular file (a FIFO)"). The returned descriptor is
// blocking again. ENOENT is Code::not_found.
Result<OpenedFile> open_regular_file(const std::string& path);
// The same relative to a folder, never following a symlink at `name` (refused as
// "is a symbolic link").
Result<OpenedFile> open_regular_file_at(const DirFd& dir, const std::string& name);

// Writes every byte (retrying short writes and EINTR).
Status write_all(int fd, std::string_view bytes, const std::string& path);

// Reads up to n bytes, stopping early only at end of file; returns how many were read.
Result<std::size_t> read_up_to(int fd, char* buf, std::size_t n, const std::string& path);

// Flushes a folder's metadata so a rename into it survives a power loss.
Status fsync_dir(const std::string& dir);
Status fsync_dir(const DirFd& dir);

struct DirEntry {
  std::string name;
  bool is_dir = false;
  bool is_regular = false;  // false for symlinks, sockets, ... (never followed)
};

// Entries of a folder except "." and "..", sorted by name; uses lstat semantics.
Result<std::vector<DirEntry>> list_dir(const std::string& dir);
Result<std::vector<DirEntry>> list_dir(const DirFd& dir);

// lstat relative to a folder (never follows a symlink at `name`).
Result<struct stat> stat_at(const DirFd& dir, const std::string& name);

// Removes a file; a file that is already gone is not an error (another process won the race).
Status unlink_if_exists(const std::string& path);
Status unlink_at_if_exists(const DirFd& dir, const std::string& name);

std::string join_path(const std::string& dir, const std::string& name);
std::string parent_path(const std::string& path);
std::string file_name(const std::string& path);

}  // namespace flashjit::cache
