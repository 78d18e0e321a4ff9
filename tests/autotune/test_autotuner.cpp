#include "autotune/autotuner.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>

#include <chrono>
#include <string>
#include <thread>

#include "autotune/tuning_store.hpp"
#include "autotune_test_util.hpp"

using namespace flashjit;
using namespace flashjit::autotune;
using namespace flashjit::autotune::test;
using namespace std::chrono_literals;

namespace {

const char* kDevice = "NVIDIA H100 80GB HBM3";

AutotunerOptions options_for(const std::string& root, TuneMode mode, LogSink* log = nullptr) {
  return autotuner_options(root, mode, kDevice, log);
}

Autotuner make_tuner(const std::string& root, TuneMode mode, LogSink* log = nullptr) {
  auto t = Autotuner::create(options_for(root, mode, log));
  REQUIRE(t.ok());
  return std::move(t).value();
}

TuningKey key_for(std::int64_t seqlen) {
  Semantics s;
  s.mask = Mask::causal;
  return make_tuning_key("fa2_sm80", s, seqlen, seqlen, 32);
}

const Tiling kBest = T(128, 64, 8, 3);  // FakeGpu's fastest working tiling

// Puts a tuned result for key_for(4096) in the store at `root`: tuned on first use, timed on `gpu`.
void store_tuned(const std::string& root, FakeGpu& gpu) {
  Autotuner t = make_tuner(root, TuneMode::on_first_use);
  REQUIRE(t.choose(key_for(4096), sample_candidates(), kDefault, gpu.measure(), {}).value() == kBest);
}

// How an autotuner's choose() calls were answered, to check in one line.
std::string answers(const AutotunerStats& st) {
  return "lookups " + std::to_string(st.lookups) + ", hits " + std::to_string(st.hits) + ", defaults " +
         std::to_string(st.defaults) + ", tunes " + std::to_string(st.tunes);
}

}  // namespace

TEST_CASE("autotuner: off returns the default and never measures or reads the store") {
  TempDir tmp;
  FakeGpu gpu;
  // A tuned result on disk that off mode must not use.
  store_tuned(tmp / "root", gpu);
  const int calls = gpu.calls();
  Autotuner off = make_tuner(tmp / "root", TuneMode::off);
  CHECK_FALSE(off.has_store());
  for (int i = 0; i < 3; ++i)
    CHECK(off.choose(key_for(4096), sample_candidates(), kDefault, gpu.measure(), {}).value() == kDefault);
  CHECK(gpu.calls() == calls);
  CHECK(answers(off.stats()) == "lookups 3, hits 0, defaults 3, tunes 0");
}

TEST_CASE("autotuner: known_default answers without candidates only when choose() would ignore them") {
  TempDir tmp;
  FakeGpu gpu;
  store_tuned(tmp / "root", gpu);
  Autotuner off = make_tuner(tmp / "root", TuneMode::off);
  CHECK(off.known_default(key_for(4096), kDefault) == kDefault);  // off: even a stored key
  Autotuner offline = make_tuner(tmp / "root", TuneMode::offline_only);
  CHECK(offline.known_default(key_for(64), kDefault) == kDefault);        // nothing stored
  CHECK_FALSE(offline.known_default(key_for(4096), kDefault).has_value());  // stored: needs the candidate set
  CHECK(offline.choose(key_for(4096), sample_candidates(), kDefault, gpu.measure(), {}).value() == kBest);
  CHECK(answers(offline.stats()) == "lookups 2, hits 1, defaults 1, tunes 0");
  // On first use a key with nothing stored is tuned: the candidates are needed.
  Autotuner first_use = make_tuner(tmp / "other", TuneMode::on_first_use);
  CHECK_FALSE(first_use.known_default(key_for(64), kDefault).has_value());
}

TEST_CASE("autotuner: off mode creates nothing on disk") {
  TempDir tmp;
  Autotuner off = make_tuner(tmp / "root", TuneMode::off);
  CHECK_FALSE(exists(tmp / "root"));
}

TEST_CASE("autotuner: offline_only uses stored results, else the default, and never measures") {
  TempDir tmp;
  FakeGpu gpu;
  store_tuned(tmp / "root", gpu);
  FakeGpu fresh;
  Autotuner offline = make_tuner(tmp / "root", TuneMode::offline_only);
  CHECK(offline.has_store());
  for (int i = 0; i < 3; ++i) {
    CHECK(offline.choose(key_for(3000), sample_candidates(), kDefault, fresh.measure(), {}).value() == kBest);
    CHECK(offline.choose(key_for(64), sample_candidates(), kDefault, fresh.measure(), {}).value() == kDefault);
  }
  CHECK(fresh.calls() == 0);
  CHECK(answers(offline.stats()) == "lookups 6, hits 3, defaults 3, tunes 0");
}

TEST_CASE("autotuner: on_first_use tunes a key once, then answers from memory and from the store") {
  TempDir tmp;
  FakeGpu gpu;
  LogSink log;
  Autotuner t = make_tuner(tmp / "root", TuneMode::on_first_use, &log);
  for (int i = 0; i < 5; ++i)
    CHECK(t.choose(key_for(4096), sample_candidates(), kDefault, gpu.measure(), {}).value() == kBest);
  CHECK(gpu.calls() == 6);  // each tiling timed once, on the first call only
  // Another bucket is another tuning.
  CHECK(t.choose(key_for(128), sample_candidates(), kDefault, gpu.measure(), {}).value() == kBest);
  CHECK(gpu.calls() == 12);
  CHECK(answers(t.stats()) == "lookups 6, hits 4, defaults 0, tunes 2");
  CHECK(t.stats().tune_seconds >= 0);
  CHECK(log.contains("tuning fa2_sm80/f16-dqk128-dv128-causal-vec8/sq4096/sk4096/bh32"));

  // A new process (a new Autotuner) finds it in the store.
  FakeGpu gpu2;
  Autotuner t2 = make_tuner(tmp / "root", TuneMode::on_first_use);
  CHECK(t2.choose(key_for(4096), sample_candidates(), kDefault, gpu2.measure(), {}).value() == kBest);
  CHECK(gpu2.calls() == 0);
  CHECK(t2.stats().hits == 1);
}

TEST_CASE("autotuner: 8 threads asking for one key cause one tuning") {
  TempDir tmp;
  FakeGpu gpu;
  gpu.on_measure = [](const Tiling&) { std::this_thread::sleep_for(5ms); };
  Autotuner t = make_tuner(tmp / "root", TuneMode::on_first_use);
  constexpr int kThreads = 8;
  std::vector<Tiling> got(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      auto r = t.choose(key_for(4096), sample_candidates(), kDefault, gpu.measure(), {});
      REQUIRE(r.ok());
      got[i] = *r;
    });
  for (auto& th : threads) th.join();
  CHECK(gpu.calls() == 6);
  for (const Tiling& g : got) CHECK(g == kBest);
  AutotunerStats st = t.stats();
  CHECK(st.lookups == kThreads);
  CHECK(st.tunes == 1);
  CHECK(st.hits == kThreads - 1);
  CHECK(st.waits >= 1);
}

TEST_CASE("autotuner: threads asking for different keys tune each once, one run at a time") {
  TempDir tmp;
  FakeGpu gpu;
  std::atomic<int> running{0}, most{0};
  gpu.on_measure = [&](const Tiling&) {
    int now = ++running;
    int m = most.load();
    while (now > m && !most.compare_exchange_weak(m, now)) {
    }
    std::this_thread::sleep_for(1ms);
    --running;
  };
  Autotuner t = make_tuner(tmp / "root", TuneMode::on_first_use);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      for (int rep = 0; rep < 3; ++rep)
        CHECK(t.choose(key_for(64 << (i % 4)), sample_candidates(), kDefault, gpu.measure(), {}).value() == kBest);
    });
  for (auto& th : threads) th.join();
  CHECK(gpu.calls() == 4 * 6);
  CHECK(most.load() == 1);  // timings never overlapped
  CHECK(t.stats().tunes == 4);
}

TEST_CASE("autotuner: two processes asking for one key cause one tuning") {
  TempDir tmp;
  const std::string root = tmp / "root";
  const std::string calls_file = tmp / "calls";
  // Create the folders first so both children start on equal terms.
  REQUIRE(make_tuner(root, TuneMode::on_first_use).has_store());
  auto child = [&] {
    FakeGpu gpu;
    gpu.on_measure = [&](const Tiling&) {
      int fd = ::open(calls_file.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0600);
      (void)!::write(fd, "x", 1);
      ::close(fd);
      std::this_thread::sleep_for(20ms);
    };
    auto t = Autotuner::create(options_for(root, TuneMode::on_first_use));
    if (!t) return 2;
    auto r = t->choose(key_for(4096), sample_candidates(), kDefault, gpu.measure(), {});
    return r.ok() && *r == kBest ? 0 : 3;
  };
  pid_t a = fork_child(child);
  pid_t b = fork_child(child);
  CHECK(wait_child(a) == 0);
  CHECK(wait_child(b) == 0);
  CHECK(read_file(calls_file).size() == 6);  // one process timed, the other waited and read
}

TEST_CASE("autotuner: a stale stored result is tuned again") {
  TempDir tmp;
  FakeGpu gpu;
  {
    Autotuner t = make_tuner(tmp / "root", TuneMode::on_first_use);
    REQUIRE(t.choose(key_for(4096), sample_candidates(), kDefault, gpu.measure(), {}).ok());
  }
  CHECK(gpu.calls() == 6);
  // The family gained a tiling: the candidate set changed.
  auto more = sample_candidates();
  more.push_back(T(64, 128, 4, 3));
  gpu.set_time(T(64, 128, 4, 3), 0.4);
  Autotuner t = make_tuner(tmp / "root", TuneMode::on_first_use);
  CHECK(t.choose(key_for(4096), more, kDefault, gpu.measure(), {}).value() == T(64, 128, 4, 3));
  CHECK(gpu.calls() == 13);
  // A new NVRTC: tuned again.
  AutotunerOptions o = options_for(tmp / "root", TuneMode::on_first_use);
  o.nvrtc_version = "12.8";
  auto newer = Autotuner::create(o);
  REQUIRE(newer.ok());
  CHECK(newer->choose(key_for(4096), more, kDefault, gpu.measure(), {}).ok());
  CHECK(gpu.calls() == 20);
  // And a different salt (new kernel templates): tuned again.
  o.nvrtc_version = "12.4";
  o.candidate_salt = "templates v2";
  auto salted = Autotuner::create(o);
  REQUIRE(salted.ok());
  CHECK(salted->choose(key_for(4096), more, kDefault, gpu.measure(), {}).ok());
  CHECK(gpu.calls() == 27);
}

TEST_CASE("autotuner: a stored tiling that is not a candidate is never returned") {
  TempDir tmp;
  FakeGpu gpu;
  store_tuned(tmp / "root", gpu);
  // Hand-edit the store: same candidate-set hash, a tiling outside the set.
  auto store = TuningStore::open(tmp / "root", kDevice, "sm_90a", "12.4", "12040", [](const std::string&) {}, test_knobs);
  REQUIRE(store.ok());
  auto rec = store->find(key_for(4096), candidate_set_hash(sample_candidates()));
  REQUIRE(rec.has_value());
  rec->tiling = T(256, 256, 8, 4);
  REQUIRE(store->put(key_for(4096), *rec).ok());
  LogSink log;
  Autotuner offline = make_tuner(tmp / "root", TuneMode::offline_only, &log);
  CHECK(offline.choose(key_for(4096), sample_candidates(), kDefault, gpu.measure(), {}).value() == kDefault);
  CHECK(log.contains("not among the candidates"));
}

TEST_CASE("autotuner: when tuning fails the default is used, once, and logged") {
  TempDir tmp;
  FakeGpu gpu;
  for (const Tiling& t : sample_candidates()) gpu.set_failing(t, "no GPU");
  LogSink log;
  Autotuner t = make_tuner(tmp / "root", TuneMode::on_first_use, &log);
  for (int i = 0; i < 3; ++i)
    CHECK(t.choose(key_for(4096), sample_candidates(), kDefault, gpu.measure(), {}).value() == kDefault);
  CHECK(gpu.calls() == 6);  // not retried in this process
  CHECK(log.contains("failed, using the default m128n64w4s2"));
  AutotunerStats st = t.stats();
  CHECK(st.tune_failures == 1);
  CHECK(st.tunes == 0);
  CHECK(st.defaults == 3);
  // Nothing was stored.
  FakeGpu good;
  Autotuner t2 = make_tuner(tmp / "root", TuneMode::on_first_use);
  CHECK(t2.choose(key_for(4096), sample_candidates(), kDefault, good.measure(), {}).value() == kBest);
}

TEST_CASE("autotuner: without a usable cache folder it tunes in memory and says so") {
  TempDir tmp;
  ::mkdir((tmp / "shared").c_str(), 0777);
  ::chmod((tmp / "shared").c_str(), 0777);  // writable by others: refused
  LogSink log;
  FakeGpu gpu;
  Autotuner t = make_tuner(tmp / "shared", TuneMode::on_first_use, &log);
  CHECK_FALSE(t.has_store());
  CHECK(t.store_path().empty());
  CHECK(log.contains("will not be kept on disk"));
  for (int i = 0; i < 3; ++i)
    CHECK(t.choose(key_for(4096), sample_candidates(), kDefault, gpu.measure(), {}).value() == kBest);
  CHECK(gpu.calls() == 6);
}

TEST_CASE("autotuner: the mode comes from FLASHJIT_TUNE when not given") {
  TempDir tmp;
  AutotunerOptions o = options_for(tmp / "root", TuneMode::off);
  o.mode.reset();
  {
    EnvGuard env(kTuneModeEnv, "first-use");
    CHECK(Autotuner::create(o).value().mode() == TuneMode::on_first_use);
  }
  {
    EnvGuard env(kTuneModeEnv, std::nullopt);
    CHECK(Autotuner::create(o).value().mode() == TuneMode::offline_only);
  }
  {
    LogSink log;
    o.logger = log.fn();
    EnvGuard env(kTuneModeEnv, "sometimes");
    CHECK(Autotuner::create(o).value().mode() == TuneMode::offline_only);
    CHECK(log.contains("FLASHJIT_TUNE"));
  }
}

TEST_CASE("autotuner: tune_key tunes offline, skips what is stored, retunes on request") {
  TempDir tmp;
  FakeGpu gpu;
  Autotuner t = make_tuner(tmp / "root", TuneMode::offline_only);
  auto r = t.tune_key(key_for(4096), sample_candidates(), kDefault, gpu.measure(), {});
  REQUIRE(r.ok());
  CHECK(r->tiling == kBest);
  CHECK(r->nvrtc_version == "12.4");
  CHECK(gpu.calls() == 6);
  CHECK(t.tune_key(key_for(4096), sample_candidates(), kDefault, gpu.measure(), {}).ok());
  CHECK(gpu.calls() == 6);
  gpu.set_time(T(64, 32, 4, 2), 0.1);
  auto again = t.tune_key(key_for(4096), sample_candidates(), kDefault, gpu.measure(), {}, Autotuner::Retune::always);
  REQUIRE(again.ok());
  CHECK(again->tiling == T(64, 32, 4, 2));
  CHECK(gpu.calls() == 12);
  // choose() sees the new result at once, without measuring.
  CHECK(t.choose(key_for(4096), sample_candidates(), kDefault, gpu.measure(), {}).value() == T(64, 32, 4, 2));
  CHECK(gpu.calls() == 12);
  // All failing: an error naming the reasons.
  FakeGpu bad;
  for (const Tiling& c : sample_candidates()) bad.set_failing(c, "broken");
  auto fail = t.tune_key(key_for(128), sample_candidates(), kDefault, bad.measure(), {});
  REQUIRE_FALSE(fail.ok());
  CHECK(fail.error().code() == Code::unsupported);
  CHECK(fail.error().detail("key") == key_for(128).to_string());
}

TEST_CASE("autotuner: progress and time budget options reach the tuner") {
  TempDir tmp;
  FakeGpu gpu;
  double now = 0;
  gpu.on_measure = [&](const Tiling&) { now += 1; };
  AutotunerOptions o = options_for(tmp / "root", TuneMode::on_first_use);
  o.tune.time_budget_s = 1.5;
  o.tune.clock_s = [&] { return now; };
  int progress_calls = 0;
  o.progress = [&](std::size_t, std::size_t, const Tiling&, double) { ++progress_calls; };
  auto t = Autotuner::create(o);
  REQUIRE(t.ok());
  CHECK(t->choose(key_for(4096), sample_candidates(), kDefault, gpu.measure(), {}).value() == kDefault);
  CHECK(gpu.calls() == 2);
  CHECK(progress_calls == 3);  // two tilings handled, then the final call
  auto store = TuningStore::open(tmp / "root", kDevice, "sm_90a", "12.4", "12040", [](const std::string&) {}, test_knobs);
  auto rec = store->find(key_for(4096), candidate_set_hash(sample_candidates()));
  REQUIRE(rec.has_value());
  CHECK(rec->partial);
}
