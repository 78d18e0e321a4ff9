#include "autotune/tuner.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <set>

#include "base/content_hash.hpp"
#include "base/printable.hpp"

namespace flashjit::autotune {

namespace {

double steady_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string format_ms(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f ms", ms);
  return buf;
}

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

// The default first, then the candidates in their order, each tiling once.
std::vector<Tiling> measurement_order(const std::vector<Tiling>& candidates, const Tiling& default_tiling) {
  std::vector<Tiling> order{default_tiling};
  for (const Tiling& t : candidates)
    if (std::find(order.begin(), order.end(), t) == order.end()) order.push_back(t);
  return order;
}

}  // namespace

std::optional<double> TuneOutcome::speedup() const {
  if (!default_ms || best_ms <= 0) return std::nullopt;
  return *default_ms / best_ms;
}

TuningRecord TuneOutcome::to_record(std::string hash) const {
  TuningRecord r;
  r.tiling = best;
  r.ms = best_ms;
  r.default_tiling = default_tiling;
  r.default_ms = default_ms;
  r.candidates = results;
  r.candidate_set_hash = std::move(hash);
  r.partial = partial;
  r.tune_seconds = elapsed_s;
  r.tuned_at = utc_timestamp_now();
  return r;
}

Result<TuneOutcome> tune(const std::vector<Tiling>& candidates, const Tiling& default_tiling,
                         const Measure& measure, const Prune& prune, const Progress& progress,
                         const Logger& logger, const TuneOptions& options) {
  if (!measure) return Error(Code::invalid_argument, "tune: the measure callback is empty");
  if (options.time_budget_s && !(*options.time_budget_s >= 0))
    return Error(Code::invalid_argument, "tune: the time budget must be a number of seconds >= 0");
  const auto clock = options.clock_s ? options.clock_s : std::function<double()>(steady_seconds);
  auto log = [&](const std::string& line) {
    if (logger) logger(line);
  };

  const std::vector<Tiling> order = measurement_order(candidates, default_tiling);
  const double start = clock();
  TuneOutcome out;
  out.default_tiling = default_tiling;
  std::optional<std::size_t> best;  // index into out.results

  for (std::size_t i = 0; i < order.size(); ++i) {
    const Tiling& t = order[i];
    const double elapsed = clock() - start;
    CandidateResult r;
    r.tiling = t;
    // The default (i == 0) is never cut by the budget: it is the baseline and the fallback.
    if (i > 0 && options.time_budget_s && elapsed >= *options.time_budget_s) {
      if (!out.partial)
        log("tune: time budget of " + format_seconds(*options.time_budget_s) + " ran out after " +
            std::to_string(i) + " of " + std::to_string(order.size()) + " tilings; keeping the best so far");
      out.partial = true;
      r.status = CandidateStatus::not_reached;
      r.reason = "time budget of " + format_seconds(*options.time_budget_s) + " ran out";
      out.results.push_back(std::move(r));
      continue;
    }
    if (progress) progress(i, order.size(), t, elapsed);

    if (std::optional<std::string> why = prune ? prune(t) : std::nullopt) {
      r.status = CandidateStatus::pruned;
      r.reason = std::move(*why);
      log("tune: " + t.name() + " pruned: " + r.reason);
    } else if (Result<double> ms = measure(t); !ms) {
      r.status = CandidateStatus::failed;
      // Code and message only: details such as a full NVRTC log would swamp the store.
      r.reason = std::string(code_name(ms.error().code())) + ": " + ms.error().message();
      log("tune: " + t.name() + " failed: " + r.reason);
    } else if (!std::isfinite(*ms) || !(*ms > 0)) {
      r.status = CandidateStatus::failed;
      r.reason = "measure returned " + printable(*ms) + " ms, not a positive time";
      log("tune: " + t.name() + " failed: " + r.reason);
    } else {
      r.status = CandidateStatus::timed;
      r.ms = *ms;
      log("tune: " + t.name() + " " + format_ms(*ms));
      if (i == 0) out.default_ms = *ms;
      // Strictly faster wins, so ties keep the earlier tiling: the default, then family order.
      if (!best || *ms < *out.results[*best].ms) best = out.results.size();
    }
    out.results.push_back(std::move(r));
  }
  out.elapsed_s = clock() - start;

  if (!best) {
    std::string reasons;
    for (const CandidateResult& r : out.results)
      reasons += "\n  " + r.tiling.name() + ": " + candidate_status_name(r.status) + ": " + r.reason;
    Error e(Code::unsupported,
            "tune: none of the " + std::to_string(order.size()) + " tilings could be timed:" + reasons);
    for (const CandidateResult& r : out.results)
      e.with(r.tiling.name(), std::string(candidate_status_name(r.status)) + ": " + r.reason);
    return e;
  }
  // Within the noise margin of the default, the default stays.
  if (out.default_ms && out.results[*best].tiling != default_tiling &&
      *out.results[*best].ms * (1 + options.min_gain) >= *out.default_ms) {
    log("tune: " + out.results[*best].tiling.name() + " (" + format_ms(*out.results[*best].ms) + ") is within " +
        std::to_string(int(options.min_gain * 100 + 0.5)) + "% of the default " + default_tiling.name() + " (" +
        format_ms(*out.default_ms) + "); keeping the default");
    best = 0;
  }
  out.best = out.results[*best].tiling;
  out.best_ms = *out.results[*best].ms;
  if (progress) progress(order.size(), order.size(), out.best, out.elapsed_s);
  std::string summary = "tune: chose " + out.best.name() + " (" + format_ms(out.best_ms) + ")";
  if (auto s = out.speedup()) {
    char buf[48];
    std::snprintf(buf, sizeof buf, ", %.2fx the default ", *s);
    summary += buf + default_tiling.name();
  }
  summary += " after " + format_seconds(out.elapsed_s) + (out.partial ? " (partial)" : "");
  log(summary);
  return out;
}

std::string candidate_set_hash(const std::vector<Tiling>& candidates, std::string_view salt) {
  std::set<std::string> names;  // sorted and unique: the set, not the list, is what counts
  for (const Tiling& t : candidates) names.insert(t.name());
  ContentHasher h;
  h.field("salt", salt);
  h.field("count", static_cast<std::int64_t>(names.size()));
  for (const std::string& n : names) h.field("tiling", n);
  return h.hex();
}

}  // namespace flashjit::autotune
