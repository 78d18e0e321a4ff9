#include "kernel_loader.hpp"

#include <algorithm>

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

Result<LoadedModule> KernelLoader::get(const DriverLibrary& drv, CUcontext ctx, const DeviceContextInfo& info,
                                       const KernelVariant& v) {
  bool hit = false;
  auto k = modules_.get(ctx, v, [&] { return load(drv, info, v); }, &hit);
  if (k.ok() && hit) {
    std::lock_guard lock(mu_);
    ++stats_.memory_hits;
  }
  return k;
}

Result<LoadedModule> KernelLoader::load(const DriverLibrary& drv, const DeviceContextInfo& info, const KernelVariant& v) {
  const KernelFamily* family = find_family(v.family);
  if (!family) return Error(Code::invalid_argument, "unknown kernel family '" + v.family + "'");
  const std::vector<EntryPoint> entries = family->entry_points(v);
  if (entries.empty() || entries.size() > std::size_t(kMaxPlanKernels))
    return Error(Code::internal, v.family + " declares " + std::to_string(entries.size()) + " entry points");
  for (const EntryPoint& e : entries)
    if (e.smem_bytes > info.smem_optin)
      return Error(Code::unsupported, v.name() + " needs " + std::to_string(e.smem_bytes) + " bytes of shared memory; " +
                                          info.name + " allows " + std::to_string(info.smem_optin));
  auto bin = binary(v, info.arch);
  if (!bin.ok()) return std::move(bin).error();
  LoadedModule m;
  FJ_CU(drv, cuModuleLoadData(&m.module, bin->cubin.data()));
  for (const EntryPoint& e : entries) {
    CUfunction f = nullptr;
    CUresult r = drv.cuModuleGetFunction(&f, m.module, e.name);
    if (r == CUDA_SUCCESS) r = drv.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, e.smem_bytes);
    if (r != CUDA_SUCCESS) {
      drv.cuModuleUnload(m.module);
      return drv.error(r, "preparing " + std::string(e.name) + " of " + v.name());
    }
    int regs = 0, local = 0;
    drv.cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f);
    drv.cuFuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f);
    m.registers = std::max(m.registers, regs);
    m.local_bytes = std::max(m.local_bytes, local);
    m.functions[m.count++] = f;
  }
  {
    std::lock_guard lock(mu_);
    ++stats_.loads;
  }
  if (log_)
    log_("loaded " + v.name() + " (" + info.arch.name() + "): " + std::to_string(m.count) + " kernel(s), " +
         std::to_string(m.registers) + " registers, " + std::to_string(m.local_bytes) + " bytes local, " +
         std::to_string(variant_smem_bytes(v)) + " bytes shared, " +
         (bin->origin == BinaryOrigin::disk ? std::string("from the disk cache")
                                            : "compiled in " + std::to_string(int(bin->compile_ms)) + " ms"));
  return m;
}

Status KernelLoader::launch(const DriverLibrary& drv, const LoadedModule& m, const LaunchPlan& plan, CUstream stream) {
  for (int i = 0; i < plan.count; ++i) {
    const KernelLaunch& k = plan.kernels[i];
    if (k.entry < 0 || k.entry >= m.count) return Error(Code::internal, "launch plan names entry " + std::to_string(k.entry));
    CUlaunchConfig cfg{};
    cfg.gridDimX = k.grid.x, cfg.gridDimY = k.grid.y, cfg.gridDimZ = k.grid.z;
    cfg.blockDimX = k.block.x, cfg.blockDimY = k.block.y, cfg.blockDimZ = k.block.z;
    cfg.sharedMemBytes = k.smem_bytes;
    cfg.hStream = stream;
    CUlaunchAttribute cluster;
    if (k.cluster.x * k.cluster.y * k.cluster.z > 1) {
      cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      cluster.value.clusterDim.x = k.cluster.x, cluster.value.clusterDim.y = k.cluster.y,
      cluster.value.clusterDim.z = k.cluster.z;
      cfg.attrs = &cluster;
      cfg.numAttrs = 1;
    }
    void* args[] = {const_cast<unsigned char*>(k.params.bytes)};
    FJ_CU(drv, cuLaunchKernelEx(&cfg, m.functions[k.entry], args, nullptr));
  }
  return {};
}

LoaderStats KernelLoader::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace flashjit
