// One tuning run: time each candidate tiling through a callback and keep the fastest.
//
// Nothing here touches a GPU. The caller supplies Measure (the engine's compiles the variant,
// checks registers and spills, and times it with CUDA events on random inputs) and Prune (cheap
// reasons to skip a tiling before paying for a compile). Every outcome is recorded, so the store
// can explain a choice later.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "autotune/log.hpp"
#include "autotune/tuning_record.hpp"
#include "flashjit/status.hpp"
#include "flashjit/variant.hpp"

namespace flashjit::autotune {

struct Candidate {
  Tiling tiling;
};

// Median milliseconds of one tiling on the representative problem, or why it cannot run.
// A time that is not finite and positive counts as a failure.
using Measure = std::function<Result<double>(const Tiling&)>;

// A reason not to time a tiling at all ("needs 240 KB shared memory", "spills 64 bytes"), or
// nullopt to time it. May be empty: nothing is pruned.
using Prune = std::function<std::optional<std::string>(const Tiling&)>;

// Called before each tiling is handled, with how many are done, the total and the tiling about
// to be handled; and once at the end with done == total and the winner. May be empty.
using Progress = std::function<void(std::size_t done, std::size_t total, const Tiling& current, double elapsed_s)>;

inline constexpr double kMinGainOverDefault = 0.02;

struct TuneOptions {
  // Stop starting new candidates once this many seconds have passed, keeping the best so far
  // (the outcome is then marked partial). The default tiling is always timed first, so even a
  // zero budget yields a usable result. Unset: no limit.
  std::optional<double> time_budget_s;
  // Seconds on a monotonic clock; empty: std::chrono::steady_clock. Tests inject a fake one.
  std::function<double()> clock_s;
  // A candidate replaces the default only when it is faster by more than this fraction: closer
  // than that, timings on the tuner's representative problem do not predict which runs faster
  // in the user's (measured on the H100: a 0.05% win in the tuner ran 7% slower end to end).
  double min_gain = kMinGainOverDefault;
};

struct TuneOutcome {
  Tiling best;
  double best_ms = 0;
  Tiling default_tiling;
  std::optional<double> default_ms;     // empty when the default was pruned or failed
  std::vector<CandidateResult> results;  // in the order handled: the default first
  bool partial = false;                  // the time budget stopped the run early
  double elapsed_s = 0;

  std::optional<double> speedup() const;  // default_ms / best_ms
  // The outcome as the store keeps it (tuned_at is now; versions are stamped by the store).
  TuningRecord to_record(std::string candidate_set_hash) const;
};

// Times the default tiling, then each candidate in order (duplicates and the default's repeat
// are handled once). Pruned and failed tilings are skipped, each reason logged and recorded.
// The fastest timed tiling wins, the default included; if none could be timed the error
// (Code::unsupported) names every tiling's reason.
Result<TuneOutcome> tune(const std::vector<Tiling>& candidates, const Tiling& default_tiling,
                         const Measure& measure, const Prune& prune, const Progress& progress,
                         const Logger& logger, const TuneOptions& options = {});

// Identifies the set of tilings searched (order and repeats do not matter), so a stored result
// from a different candidate set (the family gained or lost tilings) is never used. `salt`
// folds in anything else whose change must invalidate stored results, e.g. the family
// template's content hash. 32 hex digits.
std::string candidate_set_hash(const std::vector<Tiling>& candidates, std::string_view salt = {});

}  // namespace flashjit::autotune
