// The piece the engine calls to pick a tiling: the tune mode, the tuning key, the store and the
// tuner put together.
//
//   off           -> the default tiling; nothing is read, nothing is timed
//   offline_only  -> the stored result for the key, else the default; never times anything
//   on_first_use  -> the stored result, else tune the key now (time every candidate), store the
//                    result, and use it
//
// Answers are remembered in memory per key, so after the first call for a key choose() is one
// hash-map lookup under a mutex: no file I/O, no hashing of the candidate list.
//
// Tuning a key happens once: concurrent callers for the same key in this process wait for the
// first; another process tuning the same key holds a per-key flock (<root>/tuning/locks/), and
// we wait for it and then use its result from the store. Tuning runs one at a time per
// Autotuner, because timings taken while another kernel shares the GPU would be wrong; so use
// one Autotuner per device.
//
// Tuning is an optimization: when it fails (no candidate could be timed, the store cannot be
// written or opened), choose() logs why and goes on with the default or the tuned tiling, and
// does not retry that key in this process.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autotune/log.hpp"
#include "autotune/problem_bucket.hpp"
#include "autotune/tune_mode.hpp"
#include "autotune/tuner.hpp"
#include "autotune/tuning_record.hpp"
#include "flashjit/status.hpp"
#include "flashjit/variant.hpp"
#include "base/variant_json.hpp"

namespace flashjit::autotune {

struct AutotunerOptions {
  // Unset means tune_mode_from_env(TuneMode::offline_only): no run-time tuning unless asked for.
  std::optional<TuneMode> mode;
  // Cache root holding tuning/ (unset: cache::resolve_cache_root()).
  std::optional<std::string> root;
  // Identify the store file and which stored results are current (see TuningStore::open).
  std::string device_name;
  std::string arch;  // "sm_90a"
  std::string nvrtc_version;
  std::string driver_version;
  // Folded into every candidate_set_hash (e.g. the kernel templates' content hash), so results
  // timed on other kernel code are not used.
  std::string candidate_salt;
  // Run-time tuning of one key: budget and clock.
  TuneOptions tune;
  // Progress of run-time tuning; may be empty.
  Progress progress;
  // Longest wait for another process tuning the same key; then we tune it ourselves (a duplicate
  // run costs time, never correctness).
  std::chrono::milliseconds key_lock_timeout = std::chrono::minutes(10);
  // Empty: default_logger().
  Logger logger;
  // Each family's knob table, to read stored tilings (the engine's family registry).
  KnobTableLookup knob_tables;
};

struct AutotunerStats {
  std::uint64_t lookups = 0;        // choose() calls
  std::uint64_t hits = 0;           // answered with a tuned result, without tuning in this call
  std::uint64_t defaults = 0;       // answered with the default tiling (off, nothing stored, failure)
  std::uint64_t tunes = 0;          // tuning runs completed (each times every candidate once)
  std::uint64_t tune_failures = 0;  // tuning runs that found no usable tiling
  std::uint64_t waits = 0;          // calls that waited for another thread or process tuning the key
  std::uint64_t store_failures = 0; // results that could not be written to the store (logged)
  double tune_seconds = 0;          // total wall time of tuning runs
};

class Autotuner {
 public:
  // Opens the store unless the mode is off. A store that cannot be opened (unwritable cache, bad
  // arch, no device name) is logged and the autotuner works without it: memory only. Fails
  // only for an options value no mode could use (none today); Result for future checks.
  static Result<Autotuner> create(AutotunerOptions options);

  Autotuner(Autotuner&&) noexcept;
  Autotuner& operator=(Autotuner&&) noexcept;
  ~Autotuner();

  // The tiling to run `key` with, per the mode (see above). `candidates` are the tilings worth
  // timing (KernelFamily::candidate_tilings), `default_tiling` the family's default; measure and
  // prune are used only when tuning. A stored tiling that is neither a candidate nor the
  // default is never returned.
  Result<Tiling> choose(const TuningKey& key, const std::vector<Tiling>& candidates, const Tiling& default_tiling,
                        const Measure& measure, const Prune& prune);

  // The default tiling when choose() would answer it whatever the candidates are — tuning off,
  // or offline with nothing stored or remembered for `key` — counted as a lookup; nullopt when
  // choose() needs the candidates. Lets a caller skip listing dozens of tilings.
  std::optional<Tiling> known_default(const TuningKey& key, const Tiling& default_tiling);

  enum class Retune { if_missing, always };

  // Tunes `key` and stores the result whatever the mode (offline runs; `flashjit-tune`):
  // with Retune::if_missing a current stored result is returned as is, without timing. Holds
  // the same per-key locks as choose(). Fails when no candidate could be timed; a store write
  // failure is logged and counted, and the record returned anyway.
  Result<TuningRecord> tune_key(const TuningKey& key, const std::vector<Tiling>& candidates,
                                const Tiling& default_tiling, const Measure& measure, const Prune& prune,
                                Retune retune = Retune::if_missing);

  TuneMode mode() const;
  bool has_store() const;          // false when running memory only
  std::string store_path() const;  // empty without a store
  AutotunerStats stats() const;

 private:
  struct State;
  explicit Autotuner(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace flashjit::autotune
