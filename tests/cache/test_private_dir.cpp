// The trust rule on what the cache actually uses (cache/private_dir.cpp): folders opened once and
// checked on their descriptors, files checked before a byte is read.
#include "cache/private_dir.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache_test_util.hpp"

using namespace flashjit;
using namespace flashjit::cache;
using namespace flashjit::cache::test;

TEST_CASE("private_dir: open_root creates missing folders 0700 through their parents, whatever the umask") {
  TempDir tmp;
  const mode_t old = ::umask(0277);  // would leave mkdir's folders unwritable, even by us
  auto root = PrivateDir::open_root(tmp / "a/b/root", /*create=*/true);
  ::umask(old);
  REQUIRE_MESSAGE(root.ok(), (root.ok() ? "" : root.error().to_string()));
  CHECK(root->path() == tmp / "a/b/root");
  for (const char* sub : {"a", "a/b", "a/b/root"}) CHECK_MESSAGE(mode_of(tmp / sub) == 0700, sub);
  auto missing = PrivateDir::open_root(tmp / "nope", /*create=*/false);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code() == Code::not_found);
}

TEST_CASE("private_dir: what is checked is the folder held, not the path it was opened by") {
  TempDir tmp;
  auto root = PrivateDir::open_root(tmp / "root", /*create=*/true);
  REQUIRE(root.ok());
  auto sub = root->open_sub("sm_80", /*create=*/true);
  REQUIRE(sub.ok());
  // The path now names another folder; the descriptor still reaches the one that was checked.
  REQUIRE(::rename((tmp / "root").c_str(), (tmp / "moved").c_str()) == 0);
  REQUIRE(::mkdir((tmp / "root").c_str(), 0700) == 0);
  REQUIRE(::chmod((tmp / "root").c_str(), 0777) == 0);
  write_file(tmp / "moved/sm_80/f", "x");
  auto f = open_private_file(*sub, "f");
  REQUIRE(f.ok());
  CHECK(f->size == 1);
  CHECK(root->open_sub("sm_80", /*create=*/false).ok());
  CHECK(PrivateDir::open_root(tmp / "root", /*create=*/false).error().code() == Code::permission_denied);
}

TEST_CASE("private_dir: a sub-folder that is a symlink, not a folder, or not private is refused") {
  TempDir tmp;
  auto root = PrivateDir::open_root(tmp / "root", /*create=*/true);
  REQUIRE(root.ok());
  REQUIRE(::mkdir((tmp / "elsewhere").c_str(), 0700) == 0);
  REQUIRE(::symlink((tmp / "elsewhere").c_str(), (tmp / "root/link").c_str()) == 0);
  write_file(tmp / "root/file", "x");
  REQUIRE(::mkfifo((tmp / "root/fifo").c_str(), 0600) == 0);
  REQUIRE(::mkdir((tmp / "root/open").c_str(), 0700) == 0);
  REQUIRE(::chmod((tmp / "root/open").c_str(), 0770) == 0);
  struct Case {
    const char* name;
    const char* says;
  };
  for (const Case& c : {Case{"link", "symbolic link"}, Case{"file", "not a folder"}, Case{"fifo", "not a folder"},
                        Case{"open", "writable by group or others"}}) {
    for (bool create : {false, true}) {
      auto d = root->open_sub(c.name, create);
      REQUIRE_FALSE(d.ok());
      CHECK(d.error().code() == Code::permission_denied);
      CHECK_MESSAGE(d.error().message().find(c.says) != std::string::npos, d.error().message());
      CHECK(d.error().message().find(tmp / "root/" + c.name) != std::string::npos);
    }
  }
  CHECK(test_support::files_in(tmp / "elsewhere").empty());
  if (::geteuid() == 0) {  // only root can give a folder away
    REQUIRE(::mkdir((tmp / "root/theirs").c_str(), 0700) == 0);
    REQUIRE(::chown((tmp / "root/theirs").c_str(), 54321, 54321) == 0);
    auto d = root->open_sub("theirs", false);
    REQUIRE_FALSE(d.ok());
    CHECK(d.error().message().find("owned by uid 54321") != std::string::npos);
  }
}

TEST_CASE("private_dir: open_private_file refuses, without blocking, anything but our own private regular file") {
  TempDir tmp;
  auto dir = PrivateDir::open_root(tmp.path(), /*create=*/false);
  REQUIRE(dir.ok());
  write_file(tmp / "good", "data");
  REQUIRE(::chmod((tmp / "good").c_str(), 0644) == 0);  // readable by others is fine
  write_file(tmp / "shared", "data");
  REQUIRE(::chmod((tmp / "shared").c_str(), 0664) == 0);
  REQUIRE(::mkfifo((tmp / "fifo").c_str(), 0600) == 0);
  REQUIRE(::mkdir((tmp / "folder").c_str(), 0700) == 0);
  REQUIRE(::symlink((tmp / "good").c_str(), (tmp / "link").c_str()) == 0);

  auto good = open_private_file(*dir, "good");
  REQUIRE(good.ok());
  CHECK(good->size == 4);
  CHECK((::fcntl(good->fd.get(), F_GETFL) & O_NONBLOCK) == 0);  // blocking again for reads
  const int code = test_support::run_bounded(5, [&] {
    int bad = 0;
    for (const char* name : {"shared", "fifo", "folder", "link"}) {
      auto f = open_private_file(*dir, name);
      if (f.ok() || f.error().code() != Code::permission_denied || !f.error().detail("reason")) bad |= 1;
    }
    auto fifo = open_private_file(*dir, "fifo");
    if (fifo.ok() || *fifo.error().detail("reason") != "is not a regular file (a FIFO)") bad |= 2;
    return bad;
  });
  CHECK(code == 0);  // 128 + SIGALRM means an open blocked
  CHECK(open_private_file(*dir, "absent").error().code() == Code::not_found);
}
