// An offline run over several keys killed part way keeps every finished key, and a rerun tunes
// only what is missing.
#include <doctest/doctest.h>
#include <signal.h>

#include "autotune/autotuner.hpp"
#include "autotune/tuning_store.hpp"
#include "autotune_test_util.hpp"

using namespace flashjit;
using namespace flashjit::autotune;
using namespace flashjit::autotune::test;

namespace {

AutotunerOptions options_for(const std::string& root) {
  return autotuner_options(root, TuneMode::offline_only, "NVIDIA H200");
}

std::vector<TuningKey> offline_keys() {
  std::vector<TuningKey> keys;
  Semantics s;
  for (std::int64_t seqlen : {512, 1024, 2048, 4096, 8192})
    keys.push_back(make_tuning_key("fa2_sm80", s, seqlen, seqlen, 32));
  return keys;
}

// The offline run: tune every key in order (Retune::if_missing). Returns how many failed.
int run_offline(Autotuner& tuner, FakeGpu& gpu) {
  int failures = 0;
  for (const TuningKey& k : offline_keys())
    if (!tuner.tune_key(k, sample_candidates(), kDefault, gpu.measure(), {}).ok()) ++failures;
  return failures;
}

}  // namespace

TEST_CASE("resume: a killed offline run keeps finished keys; the rerun tunes only the rest") {
  TempDir tmp;
  const std::string root = tmp / "root";
  constexpr std::size_t kKilledAt = 2;  // dies while timing the third key
  const auto keys = offline_keys();

  pid_t child = fork_child([&] {
    auto tuner = Autotuner::create(options_for(root));
    if (!tuner) return 2;
    FakeGpu gpu;
    int calls = 0;
    gpu.on_measure = [&](const Tiling&) {
      // Third key (6 tilings per key), fourth tiling: mid-run, nothing of this key written yet.
      if (++calls == int(kKilledAt) * 6 + 4) ::raise(SIGKILL);
    };
    run_offline(*tuner, gpu);
    return 0;  // not reached
  });
  REQUIRE(wait_child(child) == 128 + SIGKILL);

  {
    auto store = TuningStore::open(root, "NVIDIA H200", "sm_90a", "12.4", "12040", [](const std::string&) {}, test_knobs);
    REQUIRE(store.ok());
    const std::string hash = candidate_set_hash(sample_candidates());
    for (std::size_t i = 0; i < keys.size(); ++i) {
      CAPTURE(i);
      CHECK(store->find(keys[i], hash).has_value() == (i < kKilledAt));
    }
  }

  auto tuner = Autotuner::create(options_for(root));
  REQUIRE(tuner.ok());
  FakeGpu gpu;
  CHECK(run_offline(*tuner, gpu) == 0);
  CHECK(gpu.calls() == int(keys.size() - kKilledAt) * 6);  // only the missing keys were timed
  CHECK(tuner->stats().tunes == keys.size() - kKilledAt);

  // A third run has nothing left to do.
  FakeGpu idle;
  auto again = Autotuner::create(options_for(root));
  REQUIRE(again.ok());
  CHECK(run_offline(*again, idle) == 0);
  CHECK(idle.calls() == 0);
  // The killed run's key lock did not outlive it, and it left no temp file.
  for (const auto& f : files_in(root + "/tuning")) CHECK(f.find(".tmp-") == std::string::npos);
}
