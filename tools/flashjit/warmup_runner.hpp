// Compiles warmup jobs on a pool of threads through the engine (and so into its disk cache),
// reporting each start and finish to a progress bar.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "flashjit/flashjit.hpp"
#include "progress_bar.hpp"
#include "warmup_plan.hpp"

namespace flashjit::tools {

struct WarmupResult {
  WarmupJob job;
  bool ok = false;
  bool from_disk = false;   // already cached: nothing was compiled
  double compile_ms = 0;    // NVRTC time; 0 from disk
  double wall_ms = 0;       // the whole step, lookups and stores included
  std::size_t cubin_bytes = 0;
  std::string compiler_log;  // NVRTC's and ptxas's messages of a successful compile (advisories)
  std::string error;        // when !ok: the full error, NVRTC log included
  // Set when the kernel compiled but the disk cache does not hold it (a refused cache folder, a
  // failed store): a failure too, since keeping it there is warmup's whole point.
  std::string disk_cache_problem;
};

struct RunnerOptions {
  int threads = 1;
  // Run after each successful compile that reached the disk cache; a failed Status turns the
  // result into a failure (warmup uses it to confirm the entry file is there).
  std::function<Status(const WarmupJob&)> confirm;
};

// Results in the order of `jobs`.
std::vector<WarmupResult> run_warmup(const Engine& engine, const std::vector<WarmupJob>& jobs,
                                     const RunnerOptions& options, ProgressBar& bar);

// "sm_80 fa2_sm80-f16-d64-v8-m128n128w4s2"
std::string job_label(const WarmupJob& job);

}  // namespace flashjit::tools
