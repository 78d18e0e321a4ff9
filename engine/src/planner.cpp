#include "planner.hpp"

#include "autotune/problem_bucket.hpp"
#include "cudalib/nvrtc_library.hpp"
#include "plan_memo.hpp"
#include "template_store.hpp"
#include "tuning_session.hpp"

namespace flashjit {

namespace {

autotune::TuneMode to_internal(TuneMode m) {
  switch (m) {
    case TuneMode::off: return autotune::TuneMode::off;
    case TuneMode::offline: return autotune::TuneMode::offline_only;
    case TuneMode::first_use: return autotune::TuneMode::on_first_use;
  }
  return autotune::TuneMode::offline_only;
}

std::atomic<std::uint64_t> g_next_planner_id{1};

}  // namespace

Planner::Planner(const EngineOptions& options, KernelLoader& loader)
    : id_(g_next_planner_id.fetch_add(1)), options_(options), loader_(loader) {}

Result<const Plan*> Planner::dispatch(const CallContext& call, const AttentionProblem& problem, CUstream stream,
                                      Pass pass) {
  // Read before the lookup: a forget() racing with it then leaves a generation the next call sees as stale.
  const PlanMemo::Key key{id_, generation_.load(std::memory_order_acquire), call.ctx, pass, problem.semantics,
                          problem.shape};
  PlanMemo& memo = PlanMemo::this_thread();
  if (const Plan* known = memo.find(key)) {
    hits_.fetch_add(1, std::memory_order_relaxed);
    return known;
  }
  const KernelFamily* family = pick_family(call.info.arch, problem.semantics, &problem.shape, pass);
  if (!family) return choose_family(call.info.arch, problem.semantics, &problem.shape, pass).error();
  auto plan = get(call, *family, problem, stream);
  if (!plan.ok()) return std::move(plan).error();
  return memo.remember(key, std::move(plan).value());
}

bool Planner::Key::operator==(const Key& o) const {
  return ctx == o.ctx && family == o.family && seq_q_bucket == o.seq_q_bucket && seq_k_bucket == o.seq_k_bucket &&
         batch_heads_bucket == o.batch_heads_bucket && semantics == o.semantics;
}

autotune::TuningKey Planner::Key::bucket() const {
  return {family->name(), semantics, seq_q_bucket, seq_k_bucket, batch_heads_bucket};
}

std::size_t Planner::KeyHash::operator()(const Key& k) const {
  constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;  // Fibonacci hashing
  std::uint64_t h = k.semantics.fast_hash();
  for (std::uint64_t x : {std::uint64_t(reinterpret_cast<std::uintptr_t>(k.ctx)),
                          std::uint64_t(reinterpret_cast<std::uintptr_t>(k.family)), std::uint64_t(k.seq_q_bucket),
                          std::uint64_t(k.seq_k_bucket), std::uint64_t(k.batch_heads_bucket)})
    h = (h ^ x) * kGolden + (h >> 29);
  return std::size_t(h);
}

Result<std::shared_ptr<const Plan>> Planner::get(const CallContext& call, const KernelFamily& family,
                                                 const AttentionProblem& problem, CUstream stream) {
  const ProblemShape& shape = problem.shape;
  const Key key{call.ctx, &family, problem.semantics, autotune::size_bucket(shape.seqlen_q),
                autotune::size_bucket(shape.seqlen_k), autotune::size_bucket(shape.batch * shape.heads_q)};
  {
    std::shared_lock lock(plans_mu_);
    if (auto it = plans_.find(key); it != plans_.end()) {
      hits_.fetch_add(1, std::memory_order_relaxed);
      return it->second;
    }
  }
  auto plan = make(call, key, problem, stream);
  if (!plan.ok()) return plan;
  std::unique_lock lock(plans_mu_);
  return plans_.emplace(key, std::move(plan).value()).first->second;  // a racing thread's plan wins
}

Result<std::shared_ptr<const Plan>> Planner::with_tiling(const CallContext& call, const Tiling& tiling,
                                                         const AttentionProblem& problem, Pass pass) {
  const char* verb = pass == Pass::forward ? "forward_with_tiling" : "backward_with_tiling";
  const KernelFamily* family = tiling.table ? find_family(tiling.table->family) : nullptr;
  if (!family) return Error(Code::invalid_argument, std::string(verb) + ": the tiling names no kernel family");
  if (family->pass() != pass)
    return Error(Code::invalid_argument, std::string(verb) + ": " + family->name() + " is a family of the other pass");
  if (const char* why_not = family->refusal(call.info.arch, problem.semantics, &problem.shape))
    return Error(Code::unsupported, std::string(family->name()) + " cannot run this problem: " + why_not);
  FJ_TRY(family->check_tiling(problem.semantics, tiling));
  auto plan = std::make_shared<Plan>(Plan{family, {family->name(), problem.semantics, tiling}, {}});
  auto m = loader_.get(call.drv, call.ctx, call.info, plan->variant);
  if (!m.ok()) return std::move(m).error();
  plan->module = m.value();
  return std::shared_ptr<const Plan>(std::move(plan));
}

Result<std::shared_ptr<const Plan>> Planner::make(const CallContext& call, const Key& key,
                                                  const AttentionProblem& problem, CUstream stream) {
  const autotune::TuningKey bucket = key.bucket();
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  FJ_CU(call.drv, cuStreamIsCapturing(stream, &capture));
  if (capture != CU_STREAM_CAPTURE_STATUS_NONE)
    return Error(Code::invalid_argument,
                 "the first call of a new variant compiles and loads it, which cannot happen while its stream is "
                 "being captured into a CUDA graph: call forward() once with these arguments before capturing")
        .with("variant", bucket.to_string());
  const KernelFamily& family = *key.family;
  if (options_.log) {  // the same choice the caller made, with each refusal before it spelled out
    auto choice = choose_family(call.info.arch, problem.semantics, &problem.shape, family.pass());
    options_.log("plan " + bucket.to_string() + ": " + (choice.ok() ? choice->why : choice.error().message()));
  }
  auto plan = std::make_shared<Plan>();
  plan->family = &family;
  plan->variant = {family.name(), problem.semantics, choose_tiling(call, family, bucket, problem.shape)};
  auto m = loader_.get(call.drv, call.ctx, call.info, plan->variant);
  if (!m.ok()) return std::move(m).error();
  plan->module = m.value();
  return std::shared_ptr<const Plan>(std::move(plan));
}

// The tuned tiling where one is stored or tuning on first use is on, else the default. The
// candidates (dozens of tilings to check) are listed only when the tuner needs them.
Tiling Planner::choose_tiling(const CallContext& call, const KernelFamily& family, const autotune::TuningKey& bucket,
                              const ProblemShape& shape) {
  const Tiling def = family.default_tiling(call.info.arch, bucket.semantics, &shape);
  if (options_.tune_mode && *options_.tune_mode == TuneMode::off) return def;
  auto tuner = tuner_for(call);
  if (!tuner.ok()) {
    if (options_.log) options_.log("tuning results unavailable, using defaults: " + tuner.error().to_string());
    return def;
  }
  if (auto known = tuner.value()->known_default(bucket, def)) return *known;
  const auto candidates = family.candidate_tilings(call.info.arch, bucket.semantics);
  LazyTuningSession session(call.drv, call.ctx, call.info, loader_, bucket, candidates, options_.log);
  auto chosen = tuner.value()->choose(bucket, candidates, def, session.measure(), session.prune());
  if (session.started()) tunes_.fetch_add(1, std::memory_order_relaxed);
  return chosen.ok() ? chosen.value() : def;
}

autotune::AutotunerOptions Planner::autotuner_options(const CallContext& call,
                                                      std::optional<autotune::TuneMode> mode) const {
  autotune::AutotunerOptions ao;
  ao.mode = mode;
  ao.root = options_.cache_dir;
  ao.device_name = call.info.name;
  ao.arch = call.info.arch.name();
  auto nv = NvrtcLibrary::get();
  ao.nvrtc_version = nv.ok() ? nv.value()->version : "none";
  ao.driver_version = std::to_string(call.drv.driver_version);
  // Results timed on other kernel code must not be reused.
  ao.candidate_salt = TemplateStore::instance().content_hash();
  ao.logger = options_.log;
  ao.knob_tables = family_knobs;
  return ao;
}

// The runtime tuner of a context, created on first need.
Result<autotune::Autotuner*> Planner::tuner_for(const CallContext& call) {
  std::lock_guard lock(tuners_mu_);
  if (auto it = tuners_.find(call.ctx); it != tuners_.end()) return it->second.get();
  std::optional<autotune::TuneMode> mode;
  if (options_.tune_mode) mode = to_internal(*options_.tune_mode);
  auto t = autotune::Autotuner::create(autotuner_options(call, mode));
  if (!t.ok()) return std::move(t).error();
  auto& slot = tuners_[call.ctx];
  slot = std::make_unique<autotune::Autotuner>(std::move(t).value());
  return slot.get();
}

void Planner::forget(CUcontext ctx) {
  {
    std::unique_lock lock(plans_mu_);
    for (auto it = plans_.begin(); it != plans_.end();) it = it->first.ctx == ctx ? plans_.erase(it) : std::next(it);
  }
  {
    std::lock_guard lock(tuners_mu_);
    tuners_.erase(ctx);
  }
  // Last: a dispatch() that read the new generation looks up after the erasures, so what it
  // remembers is a new plan; one that read the old generation remembers under it, and is stale.
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace flashjit
