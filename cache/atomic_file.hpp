// Publishing a file all at once: bytes go to a temp file beside the destination
// (".tmp-<pid>-<16 hex>"), are fsynced, and the temp file is renamed over the destination.
// Readers see either the old file or the complete new one, never a partial write. A writer that
// dies leaves only its temp file, which no reader opens and which cleanup removes once it is
// stale (its pid is gone or it is older than kStaleTempAge).
//
// Everything happens relative to the folder's descriptor (DirFd), so the folder that was checked
// is the folder written to, whatever happens to its path meanwhile.
#pragma once

#include <chrono>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>

#include "cache/posix_io.hpp"
#include "flashjit/status.hpp"

namespace flashjit::cache {

inline constexpr const char* kTempPrefix = ".tmp-";
inline constexpr std::chrono::minutes kStaleTempAge{10};

// A fresh ".tmp-<pid>-<random>" name; the random part comes from getrandom().
std::string make_temp_name();

// The writer pid encoded in a temp file name, or nullopt if `name` is not a temp file name.
std::optional<long> temp_name_pid(std::string_view name);


// True when a temp file can no longer belong to a live writer: its pid is not running (the pid
// may live in another pid namespace, hence also the age rule) or it is older than `max_age`.
// Only a regular file owned by this user is ever judged stale (a symlink, a folder or another
// user's file is never touched).
bool is_stale_temp(const DirFd& dir, const std::string& name, std::chrono::seconds max_age = kStaleTempAge);

class AtomicFileWriter {
 public:
  // Creates the temp file (mode 0600, O_EXCL, O_NOFOLLOW) in `dir`, to become `name` there.
  static Result<AtomicFileWriter> create(const DirFd& dir, std::string name);
  // The same for a path, opening its folder by path: for files outside the cache (an exported
  // bundle goes wherever the user says).
  static Result<AtomicFileWriter> create(const std::string& final_path);

  AtomicFileWriter(AtomicFileWriter&&) = default;
  AtomicFileWriter& operator=(AtomicFileWriter&&) = delete;
  // Removes the temp file unless commit() succeeded.
  ~AtomicFileWriter();

  Status write(std::string_view bytes);

  // fsync, optionally stamp the modification time, rename into place, fsync the folder.
  // The writer is finished afterwards, whatever the outcome.
  Status commit(std::optional<struct timespec> mtime = std::nullopt);

  // For messages.
  std::string temp_path() const { return dir_.path_of(temp_name_); }
  std::string final_path() const { return dir_.path_of(final_name_); }

 private:
  AtomicFileWriter(DirFd dir, UniqueFd fd, std::string temp_name, std::string final_name)
      : dir_(std::move(dir)), fd_(std::move(fd)), temp_name_(std::move(temp_name)), final_name_(std::move(final_name)) {}
  void abandon();

  DirFd dir_;
  UniqueFd fd_;
  std::string temp_name_;
  std::string final_name_;
};

// Writes `bytes` to `name` in `dir` through an AtomicFileWriter.
Status write_file_atomic(const DirFd& dir, const std::string& name, std::string_view bytes,
                         std::optional<struct timespec> mtime = std::nullopt);

}  // namespace flashjit::cache
