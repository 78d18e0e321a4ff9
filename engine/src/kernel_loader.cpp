#include "kernel_loader.hpp"

namespace flashjit {

Result<KernelBinary> KernelLoader::binary(const KernelVariant& v, const Arch& arch) {
  auto bin = binaries_.get(v, arch);
  if (!bin.ok()) return bin;
  std::lock_guard lock(mu_);
  if (bin->origin == BinaryOrigin::disk) ++stats_.disk_hits;
  else ++stats_.compiles;
  stats_.compile_ms += bin->compile_ms;
  return bin;
}

Result<LoadedKernel> KernelLoader::get(const DriverLibrary& drv, CUcontext ctx, const DeviceContextInfo& info,
                                       const KernelVariant& v) {
  bool hit = false;
  auto k = modules_.get(ctx, v, [&] { return load(drv, info, v); }, &hit);
  if (k.ok() && hit) {
    std::lock_guard lock(mu_);
    ++stats_.memory_hits;
  }
  return k;
}

Result<LoadedKernel> KernelLoader::load(const DriverLibrary& drv, const DeviceContextInfo& info, const KernelVariant& v) {
  const KernelFamily* family = find_family(v.family);
  if (!family) return Error(Code::invalid_argument, "unknown kernel family '" + v.family + "'");
  const int smem = family->smem_bytes(v.semantics, v.tiling);
  if (smem > info.smem_optin)
    return Error(Code::unsupported, v.name() + " needs " + std::to_string(smem) + " bytes of shared memory; " +
                                        info.name + " allows " + std::to_string(info.smem_optin));
  auto bin = binary(v, info.arch);
  if (!bin.ok()) return std::move(bin).error();
  LoadedKernel k;
  FJ_CU(drv, cuModuleLoadData(&k.module, bin->cubin.data()));
  CUresult r = drv.cuModuleGetFunction(&k.function, k.module, "flashjit_fwd");
  if (r == CUDA_SUCCESS) r = drv.cuFuncSetAttribute(k.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem);
  if (r != CUDA_SUCCESS) {
    drv.cuModuleUnload(k.module);
    return drv.error(r, "preparing " + v.name());
  }
  drv.cuFuncGetAttribute(&k.registers, CU_FUNC_ATTRIBUTE_NUM_REGS, k.function);
  drv.cuFuncGetAttribute(&k.local_bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, k.function);
  {
    std::lock_guard lock(mu_);
    ++stats_.loads;
  }
  if (log_)
    log_("loaded " + v.name() + " (" + info.arch.name() + "): " + std::to_string(k.registers) + " registers, " +
         std::to_string(k.local_bytes) + " bytes local, " + std::to_string(smem) + " bytes shared, " +
         (bin->origin == BinaryOrigin::disk ? std::string("from the disk cache")
                                            : "compiled in " + std::to_string(int(bin->compile_ms)) + " ms"));
  return k;
}

Status KernelLoader::launch(const DriverLibrary& drv, const LoadedKernel& k, const LaunchGrid& grid,
                            const FjFwdParams& params, CUstream stream) {
  FjFwdParams p = params;
  void* args[] = {&p};
  FJ_CU(drv, cuLaunchKernel(k.function, grid.x, grid.y, grid.z, grid.threads, 1, 1, grid.smem_bytes, stream, args, nullptr));
  return {};
}

LoaderStats KernelLoader::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace flashjit
