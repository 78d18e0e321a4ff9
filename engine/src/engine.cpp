#include <atomic>
#include <cstdlib>
#include <cstdio>
#include <mutex>
#include <unordered_map>

#include <future>

#include "compiler.hpp"
#include "kernel_binaries.hpp"
#include "driver_library.hpp"
#include "flashjit/flashjit.hpp"
#include "kernel_family.hpp"
#include "module_cache.hpp"
#include "nvrtc_library.hpp"
#include "problem.hpp"

namespace flashjit {

TensorView TensorView::bshd(const void* data, DType dtype, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.shape[0] = b, v.shape[1] = s, v.shape[2] = h, v.shape[3] = d;
  v.stride[3] = 1, v.stride[2] = d, v.stride[1] = h * d, v.stride[0] = s * h * d;
  return v;
}

TensorView TensorView::bhsd(const void* data, DType dtype, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.shape[0] = b, v.shape[1] = s, v.shape[2] = h, v.shape[3] = d;
  v.stride[3] = 1, v.stride[1] = d, v.stride[2] = s * d, v.stride[0] = h * s * d;
  return v;
}

LseView LseView::contiguous(float* data, std::int64_t b, std::int64_t h, std::int64_t s) {
  LseView l;
  l.data = data;
  l.shape[0] = b, l.shape[1] = h, l.shape[2] = s;
  l.stride[2] = 1, l.stride[1] = s, l.stride[0] = h * s;
  return l;
}

std::string version() {
  std::string v = "flashjit 0.1.0";
  if (auto nv = NvrtcLibrary::get(); nv.ok()) v += " (NVRTC " + nv.value()->version + ")";
  return v;
}

class Engine::Impl {
 public:
  explicit Impl(EngineOptions o) : options_(with_env(std::move(o))), binaries_(options_.disk_cache, options_.cache_dir, options_.log) {
    // NVRTC's version is part of every disk-cache key, and opening it costs ~10 ms: start now so
    // the first call does not pay it.
    nvrtc_preload_ = std::async(std::launch::async, [] { (void)NvrtcLibrary::get(); });
  }

  static EngineOptions with_env(EngineOptions o) {
    if (!o.log) {
      const char* env = std::getenv("FLASHJIT_LOG");
      if (env && *env && std::string(env) != "0")
        o.log = [](const std::string& m) { std::fprintf(stderr, "[flashjit] %s\n", m.c_str()); };
    }
    if (const char* d = std::getenv("FLASHJIT_DISK_CACHE"); d && std::string(d) == "0") o.disk_cache = false;
    return o;
  }

  KernelBinaries& binaries() { return binaries_; }

  void log(const std::string& m) const {
    if (options_.log) options_.log(m);
  }

  Result<KernelVariant> default_variant(const Semantics& s, const Arch& arch) const {
    auto family = choose_family(arch, s);
    if (!family.ok()) return std::move(family).error();
    return KernelVariant{family.value()->name(), s, family.value()->default_tiling(arch, s)};
  }

  Result<CompileReport> compile(const KernelVariant& v, const Arch& arch) {
    auto bin = binary_for(v, arch);
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
    auto info_r = context_info(drv, ctx);
    if (!info_r.ok()) return std::move(info_r).error();
    const ContextInfo info = info_r.value();

    auto variant_r = default_variant(problem.semantics, info.arch);
    if (!variant_r.ok()) return std::move(variant_r).error();
    KernelVariant& variant = variant_r.value();
    const KernelFamily* family = find_family(variant.family);
    if (tiling) {
      FJ_TRY(family->check_tiling(variant.semantics, *tiling));
      variant.tiling = *tiling;
    }
    const LaunchGrid grid = family->grid(problem.shape, problem.semantics, variant.tiling);
    if (int(grid.smem_bytes) > info.smem_optin)
      return Error(Code::unsupported, variant.name() + " needs " + std::to_string(grid.smem_bytes) +
                                          " bytes of shared memory; this device allows " + std::to_string(info.smem_optin));

    bool hit = false;
    auto kernel_r = modules_.get(ctx, variant, [&] { return load_kernel(drv, variant, info, grid.smem_bytes); }, &hit);
    if (!kernel_r.ok()) return std::move(kernel_r).error();
    (hit ? cache_hits_ : compiles_).fetch_add(1, std::memory_order_relaxed);

    FjFwdParams params = problem.params;
    void* kernel_args[] = {&params};
    FJ_CU(drv, cuLaunchKernel(kernel_r->function, grid.x, grid.y, grid.z, grid.threads, 1, 1, grid.smem_bytes,
                              stream, kernel_args, nullptr));
    launches_.fetch_add(1, std::memory_order_relaxed);
    return {};
  }

  EngineStats stats() const {
    EngineStats s;
    s.launches = launches_.load();
    s.compiles = compiles_.load();
    s.cache_hits = cache_hits_.load();
    std::lock_guard lock(stats_mu_);
    s.compile_ms = compile_ms_;
    s.disk_hits = disk_hits_;
    return s;
  }

 private:
  struct ContextInfo {
    Arch arch;
    int smem_optin = 0;
  };

  Result<ContextInfo> context_info(const DriverLibrary& drv, CUcontext ctx) {
    {
      std::lock_guard lock(ctx_mu_);
      if (auto it = ctx_info_.find(ctx); it != ctx_info_.end()) return it->second;
    }
    CUdevice dev = 0;
    FJ_CU(drv, cuCtxGetDevice(&dev));
    int major = 0, minor = 0, smem = 0;
    FJ_CU(drv, cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    FJ_CU(drv, cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    FJ_CU(drv, cuDeviceGetAttribute(&smem, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev));
    ContextInfo info;
    info.arch.major = major;
    info.arch.minor = minor;
    // Hopper parts get the arch-specific target so later families can use wgmma/setmaxnreg.
    info.arch.suffix = major == 9 ? 'a' : 0;
    info.smem_optin = smem;
    std::lock_guard lock(ctx_mu_);
    ctx_info_[ctx] = info;
    return info;
  }

  Result<LoadedKernel> load_kernel(const DriverLibrary& drv, const KernelVariant& v, const ContextInfo& info,
                                   unsigned smem_bytes) {
    auto report = binary_for(v, info.arch);
    if (!report.ok()) return std::move(report).error();
    LoadedKernel k;
    FJ_CU(drv, cuModuleLoadData(&k.module, report->cubin.data()));
    CUresult r = drv.cuModuleGetFunction(&k.function, k.module, "flashjit_fwd");
    if (r == CUDA_SUCCESS)
      r = drv.cuFuncSetAttribute(k.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(smem_bytes));
    if (r != CUDA_SUCCESS) {
      drv.cuModuleUnload(k.module);
      return drv.error(r, "preparing " + v.name());
    }
    drv.cuFuncGetAttribute(&k.registers, CU_FUNC_ATTRIBUTE_NUM_REGS, k.function);
    drv.cuFuncGetAttribute(&k.local_bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, k.function);
    log("loaded " + v.name() + ": " + std::to_string(k.registers) + " registers, " + std::to_string(k.local_bytes) +
        " bytes local, " + std::to_string(smem_bytes) + " bytes shared, " +
        (report->origin == BinaryOrigin::disk ? std::string("from the disk cache")
                                              : "compiled in " + std::to_string(int(report->compile_ms)) + " ms"));
    return k;
  }

  Result<KernelBinary> binary_for(const KernelVariant& v, const Arch& arch) {
    auto bin = binaries_.get(v, arch);
    if (!bin.ok()) return bin;
    std::lock_guard lock(stats_mu_);
    if (bin->origin == BinaryOrigin::disk) ++disk_hits_;
    compile_ms_ += bin->compile_ms;
    return bin;
  }

  EngineOptions options_;
  KernelBinaries binaries_;
  std::future<void> nvrtc_preload_;
  ModuleCache modules_;
  std::mutex ctx_mu_;
  std::unordered_map<CUcontext, ContextInfo> ctx_info_;
  std::atomic<std::uint64_t> launches_{0}, compiles_{0}, cache_hits_{0};
  mutable std::mutex stats_mu_;
  double compile_ms_ = 0;
  std::uint64_t disk_hits_ = 0;
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
