#include "cache/cache_dir.hpp"

#include <pwd.h>
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

Result<CacheDir> CacheDir::open(std::string root) {
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  FJ_TRY(PrivateDir::open_root(root, /*create=*/true));
  return CacheDir(std::move(root));
}

Result<PrivateDir> CacheDir::open_root(bool create) const { return PrivateDir::open_root(root_, create); }

std::string CacheDir::arch_path(std::string_view arch) const { return join_path(root_, std::string(arch)); }

std::string CacheDir::locks_path(std::string_view arch) const { return join_path(arch_path(arch), kLocksDirName); }

Result<ArchDir> CacheDir::existing_arch_dir(const PrivateDir& root, std::string_view arch) {
  FJ_TRY(validate_arch(arch));
  auto dir = root.open_sub(std::string(arch), /*create=*/false);
  if (!dir) return std::move(dir).error();
  ArchDir out{std::move(dir).value(), std::nullopt};
  auto locks = out.dir.open_sub(kLocksDirName, /*create=*/false);
  if (locks) out.locks = std::move(locks).value();
  else if (locks.error().code() != Code::not_found) return std::move(locks).error();
  return out;
}

Result<ArchDir> CacheDir::create_arch_dir(const PrivateDir& root, std::string_view arch) {
  FJ_TRY(validate_arch(arch));
  auto dir = root.open_sub(std::string(arch), /*create=*/true);
  if (!dir) return std::move(dir).error();
  auto locks = dir->open_sub(kLocksDirName, /*create=*/true);
  if (!locks) return std::move(locks).error();
  return ArchDir{std::move(dir).value(), std::move(locks).value()};
}

Result<std::vector<std::string>> CacheDir::arches(const PrivateDir& root) {
  auto entries = list_dir(root);
  if (!entries) return std::move(entries).error();
  std::vector<std::string> out;
  for (const DirEntry& e : *entries)
    if (is_valid_arch(e.name)) out.push_back(e.name);
  return out;
}

}  // namespace flashjit::cache
