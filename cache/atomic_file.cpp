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

bool is_stale_temp(const DirFd& dir, const std::string& name, StaleRule rule, std::chrono::seconds max_age) {
  auto st = stat_at(dir, name);
  if (!st) return false;  // already gone
  if (!S_ISREG(st->st_mode) || st->st_uid != ::geteuid()) return false;
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  const bool old = now.tv_sec - st->st_mtim.tv_sec > max_age.count();
  auto pid = temp_name_pid(name);
  // A ".tmp-" name no writer of ours produced has no writer to wait for. EPERM from kill()
  // means the process exists but belongs to someone else: still alive.
  const bool writer_gone = !pid || (::kill(static_cast<pid_t>(*pid), 0) != 0 && errno == ESRCH);
  return rule == StaleRule::old_or_writer_gone ? old || writer_gone : old && writer_gone;
}

std::vector<std::string> remove_stale_temps(const DirFd& dir, std::chrono::seconds max_age) {
  std::vector<std::string> removed;
  auto entries = list_dir(dir);
  if (!entries) return removed;
  const std::string_view prefix = kTempPrefix;
  for (const DirEntry& e : *entries) {
    if (e.name.compare(0, prefix.size(), prefix) != 0) continue;
    if (!is_stale_temp(dir, e.name, StaleRule::old_and_writer_gone, max_age)) continue;
    if (::unlinkat(dir.fd(), e.name.c_str(), 0) == 0) removed.push_back(dir.path_of(e.name));
  }
  return removed;
}

Result<AtomicFileWriter> AtomicFileWriter::create(const DirFd& dir, std::string name) {
  for (int attempt = 0;; ++attempt) {
    std::string temp = make_temp_name();
    auto fd = open_at(dir, temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
    if (fd) return AtomicFileWriter(dir, std::move(fd).value(), std::move(temp), std::move(name));
    if (attempt < 3 && fd.error().detail("errno") == std::to_string(EEXIST)) continue;
    const std::string final_path = dir.path_of(name);
    return Error(fd.error().code() == Code::not_found ? Code::io_error : fd.error().code(),
                 "cannot create temp file for '" + final_path + "': " + fd.error().message())
        .with("path", final_path);
  }
}

Result<AtomicFileWriter> AtomicFileWriter::create(const std::string& final_path) {
  auto dir = DirFd::open(parent_path(final_path));
  if (!dir)
    return Error(Code::io_error, "cannot create temp file for '" + final_path + "': " + dir.error().message())
        .with("path", final_path);
  return create(*dir, file_name(final_path));
}

AtomicFileWriter::~AtomicFileWriter() { abandon(); }

void AtomicFileWriter::abandon() {
  if (!fd_.valid()) return;
  fd_.reset();
  ::unlinkat(dir_.fd(), temp_name_.c_str(), 0);
}

Status AtomicFileWriter::write(std::string_view bytes) {
  if (!fd_.valid()) return Error(Code::internal, "write to a finished atomic writer for '" + final_path() + "'");
  Status s = write_all(fd_.get(), bytes, temp_path());
  if (!s) abandon();
  return s;
}

Status AtomicFileWriter::commit(std::optional<struct timespec> mtime) {
  if (!fd_.valid()) return Error(Code::internal, "commit of a finished atomic writer for '" + final_path() + "'");
  if (::fsync(fd_.get()) != 0) {
    int err = errno;
    abandon();
    return sys_error(Code::io_error, "cannot fsync", temp_path(), err);
  }
  if (mtime) {
    timespec times[2] = {*mtime, *mtime};
    ::futimens(fd_.get(), times);  // only an LRU hint; failure is harmless
  }
  if (::renameat(dir_.fd(), temp_name_.c_str(), dir_.fd(), final_name_.c_str()) != 0) {
    int err = errno;
    abandon();
    // ENOENT here means a cleanup removed our temp file; report it as I/O trouble, not a miss.
    std::string why = std::strerror(err);
    if (err == EISDIR || err == ENOTEMPTY || err == EEXIST) why = "a folder is in its place";
    return Error(Code::io_error, "cannot publish '" + final_path() + "': " + why)
        .with("path", final_path())
        .with("temp_path", temp_path())
        .with("errno", std::to_string(err));
  }
  fd_.reset();
  return fsync_dir(dir_);
}

Status write_file_atomic(const DirFd& dir, const std::string& name, std::string_view bytes,
                         std::optional<struct timespec> mtime) {
  auto w = AtomicFileWriter::create(dir, name);
  if (!w) return std::move(w).error();
  FJ_TRY(w->write(bytes));
  return w->commit(mtime);
}

}  // namespace flashjit::cache
