/* A stand-in for libcuda.so.1 that answers as one H100 would, so the engine's host path can be
 * timed and profiled (perf, callgrind) on a machine without a GPU. Point the engine at it:
 *   FLASHJIT_LIBCUDA_PATH=$PWD/build/fake_driver.so   (cudalib/driver_library.hpp, kLibcudaPathEnv)
 * Every entry point cudalib/driver_library.hpp lists is here and cuGetProcAddress_v2 hands them
 * out by name (the version asked for is ignored: each is defined with the prototype cuda.h
 * declares under the same name, which is the one the engine calls through). Launches do nothing,
 * "device memory" is host memory, tensor maps are filled from their arguments. Nothing is ever
 * read through a kernel argument, so host buffers may stand in for device pointers.
 * Build (bench/host_profile.sh does it):
 *   cc -O2 -shared -fPIC -I/usr/local/cuda/include bench/fake_driver.c -o build/fake_driver.so */
#include <cuda.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* One device, one primary context; the current context is per thread as in the real driver. */
static int g_context_storage;
#define FAKE_CTX ((CUcontext)&g_context_storage)
static __thread CUcontext t_current;

CUresult CUDAAPI cuInit(unsigned int flags) { (void)flags; return CUDA_SUCCESS; }
CUresult CUDAAPI cuDriverGetVersion(int* v) { *v = 13000; return CUDA_SUCCESS; }
CUresult CUDAAPI cuDeviceGet(CUdevice* d, int ordinal) {
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *d = 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetCount(int* n) { *n = 1; return CUDA_SUCCESS; }
CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice d) {
  (void)d;
  strncpy(name, "NVIDIA H100 80GB HBM3 (fake driver)", (size_t)len);
  if (len > 0) name[len - 1] = 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice d) {
  (void)d;
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = 227 * 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *v = 228 * 1024; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = 50 * 1024 * 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = 48 * 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
    default: *v = 0; break;
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceTotalMem(size_t* bytes, CUdevice d) { (void)d; *bytes = (size_t)80 << 30; return CUDA_SUCCESS; }
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice d) { (void)d; *c = FAKE_CTX; return CUDA_SUCCESS; }
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice d) { (void)d; return CUDA_SUCCESS; }
CUresult CUDAAPI cuCtxGetCurrent(CUcontext* c) { *c = t_current; return CUDA_SUCCESS; }
CUresult CUDAAPI cuCtxSetCurrent(CUcontext c) { t_current = c; return CUDA_SUCCESS; }
CUresult CUDAAPI cuCtxGetDevice(CUdevice* d) {
  if (!t_current) return CUDA_ERROR_INVALID_CONTEXT;
  *d = 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxSynchronize(void) { return CUDA_SUCCESS; }

/* Streams are malloc'ed tokens of the one context. */
CUresult CUDAAPI cuStreamGetCtx(CUstream s, CUcontext* c) { (void)s; *c = FAKE_CTX; return CUDA_SUCCESS; }
CUresult CUDAAPI cuStreamSynchronize(CUstream s) { (void)s; return CUDA_SUCCESS; }
CUresult CUDAAPI cuStreamCreate(CUstream* s, unsigned int flags) { (void)flags; *s = (CUstream)malloc(16); return CUDA_SUCCESS; }
CUresult CUDAAPI cuStreamDestroy(CUstream s) { free(s); return CUDA_SUCCESS; }
CUresult CUDAAPI cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* st) {
  (void)s;
  *st = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

/* Modules and functions: tokens; attributes as a mid-sized sm_90 kernel would report. */
CUresult CUDAAPI cuModuleLoadData(CUmodule* m, const void* image) { (void)image; *m = (CUmodule)malloc(16); return CUDA_SUCCESS; }
CUresult CUDAAPI cuModuleUnload(CUmodule m) { free(m); return CUDA_SUCCESS; }
CUresult CUDAAPI cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  (void)name;
  *f = (CUfunction)m;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuFuncGetAttribute(int* v, CUfunction_attribute a, CUfunction f) {
  (void)f;
  switch (a) {
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *v = 128; break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *v = 0; break;
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    default: *v = 0; break;
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) { (void)f, (void)a, (void)v; return CUDA_SUCCESS; }

/* Launches: no-ops (the real cuLaunchKernelEx costs ~2.6 us on the H100 host; not modelled). */
CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                unsigned smem, CUstream s, void** params, void** extra) {
  (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)smem, (void)s, (void)params, (void)extra;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* cfg, CUfunction f, void** params, void** extra) {
  (void)cfg, (void)f, (void)params, (void)extra;
  return CUDA_SUCCESS;
}

/* Memory: host memory from malloc stands in for device memory. */
CUresult CUDAAPI cuMemAlloc(CUdeviceptr* p, size_t bytes) {
  void* m = malloc(bytes ? bytes : 1);
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  *p = (CUdeviceptr)(uintptr_t)m;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemFree(CUdeviceptr p) { free((void*)(uintptr_t)p); return CUDA_SUCCESS; }
CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dst, const void* src, size_t n) { memcpy((void*)(uintptr_t)dst, src, n); return CUDA_SUCCESS; }
CUresult CUDAAPI cuMemcpyDtoH(void* dst, CUdeviceptr src, size_t n) { memcpy(dst, (const void*)(uintptr_t)src, n); return CUDA_SUCCESS; }
CUresult CUDAAPI cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  (void)s;
  memcpy(dst, (const void*)(uintptr_t)src, n);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemsetD8(CUdeviceptr p, unsigned char v, size_t n) { memset((void*)(uintptr_t)p, v, n); return CUDA_SUCCESS; }
CUresult CUDAAPI cuMemsetD32(CUdeviceptr p, unsigned int v, size_t n) {
  for (size_t i = 0; i < n; ++i) ((unsigned int*)(uintptr_t)p)[i] = v;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s) {
  (void)s;
  memset((void*)(uintptr_t)p, v, n);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemGetInfo(size_t* free_bytes, size_t* total) {
  *free_bytes = (size_t)79 << 30;
  *total = (size_t)80 << 30;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuPointerGetAttribute(void* data, CUpointer_attribute a, CUdeviceptr p) {
  (void)p;
  if (a == CU_POINTER_ATTRIBUTE_CONTEXT) *(CUcontext*)data = FAKE_CTX;
  else if (a == CU_POINTER_ATTRIBUTE_MEMORY_TYPE) *(unsigned int*)data = CU_MEMORYTYPE_DEVICE;
  else if (a == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) *(int*)data = 0;
  else return CUDA_ERROR_NOT_SUPPORTED;
  return CUDA_SUCCESS;
}

/* Events: every one completes at once, 0 ms apart. */
CUresult CUDAAPI cuEventCreate(CUevent* e, unsigned int flags) { (void)flags; *e = (CUevent)malloc(16); return CUDA_SUCCESS; }
CUresult CUDAAPI cuEventRecord(CUevent e, CUstream s) { (void)e, (void)s; return CUDA_SUCCESS; }
CUresult CUDAAPI cuEventSynchronize(CUevent e) { (void)e; return CUDA_SUCCESS; }
CUresult CUDAAPI cuEventElapsedTime(float* ms, CUevent a, CUevent b) { (void)a, (void)b; *ms = 0.f; return CUDA_SUCCESS; }
CUresult CUDAAPI cuEventDestroy(CUevent e) { free(e); return CUDA_SUCCESS; }

/* Graph capture is not modelled: refused. */
CUresult CUDAAPI cuStreamBeginCapture(CUstream s, CUstreamCaptureMode m) { (void)s, (void)m; return CUDA_ERROR_NOT_SUPPORTED; }
CUresult CUDAAPI cuStreamEndCapture(CUstream s, CUgraph* g) { (void)s, (void)g; return CUDA_ERROR_NOT_SUPPORTED; }
CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* e, CUgraph g, unsigned long long f) {
  (void)e, (void)g, (void)f;
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult CUDAAPI cuGraphLaunch(CUgraphExec e, CUstream s) { (void)e, (void)s; return CUDA_ERROR_NOT_SUPPORTED; }
CUresult CUDAAPI cuGraphDestroy(CUgraph g) { (void)g; return CUDA_SUCCESS; }
CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec e) { (void)e; return CUDA_SUCCESS; }

/* A tensor map holds its arguments packed (the real one is an opaque 128-byte encoding). */
CUresult CUDAAPI cuTensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* addr,
                                        const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                        const cuuint32_t* elem_strides, CUtensorMapInterleave il,
                                        CUtensorMapSwizzle sw, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  if (rank < 1 || rank > 5 || ((uintptr_t)addr & 15)) return CUDA_ERROR_INVALID_VALUE;
  memset(map, 0, sizeof *map);
  cuuint64_t* w = map->opaque;
  w[0] = (cuuint64_t)(uintptr_t)addr;
  w[1] = (cuuint64_t)type | (cuuint64_t)rank << 8 | (cuuint64_t)il << 16 | (cuuint64_t)sw << 24 | (cuuint64_t)l2 << 32 |
         (cuuint64_t)oob << 40;
  for (cuuint32_t i = 0; i < rank; ++i) {
    w[2 + i] = dims[i];
    if (i > 0) w[7 + i - 1] = strides[i - 1];
    w[11 + i] = (cuuint64_t)box[i] | (cuuint64_t)elem_strides[i] << 32;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorName(CUresult r, const char** s) {
  switch (r) {
    case CUDA_SUCCESS: *s = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *s = "CUDA_ERROR_NOT_SUPPORTED"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    default: *s = "CUDA_ERROR_UNKNOWN"; return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGetErrorString(CUresult r, const char** s) {
  *s = r == CUDA_SUCCESS ? "no error" : "reported by the fake driver (bench/fake_driver.c)";
  return CUDA_SUCCESS;
}

/* The table cuGetProcAddress_v2 answers from. A name in quotes is the one the engine asks for;
 * the function beside it is whatever cuda.h's macros make of that name (cuMemAlloc_v2, ...),
 * which is the prototype the engine calls it through. */
#define FAKE_ENTRY(name) {#name, (void*)&name}
static const struct {
  const char* name;
  void* fn;
} g_entries[] = {
    FAKE_ENTRY(cuInit), FAKE_ENTRY(cuDriverGetVersion), FAKE_ENTRY(cuDeviceGet), FAKE_ENTRY(cuDeviceGetCount),
    FAKE_ENTRY(cuDeviceGetName), FAKE_ENTRY(cuDeviceGetAttribute), FAKE_ENTRY(cuDeviceTotalMem),
    FAKE_ENTRY(cuDevicePrimaryCtxRetain), FAKE_ENTRY(cuDevicePrimaryCtxRelease), FAKE_ENTRY(cuCtxGetCurrent),
    FAKE_ENTRY(cuCtxSetCurrent), FAKE_ENTRY(cuCtxGetDevice), FAKE_ENTRY(cuCtxSynchronize), FAKE_ENTRY(cuStreamGetCtx),
    FAKE_ENTRY(cuStreamSynchronize), FAKE_ENTRY(cuStreamCreate), FAKE_ENTRY(cuStreamDestroy),
    FAKE_ENTRY(cuModuleLoadData), FAKE_ENTRY(cuModuleUnload), FAKE_ENTRY(cuModuleGetFunction),
    FAKE_ENTRY(cuFuncGetAttribute), FAKE_ENTRY(cuFuncSetAttribute), FAKE_ENTRY(cuLaunchKernel),
    FAKE_ENTRY(cuLaunchKernelEx), FAKE_ENTRY(cuStreamIsCapturing), FAKE_ENTRY(cuMemAlloc), FAKE_ENTRY(cuMemFree),
    FAKE_ENTRY(cuMemcpyHtoD), FAKE_ENTRY(cuMemcpyDtoH), FAKE_ENTRY(cuMemcpyDtoHAsync), FAKE_ENTRY(cuMemsetD8),
    FAKE_ENTRY(cuMemsetD32), FAKE_ENTRY(cuMemsetD8Async), FAKE_ENTRY(cuMemGetInfo), FAKE_ENTRY(cuEventCreate),
    FAKE_ENTRY(cuEventRecord), FAKE_ENTRY(cuEventSynchronize), FAKE_ENTRY(cuEventElapsedTime),
    FAKE_ENTRY(cuEventDestroy), FAKE_ENTRY(cuGetErrorName), FAKE_ENTRY(cuGetErrorString),
    FAKE_ENTRY(cuPointerGetAttribute), FAKE_ENTRY(cuStreamBeginCapture), FAKE_ENTRY(cuStreamEndCapture),
    FAKE_ENTRY(cuGraphInstantiateWithFlags), FAKE_ENTRY(cuGraphLaunch), FAKE_ENTRY(cuGraphDestroy),
    FAKE_ENTRY(cuGraphExecDestroy), FAKE_ENTRY(cuTensorMapEncodeTiled),
};

/* The only symbol the engine looks up with dlsym besides cuDriverGetVersion (cuda.h's macro
 * names this one cuGetProcAddress_v2). */
CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** fn, int version, cuuint64_t flags,
                                  CUdriverProcAddressQueryResult* status) {
  (void)version, (void)flags;
  for (size_t i = 0; i < sizeof g_entries / sizeof g_entries[0]; ++i)
    if (strcmp(g_entries[i].name, symbol) == 0) {
      *fn = g_entries[i].fn;
      if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  *fn = NULL;
  if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}
