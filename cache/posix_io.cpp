#include "cache/posix_io.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/printable.hpp"

namespace flashjit::cache {

Error sys_error(Code code, const std::string& what, const std::string& path, int err) {
  Code c = err == ENOENT ? Code::not_found : code;
  const std::string shown = printable(path);
  return Error(c, what + " '" + shown + "': " + std::strerror(err))
      .with("path", shown)
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

DirFd::DirFd(UniqueFd fd, std::string path)
    : fd_(std::make_shared<const UniqueFd>(std::move(fd))), path_(std::move(path)) {}

Result<DirFd> DirFd::open(const std::string& path) {
  auto fd = open_fd(path, O_RDONLY | O_DIRECTORY);
  if (!fd) return std::move(fd).error();
  return DirFd(std::move(fd).value(), path);
}

std::string DirFd::path_of(std::string_view name) const { return join_path(path_, std::string(name)); }

Result<UniqueFd> open_at(const DirFd& dir, const std::string& name, int flags, unsigned mode) {
  for (;;) {
    int fd = ::openat(dir.fd(), name.c_str(), flags | O_CLOEXEC, static_cast<mode_t>(mode));
    if (fd >= 0) return UniqueFd(fd);
    if (errno != EINTR) return sys_error(Code::io_error, "cannot open", dir.path_of(name), errno);
  }
}

std::string file_type_name(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a folder";
    case S_IFLNK: return "a symbolic link";
    case S_IFIFO: return "a FIFO";
    case S_IFSOCK: return "a socket";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
  }
  return "a file of unknown type";
}

namespace {

// `reason` reads on from the path: "is a symbolic link".
Error not_regular(const std::string& path, const std::string& reason) {
  return Error(Code::invalid_argument, "'" + path + "' " + reason).with("path", path).with("reason", reason);
}

// fstat, refuse anything but a regular file, then make the descriptor blocking again.
Result<OpenedFile> finish_regular(UniqueFd fd, const std::string& path) {
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) return sys_error(Code::io_error, "cannot stat", path, errno);
  if (!S_ISREG(st.st_mode)) return not_regular(path, "is not a regular file (" + file_type_name(st.st_mode) + ")");
  int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0)
    return sys_error(Code::io_error, "cannot clear O_NONBLOCK on", path, errno);
  OpenedFile out;
  out.fd = std::move(fd);
  out.size = static_cast<std::uint64_t>(st.st_size);
  out.id = FileId{static_cast<unsigned long long>(st.st_dev), static_cast<unsigned long long>(st.st_ino)};
  out.mode = st.st_mode;
  out.uid = st.st_uid;
  out.mtime = st.st_mtim;
  return out;
}

// Some files cannot be opened at all (a socket: ENXIO); say what they are rather than only why
// the open failed.
Error open_failed(Error error, const struct stat* st, const std::string& path) {
  if (error.code() == Code::not_found || !st || S_ISREG(st->st_mode)) return error;
  return not_regular(path, "is not a regular file (" + file_type_name(st->st_mode) + ")");
}

}  // namespace

Result<OpenedFile> open_regular_file(const std::string& path) {
  auto fd = open_fd(path, O_RDONLY | O_NONBLOCK | O_NOCTTY);
  if (!fd) {
    struct stat st{};
    return open_failed(std::move(fd).error(), ::stat(path.c_str(), &st) == 0 ? &st : nullptr, path);
  }
  return finish_regular(std::move(fd).value(), path);
}

Result<OpenedFile> open_regular_file_at(const DirFd& dir, const std::string& name) {
  const std::string path = dir.path_of(name);
  auto fd = open_at(dir, name, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW);
  if (!fd) {
    // ELOOP from O_NOFOLLOW: the name is a symlink (one component, so nothing else can loop).
    if (fd.error().detail("errno") == std::to_string(ELOOP)) return not_regular(path, "is a symbolic link");
    auto st = stat_at(dir, name);
    return open_failed(std::move(fd).error(), st ? &*st : nullptr, path);
  }
  return finish_regular(std::move(fd).value(), path);
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
  auto d = DirFd::open(dir);
  if (!d) return std::move(d).error();
  return fsync_dir(*d);
}

Status fsync_dir(const DirFd& dir) {
  if (::fsync(dir.fd()) != 0 && errno != EINVAL)  // some file systems cannot sync folders
    return sys_error(Code::io_error, "cannot fsync folder", dir.path(), errno);
  return {};
}

Result<std::vector<DirEntry>> list_dir(const std::string& dir) {
  auto d = DirFd::open(dir);
  if (!d) return std::move(d).error();
  return list_dir(*d);
}

Result<std::vector<DirEntry>> list_dir(const DirFd& dir) {
  // fdopendir takes over the descriptor it is given and reads from its offset. Reopening "."
  // through ours gives a descriptor of the same folder with an offset of its own (a dup() would
  // share the offset with every other copy).
  int dup = ::openat(dir.fd(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dup < 0) return sys_error(Code::io_error, "cannot list folder", dir.path(), errno);
  DIR* d = ::fdopendir(dup);
  if (!d) {
    int err = errno;
    ::close(dup);
    return sys_error(Code::io_error, "cannot list folder", dir.path(), err);
  }
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
  if (err != 0) return sys_error(Code::io_error, "cannot list folder", dir.path(), err);
  std::sort(out.begin(), out.end(), [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  return out;
}

Result<struct stat> stat_at(const DirFd& dir, const std::string& name) {
  struct stat st{};
  if (::fstatat(dir.fd(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
    return sys_error(Code::io_error, "cannot stat", dir.path_of(name), errno);
  return st;
}

Status unlink_if_exists(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    return sys_error(Code::io_error, "cannot remove", path, errno);
  return {};
}

Status unlink_at_if_exists(const DirFd& dir, const std::string& name) {
  if (::unlinkat(dir.fd(), name.c_str(), 0) != 0 && errno != ENOENT)
    return sys_error(Code::io_error, "cannot remove", dir.path_of(name), errno);
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
