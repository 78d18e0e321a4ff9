#include "tune_request.hpp"

#include <chrono>

#include "autotune/problem_bucket.hpp"
#include "tuning_session.hpp"

namespace flashjit {

namespace {

// Backward FLOPs as FlashAttention counts them: 2.5 times the forward's (five GEMMs against two).
constexpr double kBackwardFlopsOverForward = 2.5;

// FLOPs of one attention forward on `shape`: QK^T and PV, halved by a causal mask over a square.
double forward_flops(const Semantics& s, const ProblemShape& shape) {
  const bool half = s.mask == Mask::causal && shape.seqlen_q == shape.seqlen_k;
  return 2.0 * shape.batch * shape.heads_q * double(shape.seqlen_q) * double(shape.seqlen_k) *
         (s.head_dim_qk + s.head_dim_v) * (half ? 0.5 : 1.0);
}

}  // namespace

Result<TuneReport> tune_request(const TuneRequest& req, const CallContext& call, KernelLoader& loader,
                                Planner& planner, const KernelLoader::Log& log) {
  FJ_TRY(req.semantics.check());
  const bool backward = req.pass == Pass::backward;
  // The variant the pass runs: the backward reads the LSE (write_lse off), the forward has no
  // deterministic mode (the catalog's rules, which warmup and validation use too).
  const Semantics sem = backward ? backward_semantics(req.semantics) : forward_semantics(req.semantics);
  const ProblemShape shape{1, req.seqlen_q, req.seqlen_k, req.batch_x_heads, req.batch_x_heads};
  auto choice = choose_family(call.info.arch, sem, &shape, req.pass);
  if (!choice.ok()) return std::move(choice).error();
  const KernelFamily& family = *choice->family;
  const auto key = autotune::make_tuning_key(family.name(), sem, req.seqlen_q, req.seqlen_k, req.batch_x_heads);

  autotune::AutotunerOptions ao = planner.autotuner_options(call, autotune::TuneMode::on_first_use);
  if (req.progress)
    ao.progress = [&](std::size_t done, std::size_t total, const Tiling& t, double s) { req.progress(done, total, t.name(), s); };
  auto tuner = autotune::Autotuner::create(std::move(ao));
  if (!tuner.ok()) return std::move(tuner).error();
  const auto candidates = family.candidate_tilings(call.info.arch, sem);
  const Tiling def = family.default_tiling(call.info.arch, sem, &shape);
  LazyTuningSession session(call.drv, call.ctx, call.info, loader, key, candidates, log);
  const auto t0 = std::chrono::steady_clock::now();
  auto record = tuner->tune_key(key, candidates, def, session.measure(), session.prune(),
                                req.retune ? autotune::Autotuner::Retune::always : autotune::Autotuner::Retune::if_missing);
  if (!record.ok()) return std::move(record).error().with("tuning_key", key.to_string());
  planner.forget(call.ctx);

  TuneReport r;
  r.key = key.to_string();
  r.chosen = {family.name(), sem, record->tiling};
  r.ms = record->ms;
  r.default_tiling = record->default_tiling;
  r.default_ms = record->default_ms;
  r.flops = forward_flops(sem, autotune::representative_problem(key)) * (backward ? kBackwardFlopsOverForward : 1.0);
  for (const auto& c : record->candidates)
    r.candidates.push_back({c.tiling.name(), autotune::candidate_status_name(c.status), c.ms, c.reason});
  r.reused = !session.started();
  r.seconds = r.reused ? 0 : std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.store_path = tuner->store_path();
  return r;
}

}  // namespace flashjit
