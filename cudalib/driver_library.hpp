// The CUDA driver, opened at run time so the library and tools load on machines without a GPU.
// Every entry point comes from cuGetProcAddress at the ABI version of the prototype we call: dlsym of plain
// names returns legacy ABIs (cuMemAlloc is not cuMemAlloc_v2), which fail silently.
#pragma once

#include <cuda.h>

#include <string>

#include "flashjit/status.hpp"

namespace flashjit {

// X-macro of every driver call flashjit makes, each with the ABI version whose signature cuda.h
// declares for that name. The version matters: cuGetProcAddress at CUDA_VERSION 13000 returns
// cuCtxSynchronize(CUcontext) and cuStreamGetCtx(stream, ctx*, greenCtx*), which called through
// the older prototypes fail with CONTEXT_IS_DESTROYED or worse. static_asserts in
// driver_library.cpp tie each version to the prototype (cudaTypedefs.h PFN_<name>_v<version>).
#define FLASHJIT_DRIVER_FUNCTIONS(X)                                                             \
  X(cuInit, 2000) X(cuDriverGetVersion, 2020) X(cuDeviceGet, 2000) X(cuDeviceGetCount, 2000)    \
  X(cuDeviceGetName, 2000) X(cuDeviceGetAttribute, 2000) X(cuDeviceTotalMem, 3020)              \
  X(cuDevicePrimaryCtxRetain, 7000) X(cuDevicePrimaryCtxRelease, 11000)                         \
  X(cuCtxGetCurrent, 4000) X(cuCtxSetCurrent, 4000) X(cuCtxGetDevice, 2000)                     \
  X(cuCtxSynchronize, 2000) X(cuStreamGetCtx, 9020) X(cuStreamSynchronize, 2000)                \
  X(cuStreamCreate, 2000) X(cuStreamDestroy, 4000) X(cuModuleLoadData, 2000)                    \
  X(cuModuleUnload, 2000) X(cuModuleGetFunction, 2000) X(cuFuncGetAttribute, 2020)              \
  X(cuFuncSetAttribute, 9000) X(cuLaunchKernel, 4000) X(cuLaunchKernelEx, 11060)                \
  X(cuStreamIsCapturing, 10000) X(cuMemAlloc, 3020) X(cuMemFree, 3020)    \
  X(cuMemcpyHtoD, 3020) X(cuMemcpyDtoH, 3020) X(cuMemcpyDtoHAsync, 3020) X(cuMemsetD8, 3020) X(cuMemsetD32, 3020) X(cuMemsetD8Async, 3020)          \
  X(cuMemGetInfo, 3020) X(cuEventCreate, 2000) X(cuEventRecord, 2000)                           \
  X(cuEventSynchronize, 2000) X(cuEventElapsedTime, 2000) X(cuEventDestroy, 4000)               \
  X(cuGetErrorName, 6000) X(cuGetErrorString, 6000) X(cuPointerGetAttribute, 4000)                \
  /* graph capture: the GPU tests and benchmarks replay forward() from graphs */                 \
  X(cuStreamBeginCapture, 10010) X(cuStreamEndCapture, 10000) X(cuGraphInstantiateWithFlags, 11040) \
  X(cuGraphLaunch, 10000) X(cuGraphDestroy, 10000) X(cuGraphExecDestroy, 10000)                \
  /* TMA tensor maps (sm_90): encoded on the host, passed as kernel parameters */              \
  X(cuTensorMapEncodeTiled, 12000)

// Names the driver library to load instead of libcuda.so.1.
inline constexpr const char* kLibcudaPathEnv = "FLASHJIT_LIBCUDA_PATH";

struct DriverLibrary {
#define FJ_DRIVER_MEMBER(name, version) decltype(&::name) name = nullptr;
  FLASHJIT_DRIVER_FUNCTIONS(FJ_DRIVER_MEMBER)
#undef FJ_DRIVER_MEMBER

  int driver_version = 0;  // e.g. 13000

  // Opens libcuda once per process and calls cuInit(0); an error says why (no driver, no GPU).
  static Result<const DriverLibrary*> get();
  // One attempt: `override_path` ($FLASHJIT_LIBCUDA_PATH; a path that cannot be loaded is an
  // error naming the variable and the path), else libcuda.so.1.
  static Result<DriverLibrary> load(const char* override_path);

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
