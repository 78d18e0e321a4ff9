#include "cache/private_dir.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace flashjit::cache {

namespace {

std::string mode_octal(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

Error refused(const std::string& path, const std::string& message, const std::string& rule) {
  return Error(Code::permission_denied, message).with("path", path).with("rule", rule);
}

Error symlink_refused(const std::string& path) {
  return refused(path, "cache folder '" + path + "' is a symbolic link; only the cache root may be one",
                 "no symbolic links below the cache root");
}

// Why openat(O_DIRECTORY | O_NOFOLLOW) of `name` failed with ELOOP or ENOTDIR: a symlink, or
// something that is not a folder.
Error not_a_folder(const DirFd& parent, const std::string& name) {
  const std::string path = parent.path_of(name);
  auto st = stat_at(parent, name);
  if (st && S_ISLNK(st->st_mode)) return symlink_refused(path);
  return refused(path,
                 "cache folder '" + path + "' is not a folder" +
                     (st ? " (it is " + file_type_name(st->st_mode) + ")" : std::string()),
                 "a folder");
}

// mkdir's mode is filtered by the umask; a folder we just made gets exactly 0700.
Status set_private_mode(int fd, const std::string& path) {
  if (::fchmod(fd, 0700) != 0) return sys_error(Code::io_error, "cannot set mode 0700 on", path, errno);
  return {};
}

// mkdir -p, one component at a time through the parent's descriptor. Folders that exist are
// entered as they are (the root's parents may be symlinks, like any path a user gives); folders
// made here get mode 0700. Returns the descriptor of `path` itself.
Result<UniqueFd> make_dirs(const std::string& path) {
  auto cur = open_fd(path.front() == '/' ? "/" : ".", O_RDONLY | O_DIRECTORY);
  if (!cur) return std::move(cur).error();
  std::string walked = path.front() == '/' ? "" : ".";
  std::size_t pos = 0;
  while (pos < path.size()) {
    std::size_t end = path.find('/', pos);
    if (end == std::string::npos) end = path.size();
    const std::string part = path.substr(pos, end - pos);
    pos = end + 1;
    if (part.empty() || part == ".") continue;
    DirFd parent(std::move(cur).value(), walked.empty() ? "/" : walked);
    walked += "/" + part;
    auto next = open_at(parent, part, O_RDONLY | O_DIRECTORY);
    if (!next && next.error().code() == Code::not_found) {
      const bool made = ::mkdirat(parent.fd(), part.c_str(), 0700) == 0;
      if (!made && errno != EEXIST) return sys_error(Code::io_error, "cannot create cache folder", walked, errno);
      next = open_at(parent, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
      if (next && made) FJ_TRY(set_private_mode(next->get(), walked));
    }
    if (!next) return std::move(next).error();
    cur = std::move(next).value();
  }
  return cur;
}

}  // namespace

Status check_private_dir(int fd, const std::string& path) {
  struct stat st{};
  if (::fstat(fd, &st) != 0) return sys_error(Code::io_error, "cannot inspect cache folder", path, errno);
  if (!S_ISDIR(st.st_mode))
    return refused(path, "cache folder '" + path + "' is not a folder (it is " + file_type_name(st.st_mode) + ")",
                   "a folder");
  if (st.st_uid != ::geteuid())
    return refused(path,
                   "cache folder '" + path + "' is owned by uid " + std::to_string(st.st_uid) +
                       ", not by this user (uid " + std::to_string(::geteuid()) +
                       "); cached kernels are executable code, so the cache must be private",
                   "owned by the current user");
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return refused(path,
                   "cache folder '" + path + "' is writable by group or others (mode " + mode_octal(st.st_mode) +
                       "); cached kernels are executable code, so the cache must be private: chmod 700 '" +
                       path + "'",
                   "no group or other write permission")
        .with("mode", mode_octal(st.st_mode));
  return {};
}

Result<PrivateDir> PrivateDir::open_root(const std::string& path, bool create) {
  if (path.empty()) return Error(Code::invalid_argument, "cache folder path is empty");
  auto fd = open_fd(path, O_RDONLY | O_DIRECTORY);
  if (!fd && fd.error().code() == Code::not_found && create) fd = make_dirs(path);
  if (!fd) {
    if (fd.error().detail("errno") == std::to_string(ENOTDIR))
      return refused(path, "cache folder '" + path + "' is not a folder", "a folder");
    return std::move(fd).error();
  }
  FJ_TRY(check_private_dir(fd->get(), path));
  return PrivateDir(DirFd(std::move(fd).value(), path));
}

Result<PrivateDir> PrivateDir::open_sub(const std::string& name, bool create) const {
  const std::string path = path_of(name);
  auto fd = open_at(*this, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  bool made = false;
  if (!fd && fd.error().code() == Code::not_found && create) {
    made = ::mkdirat(this->fd(), name.c_str(), 0700) == 0;
    if (!made && errno != EEXIST) return sys_error(Code::io_error, "cannot create cache folder", path, errno);
    fd = open_at(*this, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  }
  if (!fd) {
    const std::string err = fd.error().detail("errno").value_or("");
    if (err == std::to_string(ELOOP) || err == std::to_string(ENOTDIR)) return not_a_folder(*this, name);
    return std::move(fd).error();
  }
  if (made) FJ_TRY(set_private_mode(fd->get(), path));
  FJ_TRY(check_private_dir(fd->get(), path));
  return PrivateDir(DirFd(std::move(fd).value(), path));
}

Result<OpenedFile> open_private_file(const PrivateDir& dir, const std::string& name) {
  const std::string path = dir.path_of(name);
  auto f = open_regular_file_at(dir, name);
  if (!f) {
    if (f.error().code() != Code::invalid_argument) return f;
    const std::string reason = f.error().detail("reason").value_or("is not a regular file");
    return Error(Code::permission_denied, "'" + path + "' " + reason).with("path", path).with("reason", reason);
  }
  auto unsafe = [&](const std::string& reason) {
    return Error(Code::permission_denied, "'" + path + "' " + reason + "; cached kernels are executable code")
        .with("path", path)
        .with("reason", reason);
  };
  if (f->uid != ::geteuid())
    return unsafe("is owned by uid " + std::to_string(f->uid) + ", not by this user (uid " +
                  std::to_string(::geteuid()) + ")");
  if (f->mode & (S_IWGRP | S_IWOTH))
    return unsafe("is writable by group or others (mode " + mode_octal(f->mode) + ")");
  return f;
}

}  // namespace flashjit::cache
