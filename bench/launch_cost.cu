// Host time of cuLaunchKernelEx against the params' size and dynamic shared memory (one H100).
#include <cuda.h>
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
template <int N> struct P { unsigned char b[N]; };
extern "C" __global__ void k64(const __grid_constant__ P<64> p) { if (p.b[0] == 7 && threadIdx.x == 999) asm volatile("trap;"); }
extern "C" __global__ void k256(const __grid_constant__ P<256> p) { if (p.b[0] == 7 && threadIdx.x == 999) asm volatile("trap;"); }
extern "C" __global__ void k1280(const __grid_constant__ P<1280> p) { if (p.b[0] == 7 && threadIdx.x == 999) asm volatile("trap;"); }
extern "C" __global__ void k4096(const __grid_constant__ P<4096> p) { if (p.b[0] == 7 && threadIdx.x == 999) asm volatile("trap;"); }
#define CK(x) do { CUresult r = (x); if (r) { printf("%s failed %d\n", #x, r); return 1; } } while (0)
int main() {
  CK(cuInit(0)); CUdevice d; CK(cuDeviceGet(&d, 0)); CUcontext c; CK(cuDevicePrimaryCtxRetain(&c, d)); CK(cuCtxSetCurrent(c));
  CUmodule m; CK(cuModuleLoad(&m, "launch_cost.cubin"));
  CUstream s; CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  const char* names[] = {"k64", "k256", "k1280", "k4096"};
  static unsigned char buf[4096] = {1};
  for (int smem : {0, 100 * 1024}) for (int ex : {1, 0}) for (const char* n : names) {
    CUfunction f; CK(cuModuleGetFunction(&f, m, n));
    if (smem) CK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem));
    void* args[] = {buf};
    std::vector<double> per;
    for (int round = 0; round < 7; ++round) {
      CK(cuStreamSynchronize(s));
      auto t0 = std::chrono::steady_clock::now();
      const int kN = 2000;
      for (int i = 0; i < kN; ++i) {
        if (ex) {
          CUlaunchConfig cfg{}; cfg.gridDimX = 1; cfg.gridDimY = 1; cfg.gridDimZ = 1; cfg.blockDimX = 384; cfg.blockDimY = 1; cfg.blockDimZ = 1;
          cfg.sharedMemBytes = smem; cfg.hStream = s;
          CK(cuLaunchKernelEx(&cfg, f, args, nullptr));
        } else {
          CK(cuLaunchKernel(f, 1, 1, 1, 384, 1, 1, smem, s, args, nullptr));
        }
      }
      auto t1 = std::chrono::steady_clock::now();
      per.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / kN);
    }
    std::sort(per.begin(), per.end());
    printf("%-6s smem %6d %-16s host us/launch median %.2f min %.2f\n", n, smem, ex ? "cuLaunchKernelEx" : "cuLaunchKernel", per[3], per[0]);
  }
  return 0;
}
