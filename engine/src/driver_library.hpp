// The CUDA driver, opened at run time so the library and tools load on machines without a GPU.
// Every entry point comes from cuGetProcAddress at the toolkit's CUDA_VERSION: dlsym of plain
// names returns legacy ABIs (cuMemAlloc is not cuMemAlloc_v2), which fail silently.
#pragma once

#include <cuda.h>

#include <string>

#include "flashjit/status.hpp"

namespace flashjit {

// X-macro of every driver call flashjit makes. decltype(&::name) picks the signature cuda.h maps
// the name to (cuMemAlloc -> cuMemAlloc_v2), and #name is the base name cuGetProcAddress takes.
#define FLASHJIT_DRIVER_FUNCTIONS(X)                                                             \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGet) X(cuDeviceGetCount) X(cuDeviceGetName)          \
  X(cuDeviceGetAttribute) X(cuDeviceTotalMem) X(cuDevicePrimaryCtxRetain)                        \
  X(cuDevicePrimaryCtxRelease) X(cuCtxGetCurrent) X(cuCtxSetCurrent) X(cuCtxGetDevice)           \
  X(cuCtxSynchronize) X(cuStreamGetCtx) X(cuStreamSynchronize) X(cuStreamCreate)                 \
  X(cuStreamDestroy) X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction)                \
  X(cuFuncGetAttribute) X(cuFuncSetAttribute) X(cuLaunchKernel) X(cuMemAlloc) X(cuMemFree)       \
  X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemsetD8) X(cuMemsetD32) X(cuMemGetInfo) X(cuEventCreate)  \
  X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime) X(cuEventDestroy)                 \
  X(cuGetErrorName) X(cuGetErrorString) X(cuPointerGetAttribute)

struct DriverLibrary {
#define FJ_DRIVER_MEMBER(name) decltype(&::name) name = nullptr;
  FLASHJIT_DRIVER_FUNCTIONS(FJ_DRIVER_MEMBER)
#undef FJ_DRIVER_MEMBER

  int driver_version = 0;  // e.g. 13000

  // Opens libcuda once per process and calls cuInit(0); an error says why (no driver, no GPU).
  static Result<const DriverLibrary*> get();

  // An Error for a failed call: "what: CUDA_ERROR_X (text)".
  Error error(CUresult r, const std::string& what) const;
};

// Checks a driver call inside a function returning Result/Status.
#define FJ_CU(drv, call)                                                   \
  do {                                                                     \
    CUresult fj_cu_r_ = (drv).call;                                        \
    if (fj_cu_r_ != CUDA_SUCCESS) return (drv).error(fj_cu_r_, #call);     \
  } while (0)

}  // namespace flashjit
