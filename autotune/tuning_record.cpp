#include "autotune/tuning_record.hpp"

#include <ctime>

namespace flashjit::autotune {

const char* candidate_status_name(CandidateStatus status) {
  switch (status) {
    case CandidateStatus::timed: return "timed";
    case CandidateStatus::pruned: return "pruned";
    case CandidateStatus::failed: return "failed";
    case CandidateStatus::not_reached: return "not_reached";
  }
  return "?";
}

std::optional<CandidateStatus> parse_candidate_status(const std::string& name) {
  for (CandidateStatus s : {CandidateStatus::timed, CandidateStatus::pruned, CandidateStatus::failed,
                            CandidateStatus::not_reached})
    if (name == candidate_status_name(s)) return s;
  return std::nullopt;
}

std::optional<double> TuningRecord::speedup() const {
  if (!default_ms || ms <= 0) return std::nullopt;
  return *default_ms / ms;
}

std::string utc_timestamp_now() {
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buf;
}

}  // namespace flashjit::autotune
