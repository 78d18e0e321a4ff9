#include "cache/cache_dir.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache_test_util.hpp"

using namespace flashjit;
using namespace flashjit::cache;
using namespace flashjit::cache::test;

TEST_CASE("cache_dir: FLASHJIT_CACHE_DIR wins, then XDG_CACHE_HOME, then HOME") {
  EnvGuard a("FLASHJIT_CACHE_DIR", "/opt/fj-cache");
  EnvGuard b("XDG_CACHE_HOME", "/xdg");
  EnvGuard c("HOME", "/home/someone");
  CHECK(resolve_cache_root().value() == "/opt/fj-cache");
  {
    EnvGuard unset("FLASHJIT_CACHE_DIR", std::nullopt);
    CHECK(resolve_cache_root().value() == "/xdg/flashjit");
    {
      EnvGuard empty("XDG_CACHE_HOME", "");
      CHECK(resolve_cache_root().value() == "/home/someone/.cache/flashjit");
    }
    {
      EnvGuard relative("XDG_CACHE_HOME", "relative/xdg");  // the XDG spec says: ignore it
      CHECK(resolve_cache_root().value() == "/home/someone/.cache/flashjit");
    }
    {
      EnvGuard no_xdg("XDG_CACHE_HOME", std::nullopt);
      EnvGuard no_home("HOME", std::nullopt);
      auto r = resolve_cache_root();  // falls back to the passwd entry
      if (r.ok()) CHECK(r->find("/.cache/flashjit") != std::string::npos);
    }
  }
  {
    EnvGuard relative("FLASHJIT_CACHE_DIR", "not/absolute");
    auto r = resolve_cache_root();
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Code::invalid_argument);
    CHECK(r.error().message().find("FLASHJIT_CACHE_DIR") != std::string::npos);
  }
}

TEST_CASE("cache_dir: arch names are validated so no path can escape the root") {
  for (const char* ok : {"sm_80", "sm_86", "sm_90a", "sm_100", "sm_100f", "sm_120a", "sm_1000"})
    CHECK_MESSAGE(is_valid_arch(ok), ok);
  for (const char* bad : {"", "sm_", "sm_8", "sm_90b", "sm_90aa", "compute_90", "SM_90", "sm_90/..", "..", "../sm_90",
                          "sm_10000", "sm_a", "sm_9a0", "sm_90 "})
    CHECK_MESSAGE(!is_valid_arch(bad), bad);
  auto r = validate_arch("../x");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == Code::invalid_argument);
  CHECK(r.error().message().find("'../x'") != std::string::npos);
}

TEST_CASE("cache_dir: created folders are 0700 whatever the umask") {
  TempDir tmp;
  mode_t old = ::umask(0);
  auto dir = CacheDir::open(tmp / "a/b/root");
  ::umask(old);
  REQUIRE(dir.ok());
  CHECK(mode_of(tmp / "a") == 0700);
  CHECK(mode_of(tmp / "a/b") == 0700);
  CHECK(mode_of(tmp / "a/b/root") == 0700);
  auto root = dir->open_root(/*create=*/false);
  REQUIRE(root.ok());
  auto arch = CacheDir::create_arch_dir(*root, "sm_90a");
  REQUIRE(arch.ok());
  CHECK(arch->dir.path() == tmp / "a/b/root/sm_90a");
  CHECK(mode_of(arch->dir.path()) == 0700);
  REQUIRE(arch->locks.has_value());
  CHECK(arch->locks->path() == dir->locks_path("sm_90a"));
  CHECK(mode_of(dir->locks_path("sm_90a")) == 0700);
  CHECK(CacheDir::existing_arch_dir(*root, "sm_90a").ok());
  CHECK(CacheDir::existing_arch_dir(*root, "sm_80").error().code() == Code::not_found);
  auto arches = CacheDir::arches(*root);
  REQUIRE(arches.ok());
  CHECK(*arches == std::vector<std::string>{"sm_90a"});
}

TEST_CASE("cache_dir: a root writable by group or others is refused, naming the folder") {
  TempDir tmp;
  std::string root = tmp / "root";
  for (mode_t mode : {0777, 0775, 0770, 0722}) {
    ::mkdir(root.c_str(), 0700);
    ::chmod(root.c_str(), mode);
    auto dir = CacheDir::open(root);
    REQUIRE_FALSE(dir.ok());
    CHECK(dir.error().code() == Code::permission_denied);
    CHECK(dir.error().message().find("'" + root + "'") != std::string::npos);
    CHECK(dir.error().message().find("writable by group or others") != std::string::npos);
    CHECK(dir.error().detail("path") == root);
  }
  ::chmod(root.c_str(), 0755);  // readable by others is fine: only writes are a threat
  CHECK(CacheDir::open(root).ok());
}

TEST_CASE("cache_dir: a mode change after open is caught on the next check") {
  TempDir tmp;
  auto dir = CacheDir::open(tmp / "root");
  REQUIRE(dir.ok());
  auto root = dir->open_root(/*create=*/false);
  REQUIRE(root.ok());
  REQUIRE(CacheDir::create_arch_dir(*root, "sm_80").ok());
  ::chmod((tmp / "root/sm_80").c_str(), 0775);
  auto arch = CacheDir::existing_arch_dir(*root, "sm_80");
  REQUIRE_FALSE(arch.ok());
  CHECK(arch.error().code() == Code::permission_denied);
  CHECK(arch.error().message().find(tmp / "root/sm_80") != std::string::npos);
  ::chmod((tmp / "root/sm_80").c_str(), 0700);
  ::chmod((tmp / "root/sm_80/locks").c_str(), 0777);  // an unsafe locks folder spoils its arch
  arch = CacheDir::existing_arch_dir(*root, "sm_80");
  REQUIRE_FALSE(arch.ok());
  CHECK(arch.error().code() == Code::permission_denied);
  CHECK(arch.error().message().find(tmp / "root/sm_80/locks") != std::string::npos);
  ::chmod((tmp / "root").c_str(), 0777);
  CHECK(dir->open_root(/*create=*/false).error().code() == Code::permission_denied);
}

TEST_CASE("cache_dir: a folder owned by another uid is refused") {
  if (::geteuid() != 0) return;  // only root can give a folder away
  TempDir tmp;
  std::string root = tmp / "root";
  ::mkdir(root.c_str(), 0700);
  REQUIRE(::chown(root.c_str(), 12345, 12345) == 0);
  auto dir = CacheDir::open(root);
  REQUIRE_FALSE(dir.ok());
  CHECK(dir.error().code() == Code::permission_denied);
  CHECK(dir.error().message().find("owned by uid 12345") != std::string::npos);
  CHECK(dir.error().message().find(root) != std::string::npos);
}

TEST_CASE("cache_dir: the root may be a symlink, an arch folder may not") {
  TempDir tmp;
  ::mkdir((tmp / "real").c_str(), 0700);
  ::symlink((tmp / "real").c_str(), (tmp / "link").c_str());
  auto dir = CacheDir::open(tmp / "link");
  REQUIRE(dir.ok());
  ::mkdir((tmp / "elsewhere").c_str(), 0700);
  ::symlink((tmp / "elsewhere").c_str(), (tmp / "real/sm_80").c_str());
  auto root = dir->open_root(/*create=*/false);
  REQUIRE(root.ok());
  auto arch = CacheDir::existing_arch_dir(*root, "sm_80");
  REQUIRE_FALSE(arch.ok());
  CHECK(arch.error().code() == Code::permission_denied);
  CHECK(arch.error().message().find("symbolic link") != std::string::npos);
  CHECK(CacheDir::create_arch_dir(*root, "sm_80").error().code() == Code::permission_denied);
  CHECK(test_support::files_in(tmp / "elsewhere").empty());  // nothing was made through the link
  write_file(tmp / "real/sm_86", "a file where a folder should be");
  auto file = CacheDir::existing_arch_dir(*root, "sm_86");
  REQUIRE_FALSE(file.ok());
  CHECK(file.error().message().find("not a folder") != std::string::npos);
}

TEST_CASE("cache_dir: a file where the root should be is refused") {
  TempDir tmp;
  write_file(tmp / "file", "x");
  auto dir = CacheDir::open(tmp / "file");
  REQUIRE_FALSE(dir.ok());
}
