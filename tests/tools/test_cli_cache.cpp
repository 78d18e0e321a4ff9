// flashjit cache end to end: export / clear / import round trips, prune, clear per arch, stats,
// a damaged bundle. Real entries: two small kernels are warmed once (NVRTC, no GPU) into a seed
// cache that each test copies into its own fresh folder.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <future>
#include <iterator>
#include <thread>

#include "base/content_hash.hpp"
#include "cache/disk_cache_state.hpp"
#include "cache/file_lock.hpp"

#include "cli_test_util.hpp"

using namespace flashjit::tools::test;
namespace fs = std::filesystem;

namespace {

const std::string& seed_cache() {
  static TempDir dir;
  static const std::string path = [] {
    const std::string p = dir / "seed";
    auto r = run_flashjit(small_warmup_args(p));
    INFO(r.err);
    REQUIRE(r.code == 0);
    return p;
  }();
  return path;
}

// A private copy of the seed cache at `to` (folders 0700, as the cache requires).
void copy_seed(const std::string& to) {
  fs::copy(seed_cache(), to, fs::copy_options::recursive);
  ::chmod(to.c_str(), 0700);
  for (const auto& e : fs::recursive_directory_iterator(to))
    if (e.is_directory()) ::chmod(e.path().c_str(), 0700);
}

}  // namespace

TEST_CASE("export, clear, import: the entries come back and warmup finds them all") {
  TempDir dir;
  const std::string cache = dir / "cache";
  copy_seed(cache);
  const auto names = listed_names(cache);
  REQUIRE(names.size() == 2);

  auto exported = run_flashjit({"cache", "export", dir / "warm.fjb", "--json", "--cache-dir", cache});
  REQUIRE(exported.code == 0);
  CHECK(exported.json()["entries"] == 2);
  CHECK(fs::file_size(dir / "warm.fjb") > 2000);

  auto cleared = run_flashjit({"cache", "clear", "--yes", "--cache-dir", cache});
  REQUIRE(cleared.code == 0);
  CHECK(contains(cleared.out, "removed 2 entries"));
  CHECK(listed_names(cache).empty());

  auto imported = run_flashjit({"cache", "import", dir / "warm.fjb", "--cache-dir", cache});
  REQUIRE(imported.code == 0);
  CHECK(contains(imported.out, "imported 2 of 2 entries"));
  CHECK(listed_names(cache) == names);

  auto again = run_flashjit({"cache", "import", dir / "warm.fjb", "--json", "--cache-dir", cache});
  REQUIRE(again.code == 0);
  CHECK(again.json()["already_present"] == 2);
  auto replaced = run_flashjit({"cache", "import", dir / "warm.fjb", "--replace", "--json", "--cache-dir", cache});
  REQUIRE(replaced.code == 0);
  CHECK(replaced.json()["imported"] == 2);

  // What a fleet machine does after importing: warmup compiles nothing.
  auto warm = run_flashjit(small_warmup_args(cache));
  REQUIRE(warm.code == 0);
  CHECK(warm.json()["already_cached"] == 2);
  CHECK(warm.json()["compiled"] == 0);
}

TEST_CASE("export --arch takes one arch's entries; a damaged bundle imports nothing") {
  TempDir dir;
  const std::string cache = dir / "cache";
  copy_seed(cache);
  auto none = run_flashjit({"cache", "export", dir / "sm90.fjb", "--arch", "sm_90a", "--json", "--cache-dir", cache});
  REQUIRE(none.code == 0);
  CHECK(none.json()["entries"] == 0);

  REQUIRE(run_flashjit({"cache", "export", dir / "all.fjb", "--cache-dir", cache}).code == 0);
  {
    std::fstream f(dir / "all.fjb", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1500);
    f.put('\x7f');
  }
  const std::string other = dir / "other";
  auto r = run_flashjit({"cache", "import", dir / "all.fjb", "--cache-dir", other});
  CHECK(r.code == 1);
  CHECK(contains(r.err, "nothing imported"));
  CHECK(listed_names(other).empty());
}

TEST_CASE("prune with a small cap evicts the least recently used entries") {
  TempDir dir;
  const std::string cache = dir / "cache";
  copy_seed(cache);
  auto list = run_flashjit({"cache", "list", "--json", "--cache-dir", cache}).json();
  REQUIRE(list["entries"].size() == 2);
  std::uint64_t largest = 0;
  for (const auto& e : list["entries"]) largest = std::max(largest, e["bytes"].get<std::uint64_t>());

  auto keep_one = run_flashjit({"cache", "prune", "--max-bytes", std::to_string(largest + 1), "--json", "--cache-dir", cache});
  REQUIRE(keep_one.code == 0);
  CHECK(keep_one.json()["evicted"] == 1);
  CHECK(listed_names(cache).size() == 1);

  auto tiny = run_flashjit({"cache", "prune", "--max-bytes", "1K", "--cache-dir", cache});
  REQUIRE(tiny.code == 0);
  CHECK(contains(tiny.out, "evicted 1 "));
  CHECK(listed_names(cache).empty());
}

TEST_CASE("prune says who holds the maintenance lock while it waits (issue 21 G2)") {
  TempDir dir;
  const std::string cache = dir / "cache";
  REQUIRE(run_flashjit({"cache", "stats", "--cache-dir", cache}).code == 0);  // creates the root
  flashjit::test_support::ChildToKill holder;  // `cache prune` under Ctrl-Z
  REQUIRE(holder.pipe_ok());
  holder.start([&]() -> int {
    auto root = flashjit::cache::PrivateDir::open_root(cache, /*create=*/false);
    if (!root.ok()) ::_exit(3);
    auto lock = flashjit::cache::FileLock::acquire(*root, flashjit::cache::kMaintenanceLockName);
    if (!lock.ok()) ::_exit(4);
    holder.tell_parent();
    ::raise(SIGSTOP);
    ::_exit(0);
  });
  REQUIRE(holder.reached());
  auto pruned = std::async(std::launch::async,
                           [&] { return run_flashjit({"cache", "prune", "--max-bytes", "1G", "--cache-dir", cache}); });
  // The wait lasts minutes; once the first notice is due, the holder is ended and prune goes on.
  std::this_thread::sleep_for(flashjit::cache::kLockWaitNoticeAfter + std::chrono::milliseconds(1500));
  const std::string pid = std::to_string(holder.pid());
  holder.kill();
  auto r = pruned.get();
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(contains(r.err, "flashjit cache prune: lock wait: waited"));
  CHECK(contains(r.err, "held by pid " + pid));
  CHECK(contains(r.err, "stopped"));
  CHECK(contains(r.err, cache + "/.maintenance.lock"));
}

TEST_CASE("clear --arch only touches that arch; stats reports per arch") {
  TempDir dir;
  const std::string cache = dir / "cache";
  copy_seed(cache);
  auto other_arch = run_flashjit({"cache", "clear", "--arch", "sm_90a", "--yes", "--cache-dir", cache});
  REQUIRE(other_arch.code == 0);
  CHECK(listed_names(cache).size() == 2);

  auto stats = run_flashjit({"cache", "stats", "--cache-dir", cache});
  REQUIRE(stats.code == 0);
  CHECK(contains(stats.out, "root: " + cache));
  CHECK(contains(stats.out, "sm_80"));
  CHECK(contains(stats.out, "lock files"));
  auto only_sm80 = run_flashjit({"cache", "list", "--arch", "sm_80", "--json", "--cache-dir", cache});
  CHECK(only_sm80.json()["entries"].size() == 2);
  CHECK(run_flashjit({"cache", "list", "--arch", "sm_90a", "--json", "--cache-dir", cache}).json()["entries"].empty());

  REQUIRE(run_flashjit({"cache", "clear", "--arch", "sm_80", "--yes", "--cache-dir", cache}).code == 0);
  CHECK(listed_names(cache).empty());
  auto after = run_flashjit({"cache", "stats", "--json", "--cache-dir", cache}).json();
  CHECK(after["entries"] == 0);
  CHECK(after["bytes"] == 0);
}

TEST_CASE("import refuses a FIFO or a folder as the bundle, without blocking") {
  TempDir dir;
  REQUIRE(::mkfifo((dir / "pipe.fjb").c_str(), 0600) == 0);
  const std::string cache = dir / "cache";
  const int code = flashjit::test_support::run_bounded(10, [&] {
    auto r = run_flashjit({"cache", "import", dir / "pipe.fjb", "--cache-dir", cache});
    return r.code == 1 && contains(r.err, "not a regular file") && contains(r.err, dir / "pipe.fjb") ? 0 : 1;
  });
  CHECK(code == 0);  // 128 + SIGALRM means it blocked
  REQUIRE(::mkdir((dir / "dir.fjb").c_str(), 0700) == 0);
  auto r = run_flashjit({"cache", "import", dir / "dir.fjb", "--cache-dir", cache});
  CHECK(r.code != 0);
  CHECK(listed_names(cache).empty());
}

TEST_CASE("export refuses a FIFO, or a symlink to one, as FILE; nothing is written (issue 21 G3)") {
  TempDir dir;
  const std::string cache = dir / "cache";
  copy_seed(cache);
  REQUIRE(::mkfifo((dir / "pipe.fjb").c_str(), 0600) == 0);
  REQUIRE(::symlink((dir / "pipe.fjb").c_str(), (dir / "link.fjb").c_str()) == 0);
  for (const std::string& file : {dir / "pipe.fjb", dir / "link.fjb"}) {
    auto r = run_flashjit({"cache", "export", file, "--cache-dir", cache});
    INFO(r.err);
    CHECK(r.code == 1);
    CHECK(contains(r.err, "'" + file + "'"));
    CHECK(contains(r.err, "not a regular file (a FIFO)"));
    CHECK(contains(r.err, "nothing written"));
    CHECK(r.out.empty());
  }
  struct stat st{};
  REQUIRE(::lstat((dir / "pipe.fjb").c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  REQUIRE(::lstat((dir / "link.fjb").c_str(), &st) == 0);
  CHECK(S_ISLNK(st.st_mode));
  CHECK(files_with_ext(dir.path(), ".fjb").empty());  // no regular file written in their place
}

TEST_CASE("a 100,000-character --cache-dir is cut where it is echoed (issue 21 G10)") {
  TempDir dir;
  const std::string huge = dir / std::string(100000, 'd');
  const std::vector<std::vector<std::string>> commands = {
      {"cache", "stats"}, {"cache", "prune", "--max-bytes", "1G"}, {"warmup", "--arch", "sm_80", "--head-dim", "64"}};
  for (auto args : commands) {
    args.insert(args.end(), {"--cache-dir", huge});
    auto r = run_flashjit(args);
    INFO(args[0] << " " << args[1] << ": " << r.err.substr(0, 600));
    CHECK(r.code == 1);
    CHECK(r.err.size() < 1500);
    CHECK(contains(r.err, dir / "ddd"));
    CHECK(contains(r.err, "(" + std::to_string(huge.size()) + " bytes)"));
  }
}

TEST_CASE("import counts what it wrote: a file-name collision is reported and exits 1") {
  TempDir dir;
  const std::string cache = dir / "cache";
  copy_seed(cache);
  REQUIRE(run_flashjit({"cache", "export", dir / "one.fjb", "--cache-dir", cache}).code == 0);
  // Re-key the first entry of a real bundle: same name, hash changed after its 16th hex digit.
  auto list = run_flashjit({"cache", "list", "--json", "--cache-dir", cache}).json();
  const std::string hash = list["entries"][0]["content_hash"].get<std::string>();
  std::string bundle;
  {
    std::ifstream in(dir / "one.fjb", std::ios::binary);
    bundle.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto at = bundle.find(hash);
  REQUIRE(at != std::string::npos);
  const std::string other = dir / "other";
  auto first = run_flashjit({"cache", "import", dir / "one.fjb", "--cache-dir", other});
  REQUIRE(first.code == 0);
  std::string twisted = bundle;
  twisted[at + hash.size() - 1] = twisted[at + hash.size() - 1] == '0' ? '1' : '0';
  // Fix the bundle checksum (the last 8 bytes: XXH3-64 of everything before them).
  twisted.resize(twisted.size() - 8);
  const std::uint64_t sum = flashjit::hash64(twisted);
  for (int i = 0; i < 8; ++i) twisted.push_back(static_cast<char>((sum >> (8 * i)) & 0xff));
  {
    std::ofstream out(dir / "twisted.fjb", std::ios::binary);
    out << twisted;
  }
  auto r = run_flashjit({"cache", "import", dir / "twisted.fjb", "--json", "--cache-dir", other});
  INFO(r.err);
  CHECK(r.code == 1);
  auto j = r.json();
  CHECK(j["imported"] == 0);
  CHECK(j["already_present"] == 1);
  REQUIRE(j["collisions"].size() == 1);
  CHECK(contains(r.err, "not imported"));
  CHECK(listed_names(other).size() == 2);
}
