// Publishing a file all at once: bytes go to a temp file beside the destination
// (".tmp-<pid>-<16 hex>"), are fsynced, and the temp file is renamed over the destination.
// Readers see either the old file or the complete new one, never a partial write. A writer that
// dies leaves only its temp file, which no reader opens; the next write into the same folder
// removes it once it is stale (remove_stale_temps), and `cache prune` removes it sooner.
//
// Everything happens relative to the folder's descriptor (DirFd), so the folder that was checked
// is the folder written to, whatever happens to its path meanwhile.
#pragma once

#include <chrono>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/posix_io.hpp"
#include "flashjit/status.hpp"

namespace flashjit::cache {

inline constexpr const char* kTempPrefix = ".tmp-";
// A write takes milliseconds; a temp file untouched for ten minutes belongs to a writer that died
// or was stopped, never to one still producing it.
inline constexpr std::chrono::minutes kStaleTempAge{10};

// A fresh ".tmp-<pid>-<random>" name; the random part comes from getrandom().
std::string make_temp_name();

// The writer pid encoded in a temp file name, or nullopt if `name` is not a temp file name.
std::optional<long> temp_name_pid(std::string_view name);

// When a temp file may be removed. Either way it must be a regular file owned by this user (a
// symlink, a folder or another user's file is never touched).
enum class StaleRule {
  // `cache prune`, which a person asked for: older than the age, or its writer's pid is not
  // running here (the pid may live in another pid namespace, hence also the age rule).
  old_or_writer_gone,
  // Cleanup on every write, which nobody asked for: older than the age and its writer's pid not
  // running here, so a writer that is merely stopped (SIGSTOP, a debugger) keeps its file.
  old_and_writer_gone,
};
bool is_stale_temp(const DirFd& dir, const std::string& name, StaleRule rule,
                   std::chrono::seconds max_age = kStaleTempAge);

// Removes the temp files of `dir` that are stale under StaleRule::old_and_writer_gone; returns
// the paths removed. Failures are skipped: this is housekeeping, never a reason to fail a write.
std::vector<std::string> remove_stale_temps(const DirFd& dir, std::chrono::seconds max_age = kStaleTempAge);

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
