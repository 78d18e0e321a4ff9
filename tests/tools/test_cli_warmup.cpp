// flashjit warmup end to end with NVRTC (no GPU): two small variants are compiled into a fresh
// cache, found there on the second run, listed and verified; a damaged entry is named.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cache_location.hpp"
#include "cli_test_util.hpp"
#include "kernel_binaries.hpp"
#include "warmup_runner.hpp"

using namespace flashjit;
using namespace flashjit::tools;
using namespace flashjit::tools::test;

namespace {

void flip_byte(const std::string& path, std::streamoff at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(f.good());
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  c = char(c ^ 0x5a);
  f.seekp(at);
  f.write(&c, 1);
}

}  // namespace

TEST_CASE("warmup compiles into the cache, then finds everything there; list and verify agree") {
  TempDir dir;
  const std::string cache = dir / "cache";

  auto first = run_flashjit(small_warmup_args(cache));
  INFO(first.err);
  REQUIRE(first.code == 0);
  auto j = first.json();
  CHECK(j["compiled"] == 2);
  CHECK(j["already_cached"] == 0);
  CHECK(j["failed"] == 0);
  CHECK(j["cache_root"] == cache);
  REQUIRE(j["variants"].size() == 2);
  std::vector<std::string> names;
  for (const auto& v : j["variants"]) {
    CHECK(v["arch"] == "sm_80");
    CHECK(v["from_disk"] == false);
    CHECK(v["compile_ms"].get<double>() > 0);
    CHECK(v["cubin_bytes"].get<std::size_t>() > 1000);
    CHECK(v["error"].is_null());
    names.push_back(v["name"].get<std::string>());
  }
  std::sort(names.begin(), names.end());
  CHECK(names[0].find("-dqk32-dv32-causal-") != std::string::npos);
  // Progress went to stderr, one counted line per kernel.
  CHECK(contains(first.err, "[1/2] sm_80 fa2_sm80-f16-dqk32"));
  CHECK(contains(first.err, "[2/2] sm_80 fa2_sm80-f16-dqk32"));
  CHECK(contains(first.err, "2 compiled, 0 already cached, 0 failed"));

  auto second = run_flashjit(small_warmup_args(cache));
  REQUIRE(second.code == 0);
  auto j2 = second.json();
  CHECK(j2["compiled"] == 0);
  CHECK(j2["already_cached"] == 2);
  for (const auto& v : j2["variants"]) {
    CHECK(v["from_disk"] == true);
    CHECK(v["compile_ms"].get<double>() == 0);
  }

  CHECK(listed_names(cache) == names);
  auto listed = run_flashjit({"cache", "list", "--cache-dir", cache});
  CHECK(listed.code == 0);
  CHECK(contains(listed.out, names[0]));
  CHECK(contains(listed.out, "2 entries"));

  auto stats = run_flashjit({"cache", "stats", "--json", "--cache-dir", cache});
  REQUIRE(stats.code == 0);
  CHECK(stats.json()["entries"] == 2);
  CHECK(stats.json()["arches"][0]["arch"] == "sm_80");

  auto good = run_flashjit({"cache", "verify", "--cache-dir", cache});
  CHECK(good.code == 0);
  CHECK(contains(good.out, "2 good, 0 bad"));

  const auto entries = files_with_ext(cache, ".fjk");
  REQUIRE(entries.size() == 2);
  flip_byte(entries[1], 2000);  // inside the cubin
  auto bad = run_flashjit({"cache", "verify", "--json", "--cache-dir", cache});
  CHECK(bad.code == 1);
  auto jb = bad.json();
  CHECK(jb["good"] == 1);
  REQUIRE(jb["bad"].size() == 1);
  CHECK(jb["bad"][0]["path"] == entries[1]);
  auto bad_text = run_flashjit({"cache", "verify", "--cache-dir", cache});
  CHECK(bad_text.code == 1);
  CHECK(contains(bad_text.out, "BAD " + entries[1]));

  auto repaired = run_flashjit({"cache", "verify", "--remove-bad", "--cache-dir", cache});
  CHECK(repaired.code == 1);  // it did find a bad entry
  CHECK(contains(repaired.out, "1 removed"));
  CHECK(run_flashjit({"cache", "verify", "--cache-dir", cache}).code == 0);
  CHECK(files_with_ext(cache, ".fjk").size() == 1);
}

TEST_CASE("runner: every failure is reported with its full error, and counted") {
  // No NVRTC work: one job is found in the cache (a stand-in entry stored under its real key)
  // but its confirm step fails; the other cannot be built at all.
  TempDir dir;
  const std::string cache = dir / "cache";
  auto engine = engine_on(cache);
  VariantFlags f;
  f.head_dims = {32};
  f.family = "fa2_sm80";
  const Arch sm80 = Arch::parse("sm_80").value();
  auto jobs = plan_warmup(variants_from_flags(f).value(), {sm80}, false).value();
  REQUIRE(jobs.size() == 1);
  WarmupJob too_big = jobs[0];
  too_big.variant.tiling = parse_tiling("fa2_sm80", "m128n256w4s4").value();
  jobs.push_back(too_big);

  auto disk = open_cache(cache, std::cerr, "test");
  REQUIRE(disk.ok());
  REQUIRE(disk->store(KernelBinaries::cache_key(jobs[0].variant, sm80).value(), "stand-in cubin").ok());

  std::ostringstream err;
  ProgressBar bar(err, jobs.size());
  RunnerOptions ro;
  ro.threads = 2;
  ro.confirm = [](const WarmupJob&) { return Status(Error(Code::io_error, "entry went missing").with("entry", "/x")); };
  auto results = run_warmup(*engine, jobs, ro, bar);
  bar.finish();
  REQUIRE(results.size() == 2);
  CHECK(!results[0].ok);
  CHECK(contains(results[0].error, "entry went missing"));
  CHECK(!results[1].ok);
  CHECK(contains(results[1].error, "shared memory"));
  const std::string text = err.str();
  CHECK(contains(text, "/2] sm_80 " + jobs[0].variant.name() + "  FAILED"));
  CHECK(contains(text, "/2] sm_80 " + too_big.variant.name() + "  FAILED"));
  CHECK(contains(text, "io_error: entry went missing"));
  CHECK(contains(text, "entry: /x"));  // details too, indented under the item
}

// ---- issue 6 ----

namespace {

// The entry file path the cache uses for the first kernel small_warmup_args() warms.
std::string first_entry_path(const std::string& cache_dir) {
  auto engine = engine_on(cache_dir);
  VariantFlags f;
  f.head_dims = {32};
  f.family = "fa2_sm80";  // what small_warmup_args compiles
  const Arch sm80 = Arch::parse("sm_80").value();
  auto jobs = plan_warmup(variants_from_flags(f).value(), {sm80}, false).value();
  auto disk = open_cache(cache_dir, std::cerr, "test");
  REQUIRE(disk.ok());
  return disk->entry_path(KernelBinaries::cache_key(jobs[0].variant, sm80).value());
}

}  // namespace

TEST_CASE("warmup: a kernel that could not be stored is a failure, with the reason, and exit code 1") {
  TempDir dir;
  const std::string cache = dir / "cache";
  const std::string path = first_entry_path(cache);
  REQUIRE(::mkdir((cache + "/sm_80").c_str(), 0700) == 0);
  REQUIRE(::mkdir(path.c_str(), 0700) == 0);  // a folder where the entry file goes

  auto r = run_flashjit(small_warmup_args(cache));
  INFO(r.err);
  CHECK(r.code == 1);
  auto j = r.json();
  CHECK(j["failed"] == 1);
  CHECK(j["compiled"] == 1);
  bool named = false;
  for (const auto& v : j["variants"])
    if (!v["error"].is_null()) named |= contains(v["error"].get<std::string>(), path);
  CHECK(named);
  CHECK(contains(r.err, "1 compiled, 0 already cached, 1 failed"));
}

TEST_CASE("warmup: an unsafe arch folder means the disk cache was not used, and warmup says so") {
  TempDir dir;
  const std::string cache = dir / "cache";
  REQUIRE(::mkdir(cache.c_str(), 0700) == 0);
  REQUIRE(::mkdir((cache + "/sm_80").c_str(), 0700) == 0);
  REQUIRE(::chmod((cache + "/sm_80").c_str(), 0777) == 0);

  auto r = run_flashjit(small_warmup_args(cache));
  INFO(r.err);
  CHECK(r.code == 1);
  CHECK(r.json()["failed"] == 2);
  CHECK(contains(r.err, "disk cache was not used"));
  CHECK(contains(r.err, cache + "/sm_80"));
  CHECK(contains(r.err, "writable by group or others"));
  CHECK(files_with_ext(cache, ".fjk").empty());
}

TEST_CASE("warmup: a FIFO in place of an entry file does not block warmup") {
  TempDir dir;
  const std::string cache = dir / "cache";
  const std::string path = first_entry_path(cache);
  REQUIRE(::mkdir((cache + "/sm_80").c_str(), 0700) == 0);
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  const int code = test_support::run_bounded(120, [&] { return run_flashjit(small_warmup_args(cache)).code; });
  CHECK(code == 0);  // 128 + SIGALRM means it blocked
  CHECK(files_with_ext(cache, ".fjk").size() == 2);
}
