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
#include "device_context.hpp"
#include "kernel_loader.hpp"
#include "nvrtc_library.hpp"
#include "problem.hpp"
#include "template_store.hpp"
#include "tuning_session.hpp"

namespace flashjit {

namespace {

// a * b, or int64's largest value when the product does not fit: such a stride makes
// validation refuse the view (its extent exceeds any limit) instead of wrapping to one that fits.
std::int64_t stride_product(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<std::int64_t>::max() : r;
}

}  // namespace

TensorView TensorView::bshd(const void* data, DType dtype, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.shape[0] = b, v.shape[1] = s, v.shape[2] = h, v.shape[3] = d;
  v.stride[3] = 1, v.stride[2] = d, v.stride[1] = stride_product(h, d), v.stride[0] = stride_product(s, v.stride[1]);
  return v;
}

TensorView TensorView::bhsd(const void* data, DType dtype, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.shape[0] = b, v.shape[1] = s, v.shape[2] = h, v.shape[3] = d;
  v.stride[3] = 1, v.stride[1] = d, v.stride[2] = stride_product(s, d), v.stride[0] = stride_product(h, v.stride[2]);
  return v;
}

LseView LseView::contiguous(float* data, std::int64_t b, std::int64_t h, std::int64_t s) {
  LseView l;
  l.data = data;
  l.shape[0] = b, l.shape[1] = h, l.shape[2] = s;
  l.stride[2] = 1, l.stride[1] = s, l.stride[0] = stride_product(h, s);
  return l;
}

std::string version() {
  std::string v = "flashjit 0.1.0";
  if (auto nv = NvrtcLibrary::get(); nv.ok()) v += " (NVRTC " + nv.value()->version + ")";
  return v;
}

namespace {

autotune::TuneMode to_internal(TuneMode m) {
  switch (m) {
    case TuneMode::off: return autotune::TuneMode::off;
    case TuneMode::offline: return autotune::TuneMode::offline_only;
    case TuneMode::first_use: return autotune::TuneMode::on_first_use;
  }
  return autotune::TuneMode::offline_only;
}

struct PlanKey {
  CUcontext ctx;
  autotune::TuningKey bucket;
  bool operator==(const PlanKey& o) const { return ctx == o.ctx && bucket == o.bucket; }
};
struct PlanKeyHash {
  std::size_t operator()(const PlanKey& k) const {
    return autotune::TuningKeyHash{}(k.bucket) ^ (std::hash<const void*>{}(k.ctx) * 0x9E3779B97F4A7C15ull);
  }
};
struct Plan {
  KernelVariant variant;
  LoadedKernel kernel;
};

}  // namespace

class Engine::Impl {
 public:
  explicit Impl(EngineOptions o)
      : options_(with_env(std::move(o))),
        binaries_(options_.disk_cache, options_.cache_dir, options_.log),
        loader_(binaries_, options_.log) {
    // NVRTC's version is part of every disk-cache key and opening it costs ~10 ms: start now
    // so the first call does not pay it.
    nvrtc_preload_ = std::async(std::launch::async, [] { (void)NvrtcLibrary::get(); });
  }

  Result<KernelVariant> default_variant(const Semantics& s, const Arch& arch) const {
    auto family = choose_family(arch, s);
    if (!family.ok()) return std::move(family).error();
    return KernelVariant{family.value()->name(), s, family.value()->default_tiling(arch, s)};
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
    return r;
  }

  Status forward(const AttentionArgs& args, CUstream stream, const Tiling* tiling) {
    auto problem_r = validate_problem(args);
    if (!problem_r.ok()) return std::move(problem_r).error();
    const ValidatedProblem& problem = problem_r.value();
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
    auto family_r = choose_family(info.arch, problem.semantics);
    if (!family_r.ok()) return std::move(family_r).error();
    const KernelFamily& family = *family_r.value();

    if (tiling) {  // explicit tiling: benchmarks and tuning tools
      FJ_TRY(family.check_tiling(problem.semantics, *tiling));
      const KernelVariant v{family.name(), problem.semantics, *tiling};
      auto k = loader_.get(drv, ctx, info, v);
      if (!k.ok()) return std::move(k).error();
      return launch(drv, k.value(), family.grid(problem.shape, v.semantics, v.tiling), problem, stream);
    }

    PlanKey key{ctx, autotune::make_tuning_key(family.name(), problem.semantics, problem.shape.seqlen_q,
                                               problem.shape.seqlen_k, problem.shape.batch * problem.shape.heads_q)};
    {
      std::shared_lock lock(plans_mu_);
      if (auto it = plans_.find(key); it != plans_.end()) {
        plan_hits_.fetch_add(1, std::memory_order_relaxed);
        return launch(drv, it->second.kernel, family.grid(problem.shape, problem.semantics, it->second.variant.tiling),
                      problem, stream);
      }
    }
    auto plan = make_plan(drv, ctx, info, family, key.bucket);
    if (!plan.ok()) return std::move(plan).error();
    const Plan p = plan.value();
    {
      std::unique_lock lock(plans_mu_);
      plans_.emplace(key, p);
    }
    return launch(drv, p.kernel, family.grid(problem.shape, problem.semantics, p.variant.tiling), problem, stream);
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
    auto family_r = choose_family(info.arch, req.semantics);
    if (!family_r.ok()) return std::move(family_r).error();
    const KernelFamily& family = *family_r.value();
    const auto key = autotune::make_tuning_key(family.name(), req.semantics, req.seqlen_q, req.seqlen_k, req.batch_x_heads);

    autotune::AutotunerOptions ao = autotuner_options(drv, info, autotune::TuneMode::on_first_use);
    if (req.progress)
      ao.progress = [&](std::size_t done, std::size_t total, const Tiling& t, double s) { req.progress(done, total, t.name(), s); };
    auto tuner = autotune::Autotuner::create(std::move(ao));
    if (!tuner.ok()) return std::move(tuner).error();
    const auto candidates = family.candidate_tilings(info.arch, req.semantics);
    const Tiling def = family.default_tiling(info.arch, req.semantics);
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
    const ProblemShape shape = autotune::representative_problem(key);
    r.flops = 2.0 * shape.batch * shape.heads_q * double(shape.seqlen_q) * double(shape.seqlen_k) *
              (req.semantics.head_dim_qk + req.semantics.head_dim_v) *
              (req.semantics.mask == Mask::causal && shape.seqlen_q == shape.seqlen_k ? 0.5 : 1.0);
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
    return o;
  }

  Status launch(const DriverLibrary& drv, const LoadedKernel& k, const LaunchGrid& grid, const ValidatedProblem& p,
                CUstream stream) {
    FJ_TRY(KernelLoader::launch(drv, k, grid, p.params, stream));
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

  Result<Plan> make_plan(const DriverLibrary& drv, CUcontext ctx, const DeviceContextInfo& info, const KernelFamily& family,
                         const autotune::TuningKey& bucket) {
    const Tiling def = family.default_tiling(info.arch, bucket.semantics);
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
    Plan p{{family.name(), bucket.semantics, tiling}, {}};
    auto k = loader_.get(drv, ctx, info, p.variant);
    if (!k.ok()) return std::move(k).error();
    p.kernel = k.value();
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

Result<KernelVariant> Engine::plan(const AttentionArgs& args, const std::string& arch) const {
  auto a = Arch::parse(arch);
  if (!a.ok()) return std::move(a).error();
  auto p = validate_problem(args);
  if (!p.ok()) return std::move(p).error();
  return impl_->default_variant(p->semantics, a.value());
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
  return impl_->default_variant(s, a.value());
}

EngineStats Engine::stats() const { return impl_->stats(); }

}  // namespace flashjit
