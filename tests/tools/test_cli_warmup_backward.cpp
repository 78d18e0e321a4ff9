// flashjit warmup --pass for the backward, end to end with NVRTC (no GPU): a small training
// variant's forward and backward kernels are compiled into a fresh cache under the key that
// Engine::backward() plans for such a call, then listed, verified, and carried by a bundle.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <iostream>

#include "cache_location.hpp"
#include "cli_test_util.hpp"
#include "flashjit/flashjit.hpp"

using namespace flashjit;
using namespace flashjit::tools;
using namespace flashjit::tools::test;

namespace {

// A backward call the warmed variant serves: contiguous f16 [1, 64, 2, 16] tensors, no mask, at
// fake, aligned device addresses (planning reads none of them).
BackwardArgs small_backward_args() {
  const auto at = [](std::uint64_t slot) { return reinterpret_cast<void*>(0x7f0000000000ull + (slot << 32)); };
  BackwardArgs b;
  TensorView* views[] = {&b.forward.q, &b.forward.k, &b.forward.v, &b.forward.o, &b.dout, &b.dq, &b.dk, &b.dv};
  for (std::uint64_t i = 0; i < 8; ++i) *views[i] = TensorView::bshd(at(i + 1), DType::f16, 1, 64, 2, 16);
  b.forward.lse = LseView::contiguous(static_cast<float*>(at(9)), 1, 2, 64);
  return b;
}

// --pass both on one arch, one head dim: the forward's families and the backward's.
std::vector<std::string> training_warmup_args(const std::string& cache_dir) {
  return {"warmup", "--arch", "sm_80", "--head-dim", "16", "--lse", "--pass", "both", "--threads", "2", "--json",
          "--cache-dir", cache_dir};
}

bool is_file(const std::string& path) {
  struct stat st{};
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

TEST_CASE("warmup --pass both fills the cache entry Engine::backward() reads; list, verify and bundles carry it") {
  TempDir dir;
  const std::string cache = dir / "cache";
  auto engine = engine_on(cache);
  auto planned = engine->plan_backward(small_backward_args(), "sm_80");
  REQUIRE(planned.ok());
  const KernelVariant& backward = planned->variant;
  REQUIRE(backward.family == "bwd_sm80");

  auto first = run_flashjit(training_warmup_args(cache));
  INFO(first.err);
  REQUIRE(first.code == 0);
  auto j = first.json();
  CHECK(j["failed"] == 0);
  std::size_t backward_jobs = 0;
  for (const auto& v : j["variants"]) {
    CHECK(v["error"].is_null());
    if (v["pass"] != "backward") continue;
    ++backward_jobs;
    CHECK(v["family"] == "bwd_sm80");
    CHECK(v["name"] == backward.name());  // the variant the engine plans, not one named otherwise
  }
  CHECK(backward_jobs == 1);
  const std::size_t total = j["variants"].size();
  CHECK(j["compiled"] == total);
  // Progress as for the forward: the header counts each pass, one counted line per kernel.
  CHECK(contains(first.err, "kernels (" + std::to_string(total - 1) + " forward, 1 backward) for sm_80"));
  CHECK(contains(first.err, "] sm_80 " + backward.name() + "  compiled"));

  // The entry is where the catalog says a backward call's binary is filed.
  auto key = disk_cache_key(backward, Arch::parse("sm_80").value());
  REQUIRE(key.ok());
  auto disk = open_cache(cache, std::cerr, "test");
  REQUIRE(disk.ok());
  CHECK(is_file(disk->entry_path({key->arch, key->name, key->content_hash})));
  // And the engine finds it there instead of compiling (what backward() does before launching).
  auto report = engine->compile(backward, "sm_80");
  REQUIRE(report.ok());
  CHECK(report->from_disk);

  auto second = run_flashjit(training_warmup_args(cache));
  REQUIRE(second.code == 0);
  CHECK(second.json()["already_cached"] == total);

  const auto names = listed_names(cache);
  CHECK(names.size() == total);
  CHECK(std::find(names.begin(), names.end(), backward.code_name()) != names.end());
  auto listed = run_flashjit({"cache", "list", "--arch", "sm_80", "--cache-dir", cache});
  CHECK(contains(listed.out, backward.code_name()));
  CHECK(contains(run_flashjit({"cache", "verify", "--cache-dir", cache}).out, std::to_string(total) + " good, 0 bad"));

  // A bundle carries the backward's entry like the forward's: export, clear, import, all hits.
  auto exported = run_flashjit({"cache", "export", dir / "train.fjb", "--arch", "sm_80", "--json", "--cache-dir", cache});
  REQUIRE(exported.code == 0);
  CHECK(exported.json()["entries"] == total);
  const std::string fleet = dir / "fleet";
  auto imported = run_flashjit({"cache", "import", dir / "train.fjb", "--json", "--cache-dir", fleet});
  REQUIRE(imported.code == 0);
  CHECK(imported.json()["imported"] == total);
  CHECK(listed_names(fleet) == names);
  auto warm = run_flashjit(training_warmup_args(fleet));
  REQUIRE(warm.code == 0);
  CHECK(warm.json()["already_cached"] == total);
  auto on_fleet = engine_on(fleet)->compile(backward, "sm_80");
  REQUIRE(on_fleet.ok());
  CHECK(on_fleet->from_disk);
}
