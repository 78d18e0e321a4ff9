#include "cache/cache_dir.hpp"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "cache/posix_io.hpp"
#include "base/printable.hpp"

namespace flashjit::cache {

namespace {

// An unset and an empty variable mean the same: not configured.
std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string mode_octal(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

}  // namespace

Result<std::string> resolve_cache_root() {
  std::string dir = env_or_empty("FLASHJIT_CACHE_DIR");
  if (!dir.empty()) {
    if (dir.front() != '/')
      return Error(Code::invalid_argument,
                   "FLASHJIT_CACHE_DIR must be an absolute path, got '" + printable(dir) + "'")
          .with("variable", "FLASHJIT_CACHE_DIR");
    return dir;
  }
  std::string xdg = env_or_empty("XDG_CACHE_HOME");
  if (!xdg.empty() && xdg.front() == '/') return join_path(xdg, "flashjit");
  std::string home = env_or_empty("HOME");
  if (home.empty()) {
    if (const passwd* pw = ::getpwuid(::geteuid()); pw && pw->pw_dir) home = pw->pw_dir;
  }
  if (home.empty() || home.front() != '/')
    return Error(Code::not_found,
                 "cannot place the kernel cache: set FLASHJIT_CACHE_DIR, XDG_CACHE_HOME or HOME "
                 "to an absolute path");
  return join_path(join_path(home, ".cache"), "flashjit");
}

bool is_valid_arch(std::string_view arch) {
  if (arch.size() < 5 || arch.substr(0, 3) != "sm_") return false;
  std::string_view rest = arch.substr(3);
  if (rest.back() == 'a' || rest.back() == 'f') rest.remove_suffix(1);
  if (rest.size() < 2 || rest.size() > 4) return false;
  for (char c : rest)
    if (c < '0' || c > '9') return false;
  return true;
}

Status validate_arch(std::string_view arch) {
  if (is_valid_arch(arch)) return {};
  return Error(Code::invalid_argument,
               "arch '" + printable(arch) +
                   "' is not a GPU architecture name: expected sm_ followed by 2 to 4 digits and "
                   "an optional 'a' or 'f' (e.g. sm_80, sm_90a)")
      .with("arch", printable(arch));
}

Status check_private_dir(const std::string& path, bool follow_symlink) {
  struct stat st{};
  int rc = follow_symlink ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st);
  if (rc != 0) return sys_error(Code::io_error, "cannot inspect cache folder", path, errno);
  if (S_ISLNK(st.st_mode))
    return Error(Code::permission_denied,
                 "cache folder '" + path + "' is a symbolic link; only the cache root may be one")
        .with("path", path);
  if (!S_ISDIR(st.st_mode))
    return Error(Code::permission_denied, "cache folder '" + path + "' is not a folder").with("path", path);
  if (st.st_uid != ::geteuid())
    return Error(Code::permission_denied,
                 "cache folder '" + path + "' is owned by uid " + std::to_string(st.st_uid) +
                     ", not by this user (uid " + std::to_string(::geteuid()) +
                     "); cached kernels are executable code, so the cache must be private")
        .with("path", path)
        .with("rule", "owned by the current user");
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return Error(Code::permission_denied,
                 "cache folder '" + path + "' is writable by group or others (mode " +
                     mode_octal(st.st_mode) +
                     "); cached kernels are executable code, so the cache must be private: "
                     "chmod 700 '" + path + "'")
        .with("path", path)
        .with("mode", mode_octal(st.st_mode))
        .with("rule", "no group or other write permission");
  return {};
}

Status ensure_private_dir(const std::string& path, bool follow_symlink) {
  if (path.empty()) return Error(Code::invalid_argument, "cache folder path is empty");
  struct stat st{};
  if ((follow_symlink ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st)) == 0)
    return check_private_dir(path, follow_symlink);  // the usual case: it is already there
  // Walk down from the top so every missing component is created by us with mode 0700.
  std::size_t pos = 0;
  for (;;) {
    pos = path.find('/', pos + 1);
    std::string prefix = path.substr(0, pos);
    if (!prefix.empty() && prefix != "/") {
      if (::mkdir(prefix.c_str(), 0700) == 0) {
        // mkdir's mode is filtered by the umask; set the exact mode we promise.
        if (::chmod(prefix.c_str(), 0700) != 0)
          return sys_error(Code::io_error, "cannot set mode 0700 on", prefix, errno);
      } else if (errno != EEXIST) {
        return sys_error(Code::io_error, "cannot create cache folder", prefix, errno);
      }
    }
    if (pos == std::string::npos) break;
  }
  return check_private_dir(path, follow_symlink);
}

Result<CacheDir> CacheDir::open(std::string root) {
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  FJ_TRY(ensure_private_dir(root, /*follow_symlink=*/true));
  return CacheDir(std::move(root));
}

Status CacheDir::check_root() const { return check_private_dir(root_, /*follow_symlink=*/true); }

std::string CacheDir::arch_path(std::string_view arch) const { return join_path(root_, std::string(arch)); }

std::string CacheDir::locks_path(std::string_view arch) const { return join_path(arch_path(arch), "locks"); }

Result<std::string> CacheDir::existing_arch_dir(std::string_view arch) const {
  FJ_TRY(validate_arch(arch));
  FJ_TRY(check_root());
  std::string dir = arch_path(arch);
  FJ_TRY(check_private_dir(dir, /*follow_symlink=*/false));
  return dir;
}

Result<std::string> CacheDir::create_arch_dir(std::string_view arch) const {
  FJ_TRY(validate_arch(arch));
  // Recreates the root too, should someone have deleted the whole cache while we run.
  FJ_TRY(ensure_private_dir(root_, /*follow_symlink=*/true));
  std::string dir = arch_path(arch);
  FJ_TRY(ensure_private_dir(dir, /*follow_symlink=*/false));
  FJ_TRY(ensure_private_dir(locks_path(arch), /*follow_symlink=*/false));
  return dir;
}

Result<std::vector<std::string>> CacheDir::arches() const {
  FJ_TRY(check_root());
  auto entries = list_dir(root_);
  if (!entries) return std::move(entries).error();
  std::vector<std::string> out;
  for (const DirEntry& e : *entries) {
    if (!is_valid_arch(e.name)) continue;
    FJ_TRY(check_private_dir(arch_path(e.name), /*follow_symlink=*/false));
    out.push_back(e.name);
  }
  return out;
}

}  // namespace flashjit::cache
