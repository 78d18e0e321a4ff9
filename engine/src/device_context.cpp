#include "device_context.hpp"

#include <atomic>

namespace flashjit {
namespace {

std::atomic<std::uint64_t> g_next_id{1};

// The context this thread asked about last, in which registry, and the answer.
struct LastLookup {
  std::uint64_t registry = 0;
  CUcontext ctx = nullptr;
  const DeviceContextInfo* info = nullptr;
};
thread_local LastLookup t_last;

}  // namespace

Result<DeviceContextInfo> with_sm_margin(const DeviceContextInfo& info, int sm_margin) {
  if (sm_margin < 0 || sm_margin >= info.sm_count)
    return Error(Code::invalid_argument, "sm_margin is " + std::to_string(sm_margin) + " but must be 0 to " +
                                             std::to_string(info.sm_count - 1) + ": the " + info.name + " has " +
                                             std::to_string(info.sm_count) + " SMs and a call needs one");
  DeviceContextInfo out = info;
  out.sm_count -= sm_margin;
  return out;
}

Result<UsableDevice> usable_device(const DeviceContextInfo& info, int sm_margin) {
  UsableDevice d{&info, std::nullopt};
  if (sm_margin == 0) return d;
  auto reduced = with_sm_margin(info, sm_margin);
  if (!reduced.ok()) return std::move(reduced).error();
  d.reduced = std::move(reduced).value();
  return d;
}

DeviceContexts::DeviceContexts() : id_(g_next_id.fetch_add(1)) {}

Result<const DeviceContextInfo*> DeviceContexts::info(const DriverLibrary& drv, CUcontext ctx) {
  if (t_last.registry == id_ && t_last.ctx == ctx) return t_last.info;
  {
    std::lock_guard lock(mu_);
    if (auto it = map_.find(ctx); it != map_.end()) {
      t_last = {id_, ctx, &it->second};
      return &it->second;
    }
  }
  // cuCtxGetDevice reads the current context, which the caller has made `ctx`.
  CUdevice dev = 0;
  FJ_CU(drv, cuCtxGetDevice(&dev));
  int major = 0, minor = 0;
  DeviceContextInfo info;
  FJ_CU(drv, cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  FJ_CU(drv, cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  FJ_CU(drv, cuDeviceGetAttribute(&info.smem_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev));
  FJ_CU(drv, cuDeviceGetAttribute(&info.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  FJ_CU(drv, cuDeviceGetAttribute(&info.smem_per_sm, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, dev));
  FJ_CU(drv, cuDeviceGetAttribute(&info.l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev));
  char name[256] = {0};
  FJ_CU(drv, cuDeviceGetName(name, sizeof name, dev));
  info.name = name;
  info.arch.major = major;
  info.arch.minor = minor;
  info.arch.suffix = major == 9 ? 'a' : 0;
  std::lock_guard lock(mu_);
  const DeviceContextInfo* stored = &map_.try_emplace(ctx, std::move(info)).first->second;
  t_last = {id_, ctx, stored};
  return stored;
}

Result<CallContext> DeviceContexts::call_context(CUstream stream, const char* needs) {
  auto drv_r = DriverLibrary::get();
  if (!drv_r.ok()) return std::move(drv_r).error();
  const DriverLibrary& drv = *drv_r.value();
  CUcontext ctx = nullptr;
  FJ_CU(drv, cuCtxGetCurrent(&ctx));
  if (!ctx)
    return Error(Code::invalid_argument, std::string(needs) +
                                             " needs a current CUDA context on this thread: make one current "
                                             "(cudaSetDevice / cuCtxSetCurrent) before calling");
  if (stream) {
    CUcontext stream_ctx = nullptr;
    FJ_CU(drv, cuStreamGetCtx(stream, &stream_ctx));
    if (stream_ctx != ctx)
      return Error(Code::invalid_argument, "stream belongs to another CUDA context than the calling thread's current one");
  }
  auto found = info(drv, ctx);
  if (!found.ok()) return std::move(found).error();
  return CallContext{drv, ctx, *found.value()};
}

}  // namespace flashjit
