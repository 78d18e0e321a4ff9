// The engine: a call's route in order — validate, find the context, find or make the plan
// (planner.cpp: family, tiling, compiled and loaded kernel), launch. A plan is made once per
// (context, tuning bucket); every later call is validation, two driver queries, a comparison
// with the plans this thread ran last (plan_memo.hpp; else one hash lookup) and the launch.
#include "flashjit/flashjit.hpp"

#include <atomic>
#include <future>

#include "device_context.hpp"
#include "engine_options.hpp"
#include "kernel_loader.hpp"
#include "metadata_check.hpp"
#include "cudalib/nvrtc_library.hpp"
#include "planner.hpp"
#include "backward_problem.hpp"
#include "problem.hpp"
#include "tune_request.hpp"
#include "workspace_pool.hpp"

namespace flashjit {

class Engine::Impl {
 public:
  explicit Impl(EngineOptions o)
      : options_(with_env(std::move(o))),
        binaries_(options_.disk_cache, options_.cache_dir, options_.log),
        loader_(binaries_, options_.log),
        planner_(options_, loader_),
        workspaces_(driver_workspace_device()),
        sm_margin_(*options_.sm_margin) {
    // NVRTC's version is part of every disk-cache key and opening it costs ~10 ms: start now
    // so the first call does not pay it.
    nvrtc_preload_ = std::async(std::launch::async, [] { (void)NvrtcLibrary::get(); });
  }

  Status forward(const AttentionArgs& args, CUstream stream, const Tiling* tiling) {
    auto problem = validate_problem(args);
    if (!problem.ok()) return std::move(problem).error();
    if (problem->empty) return {};
    auto call = call_context(stream);
    if (!call.ok()) return std::move(call).error();
    if (args.check_metadata || *options_.check_metadata) FJ_TRY(check_device_metadata(call->drv, *problem, stream));
    return plan_and_launch(*call, *problem, stream, tiling, Pass::forward);
  }

  // The forward's route with the backward's validation and families. No checked mode: the
  // backward refuses every argument with device metadata so far.
  Status backward(const BackwardArgs& args, CUstream stream, const Tiling* tiling) {
    auto problem = validate_backward(args);
    if (!problem.ok()) return std::move(problem).error();
    if (problem->empty) return {};
    auto call = call_context(stream);
    if (!call.ok()) return std::move(call).error();
    return plan_and_launch(*call, *problem, stream, tiling, Pass::backward);
  }

  Result<std::uint64_t> backward_workspace_size(const BackwardArgs& args, CUstream stream) {
    auto problem = validate_backward(args);
    if (!problem.ok()) return std::move(problem).error();
    if (problem->empty) return std::uint64_t(0);
    return planned_workspace(*problem, stream, Pass::backward);
  }

  Result<std::uint64_t> workspace_size(const AttentionArgs& args, CUstream stream) {
    auto problem = validate_problem(args);
    if (!problem.ok()) return std::move(problem).error();
    if (problem->empty) return std::uint64_t(0);
    return planned_workspace(*problem, stream, Pass::forward);
  }

  Result<TuneReport> tune(const TuneRequest& req) {
    auto call = contexts_.call_context(nullptr, "tune (the GPU to tune on)");
    if (!call.ok()) return std::move(call).error();
    return tune_request(req, *call, loader_, planner_, options_.log);
  }

  Result<PlanReport> default_plan(const Semantics& s, const Arch& arch, const ProblemShape* shape,
                                  Pass pass = Pass::forward) const {
    auto choice = choose_family(arch, s, shape, pass);
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

  Status set_sm_margin(int sm_margin) {
    if (sm_margin < 0 || sm_margin > kMaxSmMargin)
      return Error(Code::invalid_argument, "sm_margin is " + std::to_string(sm_margin) + " but must be 0 to " +
                                               std::to_string(kMaxSmMargin));
    sm_margin_.store(sm_margin, std::memory_order_relaxed);
    return {};
  }

  EngineStats stats() const {
    EngineStats s;
    const LoaderStats l = loader_.stats();
    s.launches = launches_.load();
    s.module_loads = l.loads;
    s.disk_hits = l.disk_hits;
    s.compiles = l.compiles;
    s.compile_ms = l.compile_ms;
    s.plan_hits = planner_.hits();
    s.tunes = planner_.tunes();
    s.workspace_buffers = workspaces_.buffers();
    s.workspace_bytes = workspaces_.bytes_held();
    return s;
  }

 private:
  Result<CallContext> call_context(CUstream stream) { return contexts_.call_context(stream); }
  // The plan, then its launches: the caller's tiling (benchmarks and tuning tools name one), else
  // the planner's (a plan valid until this thread's next call).
  Status plan_and_launch(const CallContext& call, const AttentionProblem& problem, CUstream stream,
                         const Tiling* tiling, Pass pass) {
    if (tiling) {
      auto plan = planner_.with_tiling(call, *tiling, problem, pass);
      if (!plan.ok()) return std::move(plan).error();
      return launch(call, **plan, problem, stream);
    }
    auto plan = planner_.dispatch(call, problem, stream, pass);
    if (!plan.ok()) return std::move(plan).error();
    return launch(call, **plan, problem, stream);
  }

  // The workspace bytes a call's plan asks for, planned as the call would be, nothing launched.
  Result<std::uint64_t> planned_workspace(const AttentionProblem& problem, CUstream stream, Pass pass) {
    auto call = call_context(stream);
    if (!call.ok()) return std::move(call).error();
    auto plan = planner_.dispatch(*call, problem, stream, pass);
    if (!plan.ok()) return std::move(plan).error();
    WorkspaceMeter meter;
    LaunchPlan launches;
    auto device = usable_device(*call, problem);
    if (!device.ok()) return std::move(device).error();
    FJ_TRY((*plan)->family->plan(problem, (*plan)->variant, **device, meter, launches));
    return std::uint64_t(meter.bytes());
  }

  // The device as this call may use it: all but its sm_margin, else the engine's.
  Result<UsableDevice> usable_device(const CallContext& call, const AttentionProblem& problem) const {
    const int margin = problem.args->sm_margin > 0 ? problem.args->sm_margin : sm_margin_.load(std::memory_order_relaxed);
    return flashjit::usable_device(call.info, margin);
  }

  // One call's launches: the family's plan, with the caller's workspace or else the stream's,
  // then the kernels.
  Status launch(const CallContext& call, const Plan& plan, const AttentionProblem& problem, CUstream stream) {
    const AttentionArgs::Workspace& given = problem.workspace();
    StreamWorkspace pooled(workspaces_, call.ctx, stream);
    CallerWorkspace callers(workspaces_.device(), reinterpret_cast<CUdeviceptr>(given.data), given.bytes, stream);
    WorkspaceSource& workspace = given.data ? static_cast<WorkspaceSource&>(callers) : pooled;
    LaunchPlan launches;
    auto device = usable_device(call, problem);
    if (!device.ok()) return std::move(device).error();
    FJ_TRY(plan.family->plan(problem, plan.variant, **device, workspace, launches));
    FJ_TRY(KernelLoader::launch(call.drv, plan.module, launches, stream));
    launches_.fetch_add(1, std::memory_order_relaxed);
    return {};
  }

  EngineOptions options_;
  KernelBinaries binaries_;
  KernelLoader loader_;
  DeviceContexts contexts_;
  Planner planner_;
  WorkspacePool workspaces_;
  std::future<void> nvrtc_preload_;
  std::atomic<std::uint64_t> launches_{0};
  std::atomic<int> sm_margin_;
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

Result<std::uint64_t> Engine::workspace_size(const AttentionArgs& args, CUstream stream) {
  return impl_->workspace_size(args, stream);
}

Result<TuneReport> Engine::tune(const TuneRequest& request) { return impl_->tune(request); }

Status Engine::backward(const BackwardArgs& args, CUstream stream) { return impl_->backward(args, stream, nullptr); }

Status Engine::backward_with_tiling(const BackwardArgs& args, const Tiling& tiling, CUstream stream) {
  return impl_->backward(args, stream, &tiling);
}

Result<std::uint64_t> Engine::backward_workspace_size(const BackwardArgs& args, CUstream stream) {
  return impl_->backward_workspace_size(args, stream);
}

Result<PlanReport> Engine::plan_backward(const BackwardArgs& args, const std::string& arch) const {
  auto a = Arch::parse(arch);
  if (!a.ok()) return std::move(a).error();
  auto p = validate_backward(args);
  if (!p.ok()) return std::move(p).error();
  return impl_->default_plan(p->semantics, a.value(), &p->shape, Pass::backward);
}

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

Status Engine::set_sm_margin(int sm_margin) { return impl_->set_sm_margin(sm_margin); }

}  // namespace flashjit
