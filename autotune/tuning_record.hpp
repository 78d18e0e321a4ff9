// What one tuning run found for one key: the winner, the default for comparison, and how every
// candidate fared (so a surprising choice can be explained later from the store alone).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "flashjit/variant.hpp"

namespace flashjit::autotune {

enum class CandidateStatus {
  timed,        // measured; `ms` holds its median time
  pruned,       // skipped before timing (the prune callback gave a reason)
  failed,       // the measure callback failed (compile error, launch failure, bad time)
  not_reached,  // the time budget ran out before its turn
};

const char* candidate_status_name(CandidateStatus status);  // "timed", "pruned", ...
std::optional<CandidateStatus> parse_candidate_status(const std::string& name);

struct CandidateResult {
  Tiling tiling;
  CandidateStatus status = CandidateStatus::timed;
  std::optional<double> ms;  // median milliseconds; set exactly when status is timed
  std::string reason;        // why it was not timed; empty when it was
};

struct TuningRecord {
  Tiling tiling;                     // the winner
  double ms = 0;                     // its median milliseconds
  Tiling default_tiling;             // the family default at tuning time
  std::optional<double> default_ms;  // empty when the default could not be timed
  std::vector<CandidateResult> candidates;  // every tiling considered, the default first
  std::string candidate_set_hash;    // candidate_set_hash() of the tilings searched
  bool partial = false;              // the time budget stopped the run early
  double tune_seconds = 0;           // wall time of the run
  std::string tuned_at;              // UTC, ISO 8601; informational only, never used to judge
  // The tool versions the times were taken under. TuningStore::put stamps them with the store's
  // own; a record is only used under the same versions (a new compiler or driver can change
  // which tiling is fastest).
  std::string nvrtc_version;
  std::string driver_version;

  // default_ms / ms: how much faster the winner is than the default (>= 1 unless the default
  // was skipped); empty when the default was not timed.
  std::optional<double> speedup() const;
};

// The current time as the tuned_at field writes it, e.g. "2025-01-31T12:00:00Z".
std::string utc_timestamp_now();

}  // namespace flashjit::autotune
