#include "autotune/tuner.hpp"

#include <doctest/doctest.h>

#include <algorithm>

#include "autotune_test_util.hpp"

using namespace flashjit;
using namespace flashjit::autotune;
using namespace flashjit::autotune::test;

namespace {

const CandidateResult* result_for(const TuneOutcome& o, const Tiling& t) {
  for (const CandidateResult& r : o.results)
    if (r.tiling == t) return &r;
  return nullptr;
}

// Prunes tilings with 8 warps and 128-wide K/V tiles, as a shared-memory check would.
Prune prune_big() {
  return [](const Tiling& t) -> std::optional<std::string> {
    if (t[1] == 128 && t[2] == 8) return std::string("needs 240 KB shared memory");  // block_n, warps
    return std::nullopt;
  };
}

}  // namespace

TEST_CASE("tuner: picks the fastest tiling that could be timed") {
  FakeGpu gpu;
  LogSink log;
  auto o = tune(sample_candidates(), kDefault, gpu.measure(), {}, {}, log.fn());
  REQUIRE_MESSAGE(o.ok(), (o.ok() ? "" : o.error().to_string()));
  CHECK(o->best == T(128, 64, 8, 3));  // m128n128w8s3 would be faster but fails
  CHECK(o->best_ms == doctest::Approx(0.7));
  CHECK(o->default_tiling == kDefault);
  REQUIRE(o->default_ms.has_value());
  CHECK(*o->default_ms == doctest::Approx(1.2));
  CHECK(*o->speedup() == doctest::Approx(1.2 / 0.7));
  CHECK_FALSE(o->partial);

  // Every tiling once (the default is among the candidates), the default first.
  CHECK(gpu.calls() == 6);
  CHECK(o->results.size() == 6);
  CHECK(o->results.front().tiling == kDefault);
  CHECK(gpu.measured().front() == kDefault);

  const CandidateResult* failed = result_for(*o, T(128, 128, 8, 3));
  REQUIRE(failed);
  CHECK(failed->status == CandidateStatus::failed);
  CHECK_FALSE(failed->ms.has_value());
  CHECK(failed->reason.find("too many resources") != std::string::npos);
  CHECK(failed->reason.find("compile_failed") != std::string::npos);
  CHECK(log.contains("m128n128w8s3 failed"));
  CHECK(log.contains("chose m128n64w8s3"));
}

TEST_CASE("tuner: pruned tilings are never measured and say why") {
  FakeGpu gpu;
  LogSink log;
  auto o = tune(sample_candidates(), kDefault, gpu.measure(), prune_big(), {}, log.fn());
  REQUIRE(o.ok());
  auto measured = gpu.measured();
  CHECK(std::find(measured.begin(), measured.end(), T(128, 128, 8, 3)) == measured.end());
  const CandidateResult* pruned = result_for(*o, T(128, 128, 8, 3));
  REQUIRE(pruned);
  CHECK(pruned->status == CandidateStatus::pruned);
  CHECK(pruned->reason == "needs 240 KB shared memory");
  CHECK(log.contains("m128n128w8s3 pruned: needs 240 KB shared memory"));
  CHECK(o->best == T(128, 64, 8, 3));
}

TEST_CASE("tuner: the default is measured even when it is not a candidate, and may win") {
  FakeGpu gpu;
  gpu.set_time(kDefault, 0.3);
  std::vector<Tiling> without_default;
  for (const Tiling& t : sample_candidates())
    if (t != kDefault) without_default.push_back(t);
  auto o = tune(without_default, kDefault, gpu.measure(), {}, {}, {});
  REQUIRE(o.ok());
  CHECK(gpu.measured().front() == kDefault);
  CHECK(gpu.calls() == 6);
  CHECK(o->best == kDefault);
  CHECK(*o->speedup() == doctest::Approx(1.0));
}

TEST_CASE("tuner: duplicates are measured once; ties keep the earlier tiling") {
  FakeGpu gpu;
  gpu.set_time(T(64, 64, 4, 2), 0.7);  // ties with m128n64w8s3, which comes later
  auto c = sample_candidates();
  c.push_back(c[1]);
  c.push_back(kDefault);
  auto o = tune(c, kDefault, gpu.measure(), {}, {}, {});
  REQUIRE(o.ok());
  CHECK(gpu.calls() == 6);
  CHECK(o->best == T(64, 64, 4, 2));
}

TEST_CASE("tuner: a failing or unusable time is a failure, not a winner") {
  FakeGpu gpu;
  gpu.set_time(T(64, 32, 4, 2), 0.0);
  gpu.set_time(T(64, 64, 4, 2), -1.0);
  gpu.set_time(T(128, 128, 4, 2), std::numeric_limits<double>::quiet_NaN());
  gpu.set_time(T(128, 64, 8, 3), std::numeric_limits<double>::infinity());
  auto o = tune(sample_candidates(), kDefault, gpu.measure(), {}, {}, {});
  REQUIRE(o.ok());
  CHECK(o->best == kDefault);
  for (const Tiling& t : {T(64, 32, 4, 2), T(64, 64, 4, 2), T(128, 128, 4, 2), T(128, 64, 8, 3)}) {
    const CandidateResult* r = result_for(*o, t);
    REQUIRE(r);
    CHECK(r->status == CandidateStatus::failed);
    CHECK(r->reason.find("not a positive time") != std::string::npos);
  }
}

TEST_CASE("tuner: all tilings failing or pruned is an error naming each reason") {
  FakeGpu gpu;
  for (const Tiling& t : sample_candidates()) gpu.set_failing(t, "launch failed for " + t.name());
  auto o = tune(sample_candidates(), kDefault, gpu.measure(), prune_big(), {}, {});
  REQUIRE_FALSE(o.ok());
  CHECK(o.error().code() == Code::unsupported);
  const std::string& msg = o.error().message();
  CHECK(msg.find("none of the 6 tilings") != std::string::npos);
  CHECK(msg.find("m128n128w8s3: pruned: needs 240 KB shared memory") != std::string::npos);
  CHECK(msg.find("launch failed for m64n32w4s2") != std::string::npos);
  CHECK(o.error().detail("m128n64w4s2").value().find("failed") == 0);
  CHECK(o.error().detail("m128n128w8s3").value() == "pruned: needs 240 KB shared memory");
}

TEST_CASE("tuner: the default failing leaves no speed-up but still tunes") {
  FakeGpu gpu;
  gpu.set_failing(kDefault, "out of registers");
  auto o = tune(sample_candidates(), kDefault, gpu.measure(), {}, {}, {});
  REQUIRE(o.ok());
  CHECK_FALSE(o->default_ms.has_value());
  CHECK_FALSE(o->speedup().has_value());
  CHECK(o->best == T(128, 64, 8, 3));
}

TEST_CASE("tuner: progress reports each tiling and a final call with the winner") {
  FakeGpu gpu;
  std::vector<std::pair<std::size_t, Tiling>> seen;
  std::size_t total_seen = 0;
  Progress progress = [&](std::size_t done, std::size_t total, const Tiling& t, double elapsed) {
    seen.emplace_back(done, t);
    total_seen = total;
    CHECK(elapsed >= 0);
  };
  auto o = tune(sample_candidates(), kDefault, gpu.measure(), {}, progress, {});
  REQUIRE(o.ok());
  REQUIRE(seen.size() == 7);
  CHECK(total_seen == 6);
  CHECK(seen[0] == std::make_pair(std::size_t(0), kDefault));
  for (std::size_t i = 0; i < 6; ++i) CHECK(seen[i].first == i);
  CHECK(seen[6] == std::make_pair(std::size_t(6), T(128, 64, 8, 3)));
}

TEST_CASE("tuner: a time budget stops early, keeps the best so far and marks the run partial") {
  FakeGpu gpu;
  double now = 0;
  gpu.on_measure = [&](const Tiling&) { now += 10; };  // each timing takes 10 fake seconds
  TuneOptions opt;
  opt.time_budget_s = 25;
  opt.clock_s = [&] { return now; };
  LogSink log;
  auto o = tune(sample_candidates(), kDefault, gpu.measure(), {}, {}, log.fn(), opt);
  REQUIRE(o.ok());
  // default (t=0), m64n32w4s2 (t=10), m64n64w4s2 (t=20); at t=30 the budget is spent.
  CHECK(gpu.calls() == 3);
  CHECK(o->partial);
  CHECK(o->best == kDefault);  // 1.2 ms beats 2.0 and 1.5
  CHECK(o->results.size() == 6);
  std::size_t not_reached = 0;
  for (const CandidateResult& r : o->results)
    if (r.status == CandidateStatus::not_reached) {
      ++not_reached;
      CHECK(r.reason.find("time budget") != std::string::npos);
    }
  CHECK(not_reached == 3);
  CHECK(log.count("time budget") == 1);
  CHECK(o->to_record("h").partial);
}

TEST_CASE("tuner: a zero budget still times the default") {
  FakeGpu gpu;
  TuneOptions opt;
  opt.time_budget_s = 0;
  auto o = tune(sample_candidates(), kDefault, gpu.measure(), {}, {}, {}, opt);
  REQUIRE(o.ok());
  CHECK(gpu.calls() == 1);
  CHECK(o->best == kDefault);
  CHECK(o->partial);
}

TEST_CASE("tuner: bad arguments") {
  CHECK(tune(sample_candidates(), kDefault, Measure{}, {}, {}, {}).error().code() == Code::invalid_argument);
  FakeGpu gpu;
  TuneOptions opt;
  opt.time_budget_s = -1;
  CHECK(tune(sample_candidates(), kDefault, gpu.measure(), {}, {}, {}, opt).error().code() == Code::invalid_argument);
  CHECK(gpu.calls() == 0);
}

TEST_CASE("tuner: the candidate-set hash depends on the set only, and on the salt") {
  auto c = sample_candidates();
  const std::string h = candidate_set_hash(c);
  CHECK(h.size() == 32);
  auto reversed = c;
  std::reverse(reversed.begin(), reversed.end());
  reversed.push_back(c[0]);
  CHECK(candidate_set_hash(reversed) == h);
  auto fewer = c;
  fewer.pop_back();
  CHECK(candidate_set_hash(fewer) != h);
  auto more = c;
  more.push_back(T(64, 128, 4, 3));
  CHECK(candidate_set_hash(more) != h);
  CHECK(candidate_set_hash(c, "template v2") != h);
  CHECK(candidate_set_hash(c, "template v2") == candidate_set_hash(c, "template v2"));
}

TEST_CASE("tuner: an outcome becomes a record") {
  FakeGpu gpu;
  auto o = tune(sample_candidates(), kDefault, gpu.measure(), {}, {}, {});
  REQUIRE(o.ok());
  TuningRecord r = o->to_record("abc");
  CHECK(r.tiling == o->best);
  CHECK(r.ms == o->best_ms);
  CHECK(r.default_tiling == kDefault);
  CHECK(r.default_ms == o->default_ms);
  CHECK(r.candidates.size() == o->results.size());
  CHECK(r.candidate_set_hash == "abc");
  CHECK(r.tuned_at.size() == 20);  // 2025-01-31T12:00:00Z
  CHECK(r.tuned_at.back() == 'Z');
  CHECK(*r.speedup() == doctest::Approx(*o->speedup()));
}

TEST_CASE("tuner: a candidate must beat the default by more than the noise margin to replace it") {
  const Tiling other = T(128, 64, 8, 3);
  // Plain variables, not a structured binding: clang's C++17 refuses to capture those in INFO.
  for (const auto& run : {std::pair<double, bool>{0.985, false}, {0.97, true}}) {
    const double other_ms = run.first;
    const bool wins = run.second;
    FakeGpu gpu;
    for (const Tiling& t : sample_candidates()) gpu.set_time(t, 2.0);
    gpu.set_time(kDefault, 1.0);
    gpu.set_time(other, other_ms);
    LogSink log;
    auto o = tune(sample_candidates(), kDefault, gpu.measure(), {}, {}, log.fn());
    REQUIRE(o.ok());
    INFO(other_ms);
    CHECK(o->best == (wins ? other : kDefault));
    CHECK(o->best_ms == doctest::Approx(wins ? other_ms : 1.0));
    CHECK(log.contains("keeping the default") == !wins);
  }
}
