// What the engine needs to know about the device behind a CUDA context, read once per context.
#pragma once

#include <cuda.h>

#include <mutex>
#include <string>
#include <unordered_map>

#include "driver_library.hpp"
#include "flashjit/status.hpp"
#include "flashjit/variant.hpp"

namespace flashjit {

struct DeviceContextInfo {
  Arch arch;             // Hopper reads as sm_90a so families may use wgmma/setmaxnreg
  int smem_optin = 0;    // dynamic shared memory a block may opt into
  int sm_count = 0;
  int l2_bytes = 0;
  std::string name;      // "NVIDIA H100 80GB HBM3"
};

class DeviceContexts {
 public:
  // Stable pointer (map nodes never move); read once per context, so the dispatch path does
  // not copy the device name on every call.
  Result<const DeviceContextInfo*> info(const DriverLibrary& drv, CUcontext ctx);

 private:
  std::mutex mu_;
  std::unordered_map<CUcontext, DeviceContextInfo> map_;
};

}  // namespace flashjit
