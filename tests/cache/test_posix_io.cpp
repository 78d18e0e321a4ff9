#include "cache/posix_io.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "base/printable.hpp"
#include "cache_test_util.hpp"

using namespace flashjit;
using namespace flashjit::cache;
using namespace flashjit::cache::test;

TEST_CASE("posix_io: open, write and read back") {
  TempDir dir;
  std::string path = dir / "f";
  {
    auto fd = open_fd(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    REQUIRE(fd.ok());
    REQUIRE(write_all(fd->get(), "hello world", path).ok());
  }
  auto fd = open_fd(path, O_RDONLY);
  REQUIRE(fd.ok());
  char buf[32];
  auto n = read_up_to(fd->get(), buf, sizeof buf, path);
  REQUIRE(n.ok());
  CHECK(std::string(buf, *n) == "hello world");
  CHECK((::fcntl(fd->get(), F_GETFD) & FD_CLOEXEC) != 0);
}

TEST_CASE("posix_io: a missing file is not_found and the message names the path") {
  TempDir dir;
  auto fd = open_fd(dir / "absent", O_RDONLY);
  REQUIRE_FALSE(fd.ok());
  CHECK(fd.error().code() == Code::not_found);
  CHECK(fd.error().message().find(dir / "absent") != std::string::npos);
  CHECK(fd.error().detail("path") == dir / "absent");
}

TEST_CASE("posix_io: list_dir is sorted and tells folders from files") {
  TempDir dir;
  write_file(dir / "b", "x");
  write_file(dir / "a", "x");
  ::mkdir((dir / "c").c_str(), 0700);
  ::symlink("a", (dir / "d").c_str());
  auto list = list_dir(dir.path());
  REQUIRE(list.ok());
  REQUIRE(list->size() == 4);
  CHECK((*list)[0].name == "a");
  CHECK((*list)[0].is_regular);
  CHECK((*list)[2].name == "c");
  CHECK((*list)[2].is_dir);
  CHECK((*list)[3].name == "d");
  CHECK_FALSE((*list)[3].is_regular);  // symlinks are never taken for files
  CHECK_FALSE(list_dir(dir / "nope").ok());
}

TEST_CASE("posix_io: unlink_if_exists, file ids and fsync_dir") {
  TempDir dir;
  write_file(dir / "x", "1");
  auto id1 = file_id_of_path(dir / "x");
  REQUIRE(id1.ok());
  CHECK(unlink_if_exists(dir / "x").ok());
  CHECK(unlink_if_exists(dir / "x").ok());  // already gone is fine
  CHECK_FALSE(exists(dir / "x"));
  write_file(dir / "y", "2");
  auto id2 = file_id_of_path(dir / "y");
  REQUIRE(id2.ok());
  CHECK(*id1 != FileId{});
  CHECK(fsync_dir(dir.path()).ok());
}

TEST_CASE("posix_io: open_regular_file never blocks and names what it refused") {
  TempDir dir;
  write_file(dir / "file", "abc");
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
  REQUIRE(::mkdir((dir / "folder").c_str(), 0700) == 0);
  const int code = test_support::run_bounded(5, [&] {
    int bad = 0;
    auto f = open_regular_file(dir / "file");
    if (!f.ok() || f->size != 3) bad |= 1;
    struct Case {
      std::string path, what;
    };
    for (const Case& c : {Case{dir / "fifo", "a FIFO"}, Case{dir / "folder", "a folder"},
                          Case{"/dev/null", "a character device"}}) {
      auto r = open_regular_file(c.path);
      if (r.ok() || r.error().code() != Code::invalid_argument) bad |= 2;
      else if (r.error().message().find(c.path) == std::string::npos ||
               r.error().detail("reason") != "is not a regular file (" + c.what + ")")
        bad |= 4;
    }
    auto d = DirFd::open(dir.path());
    if (!d.ok()) return bad | 8;
    auto fifo = open_regular_file_at(*d, "fifo");
    if (fifo.ok() || fifo.error().detail("reason") != std::string("is not a regular file (a FIFO)")) bad |= 16;
    return bad;
  });
  CHECK(code == 0);  // 128 + SIGALRM means an open blocked
}

TEST_CASE("posix_io: a DirFd keeps reaching the folder it opened") {
  TempDir dir;
  REQUIRE(::mkdir((dir / "a").c_str(), 0700) == 0);
  auto d = DirFd::open(dir / "a");
  REQUIRE(d.ok());
  REQUIRE(::rename((dir / "a").c_str(), (dir / "b").c_str()) == 0);
  write_file(dir / "b/x", "1");
  auto list = list_dir(*d);
  REQUIRE(list.ok());
  REQUIRE(list->size() == 1);
  CHECK((*list)[0].name == "x");
  CHECK(list_dir(*d)->size() == 1);  // listing twice starts from the top each time
  CHECK(d->path_of("x") == dir / "a/x");  // the path is only for messages
  CHECK(unlink_at_if_exists(*d, "x").ok());
  CHECK(unlink_at_if_exists(*d, "x").ok());
  CHECK_FALSE(exists(dir / "b/x"));
  CHECK(stat_at(*d, "x").error().code() == Code::not_found);
  CHECK(fsync_dir(*d).ok());
}

TEST_CASE("posix_io: path helpers") {
  CHECK(join_path("/a", "b") == "/a/b");
  CHECK(join_path("/a/", "b") == "/a/b");
  CHECK(parent_path("/a/b/c") == "/a/b");
  CHECK(parent_path("/c") == "/");
  CHECK(parent_path("c") == ".");
  CHECK(file_name("/a/b/c.fjk") == "c.fjk");
  CHECK(file_name("c") == "c");
}

// ---- issue 21 ----

TEST_CASE("posix_io: a path in an error is echoed like other input: escaped, and cut when huge (G10)") {
  TempDir dir;
  // A 100,000-character --cache-dir reaches open() as is; the error must not carry it twice in full.
  const std::string huge = dir / std::string(100000, 'd');
  auto fd = open_fd(huge, O_RDONLY);
  REQUIRE_FALSE(fd.ok());
  const std::string text = fd.error().to_string();
  CHECK(text.size() < 2 * kMaxEchoBytes + 200);
  CHECK(text.find(dir.path()) != std::string::npos);
  CHECK(text.find("(" + std::to_string(huge.size()) + " bytes)") != std::string::npos);
  CHECK(text.find("File name too long") != std::string::npos);
  auto odd = open_fd(dir / "a\x1b[2Jb", O_RDONLY);
  REQUIRE_FALSE(odd.ok());
  CHECK(odd.error().to_string().find('\x1b') == std::string::npos);
  CHECK(odd.error().message().find(dir / "a\\x1b[2Jb") != std::string::npos);
}
