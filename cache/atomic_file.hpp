// Publishing a file all at once: bytes go to a temp file beside the destination
// (".tmp-<pid>-<16 hex>"), are fsynced, and the temp file is renamed over the destination.
// Readers see either the old file or the complete new one, never a partial write. A writer that
// dies leaves only its temp file, which no reader opens and which cleanup removes once it is
// stale (its pid is gone or it is older than kStaleTempAge).
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
bool is_stale_temp(const std::string& path, std::chrono::seconds max_age = kStaleTempAge);

class AtomicFileWriter {
 public:
  // Creates the temp file (mode 0600, O_EXCL) in the destination's folder.
  static Result<AtomicFileWriter> create(std::string final_path);

  AtomicFileWriter(AtomicFileWriter&&) = default;
  AtomicFileWriter& operator=(AtomicFileWriter&&) = delete;
  // Removes the temp file unless commit() succeeded.
  ~AtomicFileWriter();

  Status write(std::string_view bytes);

  // fsync, optionally stamp the modification time, rename into place, fsync the folder.
  // The writer is finished afterwards, whatever the outcome.
  Status commit(std::optional<struct timespec> mtime = std::nullopt);

  const std::string& temp_path() const { return temp_path_; }
  const std::string& final_path() const { return final_path_; }

 private:
  AtomicFileWriter(UniqueFd fd, std::string temp_path, std::string final_path)
      : fd_(std::move(fd)), temp_path_(std::move(temp_path)), final_path_(std::move(final_path)) {}
  void abandon();

  UniqueFd fd_;
  std::string temp_path_;
  std::string final_path_;
};

// Writes `bytes` to `path` through an AtomicFileWriter.
Status write_file_atomic(const std::string& path, std::string_view bytes,
                         std::optional<struct timespec> mtime = std::nullopt);

}  // namespace flashjit::cache
