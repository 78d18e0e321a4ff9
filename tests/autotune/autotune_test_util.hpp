// Helpers shared by the autotune tests: a private temp folder per test, autotuner options, a fake
// GPU (a table of times). Environment overrides, the log sink, file helpers and forked children
// come from tests/support/test_support.hpp.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "autotune/autotuner.hpp"
#include "autotune/tuner.hpp"
#include "flashjit/variant.hpp"
#include "tests/support/test_support.hpp"

namespace flashjit::autotune::test {

using test_support::EnvGuard;
using test_support::LogSink;
using test_support::exists;
using test_support::files_in;
using test_support::fork_child;
using test_support::read_file;
using test_support::wait_child;
using test_support::write_file;

// A fresh folder /tmp/fj-autotune-test-XXXXXX, removed with everything in it at the end.
class TempDir : public test_support::TempDir {
 public:
  TempDir() : test_support::TempDir("fj-autotune-test") {}
};

// The knob table of the family the tests' keys name, and how their stores find it (the engine
// passes its family registry instead).
inline const KnobTable kTestKnobs{"fa2_sm80",
                                  {{"block_m", "m", "kBlockM", ""}, {"block_n", "n", "kBlockN", ""},
                                   {"warps", "w", "kWarps", ""}, {"stages", "s", "kStages", ""}}};
inline const KnobTable* test_knobs(std::string_view family) { return family == kTestKnobs.family ? &kTestKnobs : nullptr; }
inline Tiling T(int block_m, int block_n, int warps, int stages) {
  return Tiling(kTestKnobs, {block_m, block_n, warps, stages});
}

// Options for an Autotuner under `root` on `device` (sm_90a, NVRTC 12.4, driver 12040), logging to
// `log`, or nowhere.
inline AutotunerOptions autotuner_options(const std::string& root, TuneMode mode, const std::string& device,
                                          LogSink* log = nullptr) {
  AutotunerOptions o;
  o.mode = mode;
  o.root = root;
  o.device_name = device;
  o.arch = "sm_90a";
  o.nvrtc_version = "12.4";
  o.driver_version = "12040";
  o.logger = log ? log->fn() : Logger([](const std::string&) {});
  o.knob_tables = test_knobs;
  return o;
}

// The tilings the fake GPU knows, in family order.
inline const Tiling kDefault = T(128, 64, 4, 2);
inline std::vector<Tiling> sample_candidates() {
  return {T(64, 32, 4, 2), T(64, 64, 4, 2), T(128, 64, 4, 2), T(128, 128, 4, 2), T(128, 64, 8, 3), T(128, 128, 8, 3)};
}

// A fake GPU: fixed median times per tiling, some tilings failing, every call counted.
class FakeGpu {
 public:
  FakeGpu() {
    times_[T(64, 32, 4, 2).name()] = 2.0;
    times_[T(64, 64, 4, 2).name()] = 1.5;
    times_[T(128, 64, 4, 2).name()] = 1.2;  // the default
    times_[T(128, 128, 4, 2).name()] = 0.9;
    times_[T(128, 64, 8, 3).name()] = 0.7;  // the fastest
    times_[T(128, 128, 8, 3).name()] = 0.5;  // faster still, but fails to compile
    failing_[T(128, 128, 8, 3).name()] = "ptxas: too many resources requested";
  }
  void set_time(const Tiling& t, double ms) { times_[t.name()] = ms; }
  void set_failing(const Tiling& t, std::string why) { failing_[t.name()] = std::move(why); }

  Measure measure() {
    return [this](const Tiling& t) -> Result<double> {
      ++calls_;
      {
        std::lock_guard<std::mutex> g(m_);
        measured_.push_back(t);
      }
      if (on_measure) on_measure(t);
      if (auto f = failing_.find(t.name()); f != failing_.end()) return Error(Code::compile_failed, f->second);
      auto it = times_.find(t.name());
      if (it == times_.end()) return Error(Code::internal, "fake GPU does not know " + t.name());
      return it->second;
    };
  }

  int calls() const { return calls_; }
  std::vector<Tiling> measured() const {
    std::lock_guard<std::mutex> g(m_);
    return measured_;
  }

  // Runs inside each measure call (e.g. to sleep, or to kill the process).
  std::function<void(const Tiling&)> on_measure;

 private:
  std::map<std::string, double> times_;
  std::map<std::string, std::string> failing_;
  std::atomic<int> calls_{0};
  mutable std::mutex m_;
  std::vector<Tiling> measured_;
};

}  // namespace flashjit::autotune::test
