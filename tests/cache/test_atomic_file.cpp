#include "cache/atomic_file.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache_test_util.hpp"

using namespace flashjit;
using namespace flashjit::cache;
using namespace flashjit::cache::test;

TEST_CASE("atomic_file: temp names encode the writer pid") {
  std::string a = make_temp_name();
  std::string b = make_temp_name();
  CHECK(a != b);
  CHECK(a.rfind(".tmp-" + std::to_string(::getpid()) + "-", 0) == 0);
  CHECK(temp_name_pid(a) == static_cast<long>(::getpid()));
  CHECK(temp_name_pid(".tmp-42-abc") == 42L);
  CHECK_FALSE(temp_name_pid("x.tmp-42-abc").has_value());
  CHECK_FALSE(temp_name_pid(".tmp--abc").has_value());
  CHECK_FALSE(temp_name_pid(".tmp-42").has_value());
  CHECK_FALSE(temp_name_pid(".tmp-0-ab").has_value());
}

TEST_CASE("atomic_file: commit publishes the whole file and leaves no temp file") {
  TempDir dir;
  std::string path = dir / "out";
  write_file(path, "old contents");
  auto w = AtomicFileWriter::create(path);
  REQUIRE(w.ok());
  CHECK(parent_path(w->temp_path()) == dir.path());
  REQUIRE(w->write("new ").ok());
  CHECK(read_file(path) == "old contents");  // readers still see the old file mid-write
  REQUIRE(w->write("contents").ok());
  timespec stamp{1000000000, 123456789};
  REQUIRE(w->commit(stamp).ok());
  CHECK(read_file(path) == "new contents");
  CHECK(mode_of(path) == 0600);
  struct stat st{};
  ::stat(path.c_str(), &st);
  CHECK(st.st_mtim.tv_sec == stamp.tv_sec);
  CHECK(count_with_prefix(dir.path(), ".tmp-") == 0);
  CHECK_FALSE(w->write("more").ok());  // finished
}

TEST_CASE("atomic_file: an abandoned writer removes its temp file") {
  TempDir dir;
  {
    auto w = AtomicFileWriter::create(dir / "out");
    REQUIRE(w.ok());
    REQUIRE(w->write("partial").ok());
    CHECK(count_with_prefix(dir.path(), ".tmp-") == 1);
  }
  CHECK(count_with_prefix(dir.path(), ".tmp-") == 0);
  CHECK_FALSE(exists(dir / "out"));
  CHECK(write_file_atomic(private_dir(dir.path()), "out", "x").ok());
  CHECK(read_file(dir / "out") == "x");
}

TEST_CASE("atomic_file: creating in a missing folder fails with the path named") {
  TempDir dir;
  auto w = AtomicFileWriter::create(dir / "missing/out");
  REQUIRE_FALSE(w.ok());
  CHECK(w.error().code() == Code::io_error);
  CHECK(w.error().message().find(dir / "missing/out") != std::string::npos);
}

TEST_CASE("atomic_file: a writer killed mid-write leaves only a stale temp file") {
  TempDir dir;
  ChildToKill child;
  REQUIRE(child.pipe_ok());
  child.start([&]() -> int {
    auto w = AtomicFileWriter::create(dir / "out");
    if (!w.ok() || !w->write("half of the da").ok()) ::_exit(1);
    child.tell_parent_and_pause();
  });
  REQUIRE(child.reached());
  CHECK(child.kill() == 128 + SIGKILL);
  child.close_pipe();
  CHECK_FALSE(exists(dir / "out"));
  REQUIRE(count_with_prefix(dir.path(), ".tmp-") == 1);
  std::string temp;
  for (const auto& f : files_in(dir.path())) temp = f;
  const PrivateDir d = private_dir(dir.path());
  CHECK(is_stale_temp(d, temp, StaleRule::old_or_writer_gone));  // its pid is gone
  CHECK_FALSE(is_stale_temp(d, temp, StaleRule::old_and_writer_gone));  // but it is fresh
}

TEST_CASE("atomic_file: a live writer's temp file is stale for prune only when old, never for cleanup on write") {
  TempDir dir;
  const PrivateDir d = private_dir(dir.path());
  const std::string name = make_temp_name();  // our own pid: alive
  write_file(dir / name, "x");
  CHECK_FALSE(is_stale_temp(d, name, StaleRule::old_or_writer_gone));
  timespec old[2] = {{::time(nullptr) - 3600, 0}, {::time(nullptr) - 3600, 0}};
  ::utimensat(AT_FDCWD, (dir / name).c_str(), old, 0);
  CHECK(is_stale_temp(d, name, StaleRule::old_or_writer_gone));
  CHECK_FALSE(is_stale_temp(d, name, StaleRule::old_and_writer_gone));  // a stopped writer may resume
  CHECK(remove_stale_temps(d).empty());
  CHECK(exists(dir / name));
  CHECK_FALSE(is_stale_temp(d, ".tmp-1-gone", StaleRule::old_or_writer_gone));  // no file: nothing to clean
}

TEST_CASE("atomic_file: a folder in place of the destination makes commit fail, naming it") {
  TempDir dir;
  REQUIRE(::mkdir((dir / "out").c_str(), 0700) == 0);
  auto w = AtomicFileWriter::create(dir / "out");
  REQUIRE(w.ok());
  REQUIRE(w->write("x").ok());
  auto st = w->commit();
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message().find(dir / "out") != std::string::npos);
  CHECK(st.error().message().find("a folder is in its place") != std::string::npos);
  CHECK(count_with_prefix(dir.path(), ".tmp-") == 0);
}
