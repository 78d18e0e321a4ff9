#include "cache/posix_io.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace flashjit::cache {

Error sys_error(Code code, const std::string& what, const std::string& path, int err) {
  Code c = err == ENOENT ? Code::not_found : code;
  return Error(c, what + " '" + path + "': " + std::strerror(err))
      .with("path", path)
      .with("errno", std::to_string(err));
}

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

int UniqueFd::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void UniqueFd::reset(int fd) {
  // close() is not retried on EINTR: on Linux the descriptor is released either way.
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Result<FileId> file_id_of_fd(int fd, const std::string& path) {
  struct stat st{};
  if (::fstat(fd, &st) != 0) return sys_error(Code::io_error, "cannot stat", path, errno);
  return FileId{static_cast<unsigned long long>(st.st_dev), static_cast<unsigned long long>(st.st_ino)};
}

Result<FileId> file_id_of_path(const std::string& path) {
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) return sys_error(Code::io_error, "cannot stat", path, errno);
  return FileId{static_cast<unsigned long long>(st.st_dev), static_cast<unsigned long long>(st.st_ino)};
}

Result<UniqueFd> open_fd(const std::string& path, int flags, unsigned mode) {
  for (;;) {
    int fd = ::open(path.c_str(), flags | O_CLOEXEC, static_cast<mode_t>(mode));
    if (fd >= 0) return UniqueFd(fd);
    if (errno != EINTR) return sys_error(Code::io_error, "cannot open", path, errno);
  }
}

Status write_all(int fd, std::string_view bytes, const std::string& path) {
  const char* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_error(Code::io_error, "cannot write", path, errno);
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  return {};
}

Result<std::size_t> read_up_to(int fd, char* buf, std::size_t n, const std::string& path) {
  std::size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, buf + got, n - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      return sys_error(Code::io_error, "cannot read", path, errno);
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  return got;
}

Status fsync_dir(const std::string& dir) {
  auto fd = open_fd(dir, O_RDONLY | O_DIRECTORY);
  if (!fd) return std::move(fd).error();
  if (::fsync(fd->get()) != 0 && errno != EINVAL)  // some file systems cannot sync folders
    return sys_error(Code::io_error, "cannot fsync folder", dir, errno);
  return {};
}

Result<std::vector<DirEntry>> list_dir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return sys_error(Code::io_error, "cannot list folder", dir, errno);
  std::vector<DirEntry> out;
  for (;;) {
    errno = 0;
    dirent* e = ::readdir(d);
    if (!e) break;
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    DirEntry entry{name, false, false};
    unsigned char type = e->d_type;
    if (type == DT_UNKNOWN) {  // some file systems leave d_type empty
      struct stat st{};
      if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      entry.is_dir = S_ISDIR(st.st_mode);
      entry.is_regular = S_ISREG(st.st_mode);
    } else {
      entry.is_dir = type == DT_DIR;
      entry.is_regular = type == DT_REG;
    }
    out.push_back(std::move(entry));
  }
  int err = errno;
  ::closedir(d);
  if (err != 0) return sys_error(Code::io_error, "cannot list folder", dir, err);
  std::sort(out.begin(), out.end(), [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  return out;
}

Status unlink_if_exists(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    return sys_error(Code::io_error, "cannot remove", path, errno);
  return {};
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

std::string parent_path(const std::string& path) {
  auto pos = path.find_last_of('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return path.substr(0, pos);
}

std::string file_name(const std::string& path) {
  auto pos = path.find_last_of('/');
  return pos == std::string::npos ? path : path.substr(pos + 1);
}

}  // namespace flashjit::cache
