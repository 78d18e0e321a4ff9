#include "cache/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace flashjit::cache {

namespace {

std::uint64_t random64() {
  std::uint64_t v = 0;
  if (::getrandom(&v, sizeof v, GRND_NONBLOCK) == static_cast<ssize_t>(sizeof v)) return v;
  // No entropy yet (early boot): uniqueness is all we need, and O_EXCL catches the rest.
  static std::atomic<std::uint64_t> counter{0};
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return (static_cast<std::uint64_t>(ts.tv_sec) << 32) ^ static_cast<std::uint64_t>(ts.tv_nsec) ^
         (counter.fetch_add(1) * 0x9E3779B97F4A7C15ull);
}

}  // namespace

std::string make_temp_name() {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s%ld-%016llx", kTempPrefix, static_cast<long>(::getpid()),
                static_cast<unsigned long long>(random64()));
  return buf;
}

std::optional<long> temp_name_pid(std::string_view name) {
  std::string_view prefix = kTempPrefix;
  if (name.substr(0, prefix.size()) != prefix) return std::nullopt;
  name.remove_prefix(prefix.size());
  long pid = 0;
  std::size_t i = 0;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && i < 10; ++i) pid = pid * 10 + (name[i] - '0');
  if (i == 0 || i >= name.size() || name[i] != '-' || pid <= 0) return std::nullopt;
  return pid;
}

bool is_stale_temp(const std::string& path, std::chrono::seconds max_age) {
  auto pid = temp_name_pid(file_name(path));
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) return false;  // already gone
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  if (now.tv_sec - st.st_mtim.tv_sec > max_age.count()) return true;
  if (!pid) return true;  // a ".tmp-" name no writer of ours produced
  // EPERM means the process exists but belongs to someone else: still alive.
  return ::kill(static_cast<pid_t>(*pid), 0) != 0 && errno == ESRCH;
}

Result<AtomicFileWriter> AtomicFileWriter::create(std::string final_path) {
  std::string dir = parent_path(final_path);
  for (int attempt = 0;; ++attempt) {
    std::string temp = join_path(dir, make_temp_name());
    auto fd = open_fd(temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
    if (fd) return AtomicFileWriter(std::move(fd).value(), std::move(temp), std::move(final_path));
    if (attempt < 3 && fd.error().detail("errno") == std::to_string(EEXIST)) continue;
    return Error(fd.error().code() == Code::not_found ? Code::io_error : fd.error().code(),
                 "cannot create temp file for '" + final_path + "': " + fd.error().message())
        .with("path", final_path);
  }
}

AtomicFileWriter::~AtomicFileWriter() { abandon(); }

void AtomicFileWriter::abandon() {
  if (!fd_.valid()) return;
  fd_.reset();
  ::unlink(temp_path_.c_str());
}

Status AtomicFileWriter::write(std::string_view bytes) {
  if (!fd_.valid()) return Error(Code::internal, "write to a finished atomic writer for '" + final_path_ + "'");
  Status s = write_all(fd_.get(), bytes, temp_path_);
  if (!s) abandon();
  return s;
}

Status AtomicFileWriter::commit(std::optional<struct timespec> mtime) {
  if (!fd_.valid()) return Error(Code::internal, "commit of a finished atomic writer for '" + final_path_ + "'");
  if (::fsync(fd_.get()) != 0) {
    int err = errno;
    abandon();
    return sys_error(Code::io_error, "cannot fsync", temp_path_, err);
  }
  if (mtime) {
    timespec times[2] = {*mtime, *mtime};
    ::futimens(fd_.get(), times);  // only an LRU hint; failure is harmless
  }
  if (::rename(temp_path_.c_str(), final_path_.c_str()) != 0) {
    int err = errno;
    abandon();
    // ENOENT here means a cleanup removed our temp file; report it as I/O trouble, not a miss.
    return Error(Code::io_error, "cannot rename '" + temp_path_ + "' to '" + final_path_ +
                                     "': " + std::strerror(err))
        .with("path", final_path_)
        .with("errno", std::to_string(err));
  }
  fd_.reset();
  return fsync_dir(parent_path(final_path_));
}

Status write_file_atomic(const std::string& path, std::string_view bytes, std::optional<struct timespec> mtime) {
  auto w = AtomicFileWriter::create(path);
  if (!w) return std::move(w).error();
  FJ_TRY(w->write(bytes));
  return w->commit(mtime);
}

}  // namespace flashjit::cache
