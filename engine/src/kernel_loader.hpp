// Turns a variant into launchable functions in a context: the in-memory module cache first,
// then the binaries (disk cache or NVRTC), then cuModuleLoadData and every entry point the
// family declares, each with its shared-memory opt-in. Launches a family's plan.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>

#include "device_context.hpp"
#include "kernel_binaries.hpp"
#include "kernel_family.hpp"
#include "launch_plan.hpp"
#include "module_cache.hpp"

namespace flashjit {

struct LoaderStats {
  std::uint64_t loads = 0;       // module loads (misses of the in-memory cache)
  std::uint64_t memory_hits = 0;
  std::uint64_t disk_hits = 0;
  std::uint64_t compiles = 0;    // NVRTC runs (binaries not found on disk)
  double compile_ms = 0;
};

class KernelLoader {
 public:
  using Log = std::function<void(const std::string&)>;
  KernelLoader(KernelBinaries& binaries, Log log) : binaries_(binaries), log_(std::move(log)) {}

  // The loaded module of `v` in the current context `ctx`.
  Result<LoadedModule> get(const DriverLibrary& drv, CUcontext ctx, const DeviceContextInfo& info,
                           const KernelVariant& v);
  // A binary without loading it (for compiling tuning candidates on worker threads).
  Result<KernelBinary> binary(const KernelVariant& v, const Arch& arch);

  // Launches every kernel of `plan` on `stream`, in order.
  static Status launch(const DriverLibrary& drv, const LoadedModule& m, const LaunchPlan& plan, CUstream stream);
  LoaderStats stats() const;

 private:
  Result<LoadedModule> load(const DriverLibrary& drv, const DeviceContextInfo& info, const KernelVariant& v);

  KernelBinaries& binaries_;
  Log log_;
  ModuleCache modules_;
  mutable std::mutex mu_;
  LoaderStats stats_;
};

}  // namespace flashjit
