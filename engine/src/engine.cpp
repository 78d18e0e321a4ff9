// The engine: validates a call, finds its plan (variant and loaded kernel) and launches it.
// A plan is found once per (context, tuning bucket); every later call is validation, two
// driver queries, one hash lookup and the launch.
#include "flashjit/flashjit.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <limits>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

#include "autotune/autotuner.hpp"
#include "autotune/problem_bucket.hpp"
#include "base/printable.hpp"
#include "device_context.hpp"
#include "kernel_loader.hpp"
#include "cudalib/nvrtc_library.hpp"
#include "metadata_check.hpp"
#include "problem.hpp"
#include "template_store.hpp"
#include "tuning_session.hpp"
#include "workspace_pool.hpp"

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

// What a plan is found by on the dispatch path: the context, the family and the tuning bucket
// (semantics and size buckets), with no strings to build or hash per call.
struct PlanKey {
  CUcontext ctx;
  const KernelFamily* family;
  Semantics semantics;
  int seq_q_bucket, seq_k_bucket, batch_heads_bucket;
  bool operator==(const PlanKey& o) const {
    return ctx == o.ctx && family == o.family && seq_q_bucket == o.seq_q_bucket && seq_k_bucket == o.seq_k_bucket &&
           batch_heads_bucket == o.batch_heads_bucket && semantics == o.semantics;
  }
  autotune::TuningKey bucket() const {
    return {family->name(), semantics, seq_q_bucket, seq_k_bucket, batch_heads_bucket};
  }
};
struct PlanKeyHash {
  std::size_t operator()(const PlanKey& k) const {
    constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;  // Fibonacci hashing
    std::uint64_t h = k.semantics.fast_hash();
    for (std::uint64_t x : {std::uint64_t(reinterpret_cast<std::uintptr_t>(k.ctx)),
                            std::uint64_t(reinterpret_cast<std::uintptr_t>(k.family)), std::uint64_t(k.seq_q_bucket),
                            std::uint64_t(k.seq_k_bucket), std::uint64_t(k.batch_heads_bucket)})
      h = (h ^ x) * kGolden + (h >> 29);
    return std::size_t(h);
  }
};
// What a call needs once its plan is known: the family, the variant and its loaded kernels.
struct Plan {
  const KernelFamily* family = nullptr;
  KernelVariant variant;
  LoadedModule module;
};

}  // namespace

class Engine::Impl {
 public:
  explicit Impl(EngineOptions o)
      : options_(with_env(std::move(o))),
        binaries_(options_.disk_cache, options_.cache_dir, options_.log),
        loader_(binaries_, options_.log),
        workspaces_(workspace_device()) {
    // NVRTC's version is part of every disk-cache key and opening it costs ~10 ms: start now
    // so the first call does not pay it.
    nvrtc_preload_ = std::async(std::launch::async, [] { (void)NvrtcLibrary::get(); });
  }

  Result<PlanReport> default_plan(const Semantics& s, const Arch& arch, const ProblemShape* shape) const {
    auto choice = choose_family(arch, s, shape);
    if (!choice.ok()) return std::move(choice).error();
    const KernelFamily& f = *choice->family;
    return PlanReport{{f.name(), s, f.default_tiling(arch, s, shape)}, choice->why};
  }

  Result<CompileReport> compile(const KernelVariant& v, const Arch& arch) {
    auto bin = loader_.binary(v, arch);
    if (!bin.ok()) return std::move(bin).error();
    CompileReport r;
    r.variant = v;
    r.arch = arch.name();
    r.cubin_bytes = bin->cubin.size();
    r.compile_ms = bin->compile_ms;
    r.from_disk = bin->origin == BinaryOrigin::disk;
    r.nvrtc_log = bin->nvrtc_log;
    r.disk_cache_problem = bin->disk_cache_problem;
    return r;
  }

  Status forward(const AttentionArgs& args, CUstream stream, const Tiling* tiling) {
    auto problem_r = validate_problem(args);
    if (!problem_r.ok()) return std::move(problem_r).error();
    const AttentionProblem& problem = problem_r.value();
    if (problem.empty) return {};

    auto drv_r = DriverLibrary::get();
    if (!drv_r.ok()) return std::move(drv_r).error();
    const DriverLibrary& drv = *drv_r.value();
    CUcontext ctx = nullptr;
    FJ_CU(drv, cuCtxGetCurrent(&ctx));
    if (!ctx)
      return Error(Code::invalid_argument,
                   "no current CUDA context on this thread: make one current (cudaSetDevice / cuCtxSetCurrent) before calling");
    if (stream) {
      CUcontext stream_ctx = nullptr;
      FJ_CU(drv, cuStreamGetCtx(stream, &stream_ctx));
      if (stream_ctx != ctx)
        return Error(Code::invalid_argument, "stream belongs to another CUDA context than the calling thread's current one");
    }
    auto info_r = contexts_.info(drv, ctx);
    if (!info_r.ok()) return std::move(info_r).error();
    const DeviceContextInfo& info = *info_r.value();
    if (args.check_metadata || *options_.check_metadata) FJ_TRY(check_device_metadata(drv, problem, stream));

    if (tiling) {  // explicit tiling: benchmarks and tuning tools
      const KernelFamily* family = tiling->table ? find_family(tiling->table->family) : nullptr;
      if (!family) return Error(Code::invalid_argument, "forward_with_tiling: the tiling names no kernel family");
      if (const char* why_not = family->refusal(info.arch, problem.semantics, &problem.shape))
        return Error(Code::unsupported, std::string(family->name()) + " cannot run this problem: " + why_not);
      FJ_TRY(family->check_tiling(problem.semantics, *tiling));
      Plan p{family, {family->name(), problem.semantics, *tiling}, {}};
      auto m = loader_.get(drv, ctx, info, p.variant);
      if (!m.ok()) return std::move(m).error();
      p.module = m.value();
      return run(drv, ctx, info, p, problem, stream);
    }

    const KernelFamily* family = pick_family(info.arch, problem.semantics, &problem.shape);
    if (!family) return choose_family(info.arch, problem.semantics, &problem.shape).error();
    const ProblemShape& shape = problem.shape;
    const PlanKey key{ctx, family, problem.semantics, autotune::size_bucket(shape.seqlen_q),
                      autotune::size_bucket(shape.seqlen_k), autotune::size_bucket(shape.batch * shape.heads_q)};
    {
      std::shared_lock lock(plans_mu_);
      if (auto it = plans_.find(key); it != plans_.end()) {
        plan_hits_.fetch_add(1, std::memory_order_relaxed);
        return run(drv, ctx, info, it->second, problem, stream);
      }
    }
    auto plan = make_plan(drv, ctx, info, problem, key.bucket(), stream);
    if (!plan.ok()) return std::move(plan).error();
    {
      std::unique_lock lock(plans_mu_);
      plans_.emplace(key, plan.value());
    }
    return run(drv, ctx, info, plan.value(), problem, stream);
  }

  Result<TuneReport> tune(const TuneRequest& req) {
    FJ_TRY(req.semantics.check());
    auto drv_r = DriverLibrary::get();
    if (!drv_r.ok()) return std::move(drv_r).error();
    const DriverLibrary& drv = *drv_r.value();
    CUcontext ctx = nullptr;
    FJ_CU(drv, cuCtxGetCurrent(&ctx));
    if (!ctx) return Error(Code::invalid_argument, "tune needs a current CUDA context (the GPU to tune on)");
    auto info_r = contexts_.info(drv, ctx);
    if (!info_r.ok()) return std::move(info_r).error();
    const DeviceContextInfo info = *info_r.value();
    const ProblemShape shape{1, req.seqlen_q, req.seqlen_k, req.batch_x_heads, req.batch_x_heads};
    auto choice = choose_family(info.arch, req.semantics, &shape);
    if (!choice.ok()) return std::move(choice).error();
    const KernelFamily& family = *choice->family;
    const auto key = autotune::make_tuning_key(family.name(), req.semantics, req.seqlen_q, req.seqlen_k, req.batch_x_heads);

    autotune::AutotunerOptions ao = autotuner_options(drv, info, autotune::TuneMode::on_first_use);
    if (req.progress)
      ao.progress = [&](std::size_t done, std::size_t total, const Tiling& t, double s) { req.progress(done, total, t.name(), s); };
    auto tuner = autotune::Autotuner::create(std::move(ao));
    if (!tuner.ok()) return std::move(tuner).error();
    const auto candidates = family.candidate_tilings(info.arch, req.semantics);
    const Tiling def = family.default_tiling(info.arch, req.semantics, &shape);
    LazyTuningSession session(drv, ctx, info, loader_, key, candidates, options_.log);
    const autotune::Measure measure = session.measure();
    const autotune::Prune prune = session.prune();
    const auto t0 = std::chrono::steady_clock::now();
    auto record = tuner->tune_key(key, candidates, def, measure, prune,
                                  req.retune ? autotune::Autotuner::Retune::always : autotune::Autotuner::Retune::if_missing);
    if (!record.ok()) return std::move(record).error().with("tuning_key", key.to_string());
    // Forget this context's plans and runtime tuner so the new result is used from now on.
    {
      std::unique_lock lock(plans_mu_);
      for (auto it = plans_.begin(); it != plans_.end();) it = it->first.ctx == ctx ? plans_.erase(it) : std::next(it);
    }
    {
      std::lock_guard lock(tuners_mu_);
      tuners_.erase(ctx);
    }
    TuneReport r;
    r.key = key.to_string();
    r.chosen = {family.name(), req.semantics, record->tiling};
    r.ms = record->ms;
    r.default_tiling = record->default_tiling;
    r.default_ms = record->default_ms;
    const ProblemShape rep = autotune::representative_problem(key);
    r.flops = 2.0 * rep.batch * rep.heads_q * double(rep.seqlen_q) * double(rep.seqlen_k) *
              (req.semantics.head_dim_qk + req.semantics.head_dim_v) *
              (req.semantics.mask == Mask::causal && rep.seqlen_q == rep.seqlen_k ? 0.5 : 1.0);
    for (const auto& c : record->candidates)
      r.candidates.push_back({c.tiling.name(), autotune::candidate_status_name(c.status), c.ms, c.reason});
    r.reused = !session.started();
    r.seconds = r.reused ? 0 : std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.store_path = tuner->store_path();
    return r;
  }

  EngineStats stats() const {
    EngineStats s;
    const LoaderStats l = loader_.stats();
    s.launches = launches_.load();
    s.module_loads = l.loads;
    s.disk_hits = l.disk_hits;
    s.compiles = l.compiles;
    s.compile_ms = l.compile_ms;
    s.plan_hits = plan_hits_.load();
    s.tunes = tunes_.load();
    s.workspace_buffers = workspaces_.buffers();
    s.workspace_bytes = workspaces_.bytes_held();
    return s;
  }

 private:
  static EngineOptions with_env(EngineOptions o) {
    if (!o.log) {
      const char* env = std::getenv("FLASHJIT_LOG");
      if (env && *env && std::string(env) != "0")
        o.log = [](const std::string& m) { std::fprintf(stderr, "[flashjit] %s\n", m.c_str()); };
    }
    if (const char* d = std::getenv("FLASHJIT_DISK_CACHE"); d && std::string(d) == "0") o.disk_cache = false;
    if (!o.check_metadata) {
      const char* c = std::getenv("FLASHJIT_CHECK");
      o.check_metadata = c && std::string(c) == "1";
    }
    return o;
  }

  // The driver calls of the workspace pool, through the library loaded at first use.
  static WorkspaceDevice workspace_device() {
    WorkspaceDevice d;
    d.allocate = [](std::size_t bytes) -> Result<CUdeviceptr> {
      auto drv = DriverLibrary::get();
      if (!drv.ok()) return std::move(drv).error();
      CUdeviceptr p = 0;
      FJ_CU(*drv.value(), cuMemAlloc(&p, bytes));
      if (const CUresult r = drv.value()->cuMemsetD8(p, 0, bytes); r != CUDA_SUCCESS) {
        drv.value()->cuMemFree(p);
        return drv.value()->error(r, "zeroing a new workspace");
      }
      return p;
    };
    d.free = [](CUdeviceptr p) {
      if (auto drv = DriverLibrary::get(); drv.ok()) drv.value()->cuMemFree(p);
    };
    d.synchronize = [](CUstream stream) -> Status {
      auto drv = DriverLibrary::get();
      if (!drv.ok()) return std::move(drv).error();
      FJ_CU(*drv.value(), cuStreamSynchronize(stream));
      return {};
    };
    d.zero_async = [](CUdeviceptr p, std::size_t bytes, CUstream stream) -> Status {
      auto drv = DriverLibrary::get();
      if (!drv.ok()) return std::move(drv).error();
      FJ_CU(*drv.value(), cuMemsetD8Async(p, 0, bytes, stream));
      return {};
    };
    d.capturing = [](CUstream stream) -> Result<bool> {
      auto drv = DriverLibrary::get();
      if (!drv.ok()) return std::move(drv).error();
      CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
      FJ_CU(*drv.value(), cuStreamIsCapturing(stream, &st));
      return st != CU_STREAM_CAPTURE_STATUS_NONE;
    };
    return d;
  }

  // One call's launches: the family's plan over the workspace it asks for.
  Status run(const DriverLibrary& drv, CUcontext ctx, const DeviceContextInfo& info, const Plan& plan,
             const AttentionProblem& problem, CUstream stream) {
    CUdeviceptr workspace = 0;
    if (const KernelFamily::Workspace need = plan.family->workspace(problem, plan.variant, info); need.bytes) {
      auto w = workspaces_.get(ctx, stream, need.bytes, need.zeroed);
      if (!w.ok()) return std::move(w).error().with("variant", plan.variant.name());
      workspace = w.value();
    }
    LaunchPlan launches;
    FJ_TRY(plan.family->plan(problem, plan.variant, info, workspace, launches));
    FJ_TRY(KernelLoader::launch(drv, plan.module, launches, stream));
    launches_.fetch_add(1, std::memory_order_relaxed);
    return {};
  }

  autotune::AutotunerOptions autotuner_options(const DriverLibrary& drv, const DeviceContextInfo& info,
                                               std::optional<autotune::TuneMode> mode) const {
    autotune::AutotunerOptions ao;
    ao.mode = mode;
    ao.root = options_.cache_dir;
    ao.device_name = info.name;
    ao.arch = info.arch.name();
    auto nv = NvrtcLibrary::get();
    ao.nvrtc_version = nv.ok() ? nv.value()->version : "none";
    ao.driver_version = std::to_string(drv.driver_version);
    // Results timed on other kernel code must not be reused.
    ao.candidate_salt = TemplateStore::instance().content_hash();
    ao.logger = options_.log;
    ao.knob_tables = family_knobs;
    return ao;
  }

  // The runtime tuner of a context, created on first need.
  Result<autotune::Autotuner*> tuner_for(const DriverLibrary& drv, CUcontext ctx, const DeviceContextInfo& info) {
    std::lock_guard lock(tuners_mu_);
    if (auto it = tuners_.find(ctx); it != tuners_.end()) return it->second.get();
    std::optional<autotune::TuneMode> mode;
    if (options_.tune_mode) mode = to_internal(*options_.tune_mode);
    auto t = autotune::Autotuner::create(autotuner_options(drv, info, mode));
    if (!t.ok()) return std::move(t).error();
    auto& slot = tuners_[ctx];
    slot = std::make_unique<autotune::Autotuner>(std::move(t).value());
    return slot.get();
  }

  // A new plan: the family (explained in the log), the tiling (tuned, stored or default) and
  // the loaded module. Never during a stream capture: compiling, loading and tuning are not
  // capturable, and the caller's graph must not be broken by them.
  Result<Plan> make_plan(const DriverLibrary& drv, CUcontext ctx, const DeviceContextInfo& info,
                         const AttentionProblem& problem, const autotune::TuningKey& bucket, CUstream stream) {
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    FJ_CU(drv, cuStreamIsCapturing(stream, &capture));
    if (capture != CU_STREAM_CAPTURE_STATUS_NONE)
      return Error(Code::invalid_argument,
                   "the first call of a new variant compiles and loads it, which cannot happen while its stream is "
                   "being captured into a CUDA graph: call forward() once with these arguments before capturing")
          .with("variant", bucket.to_string());
    auto choice = choose_family(info.arch, problem.semantics, &problem.shape);
    if (!choice.ok()) return std::move(choice).error();
    const KernelFamily& family = *choice->family;
    if (options_.log) options_.log("plan " + bucket.to_string() + ": " + choice->why);
    const Tiling def = family.default_tiling(info.arch, bucket.semantics, &problem.shape);
    Tiling tiling = def;
    if (!options_.tune_mode || *options_.tune_mode != TuneMode::off) {
      auto tuner = tuner_for(drv, ctx, info);
      if (tuner.ok() && tuner.value()->mode() != autotune::TuneMode::off) {
        const auto candidates = family.candidate_tilings(info.arch, bucket.semantics);
        LazyTuningSession session(drv, ctx, info, loader_, bucket, candidates, options_.log);
        auto chosen = tuner.value()->choose(bucket, candidates, def, session.measure(), session.prune());
        if (session.started()) tunes_.fetch_add(1, std::memory_order_relaxed);
        if (chosen.ok()) tiling = chosen.value();
      } else if (!tuner.ok() && options_.log) {
        options_.log("tuning results unavailable, using defaults: " + tuner.error().to_string());
      }
    }
    Plan p{&family, {family.name(), bucket.semantics, tiling}, {}};
    auto m = loader_.get(drv, ctx, info, p.variant);
    if (!m.ok()) return std::move(m).error();
    p.module = m.value();
    return p;
  }

  EngineOptions options_;
  KernelBinaries binaries_;
  KernelLoader loader_;
  DeviceContexts contexts_;
  std::future<void> nvrtc_preload_;
  std::shared_mutex plans_mu_;
  std::unordered_map<PlanKey, Plan, PlanKeyHash> plans_;
  std::mutex tuners_mu_;
  std::unordered_map<CUcontext, std::unique_ptr<autotune::Autotuner>> tuners_;
  WorkspacePool workspaces_;
  std::atomic<std::uint64_t> launches_{0}, plan_hits_{0}, tunes_{0};
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::create(EngineOptions options) {
  return std::unique_ptr<Engine>(new Engine(std::make_unique<Impl>(std::move(options))));
}

Status Engine::forward(const AttentionArgs& args, CUstream stream) { return impl_->forward(args, stream, nullptr); }

Status Engine::forward_with_tiling(const AttentionArgs& args, const Tiling& tiling, CUstream stream) {
  return impl_->forward(args, stream, &tiling);
}

Result<TuneReport> Engine::tune(const TuneRequest& request) { return impl_->tune(request); }

Result<PlanReport> Engine::plan(const AttentionArgs& args, const std::string& arch) const {
  auto a = Arch::parse(arch);
  if (!a.ok()) return std::move(a).error();
  auto p = validate_problem(args);
  if (!p.ok()) return std::move(p).error();
  return impl_->default_plan(p->semantics, a.value(), &p->shape);
}

Result<CompileReport> Engine::compile(const KernelVariant& v, const std::string& arch) const {
  auto a = Arch::parse(arch);
  if (!a.ok()) return std::move(a).error();
  return impl_->compile(v, a.value());
}

Result<KernelVariant> Engine::default_variant(const Semantics& s, const std::string& arch) const {
  auto a = Arch::parse(arch);
  if (!a.ok()) return std::move(a).error();
  FJ_TRY(s.check());
  auto p = impl_->default_plan(s, a.value(), nullptr);
  if (!p.ok()) return std::move(p).error();
  return p->variant;
}

EngineStats Engine::stats() const { return impl_->stats(); }

}  // namespace flashjit
