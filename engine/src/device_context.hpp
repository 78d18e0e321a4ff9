// What the engine needs to know about the device behind a CUDA context, read once per context.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "cudalib/driver_library.hpp"
#include "flashjit/status.hpp"
#include "flashjit/variant.hpp"

namespace flashjit {

struct DeviceContextInfo {
  Arch arch;             // Hopper reads as sm_90a so families may use wgmma/setmaxnreg
  int smem_optin = 0;    // dynamic shared memory a block may opt into
  int smem_per_sm = 0;   // shared memory of one SM, for how many blocks fit at once
  int sm_count = 0;
  int l2_bytes = 0;
  std::string name;      // "NVIDIA H100 80GB HBM3"
};

// The largest sm_margin a call or the engine may ask for (a bound for validation; the device's own
// SM count is the real limit).
inline constexpr int kMaxSmMargin = 4096;

// The device as one call may use it: `sm_margin` SMs left to other kernels, so persistent grids and
// split counts size to the rest. INVALID_ARGUMENT when no SM would be left.
Result<DeviceContextInfo> with_sm_margin(const DeviceContextInfo& info, int sm_margin);

// The device as one call may use it: all of it, or all but a margin. Only a margin copies the
// device's description; calls without one use the stored one.
struct UsableDevice {
  const DeviceContextInfo* info;
  std::optional<DeviceContextInfo> reduced;
  const DeviceContextInfo& operator*() const { return reduced ? *reduced : *info; }
};
Result<UsableDevice> usable_device(const DeviceContextInfo& info, int sm_margin);

// The device and context a call runs in, read once per call.
struct CallContext {
  const DriverLibrary& drv;
  CUcontext ctx;
  const DeviceContextInfo& info;
};

class DeviceContexts {
 public:
  DeviceContexts();
  // Stable pointer (map nodes never move); read once per context, so the dispatch path does
  // not copy the device name on every call. A thread asking again for the context it asked
  // for last takes no lock.
  Result<const DeviceContextInfo*> info(const DriverLibrary& drv, CUcontext ctx);

  // The driver, the calling thread's current context (which `stream` must belong to; null: the
  // legacy default stream) and its device. `needs` names what needed a context, for the error.
  Result<CallContext> call_context(CUstream stream, const char* needs = "a call");

 private:
  std::uint64_t id_;  // tells this registry from any other, past or future, at the same address
  std::mutex mu_;
  std::unordered_map<CUcontext, DeviceContextInfo> map_;
};

}  // namespace flashjit
