// Host time of the driver calls one forward makes besides the launch (issue 23): the TMA map
// encode fa3_sm90 does per call for Q, K, V and O, the capture query, and the context lookups.
// Build: g++ -O2 -std=c++17 bench/driver_call_cost.cpp -I/usr/local/cuda/include \
//          -L/usr/local/cuda/lib64/stubs -lcuda -o driver_call_cost
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#define CK(x)                                   \
  do {                                          \
    CUresult r = (x);                           \
    if (r) {                                    \
      std::printf("%s failed %d\n", #x, int(r)); \
      return 1;                                 \
    }                                           \
  } while (0)

// Median and minimum of 7 rounds of kCalls calls, in microseconds a call.
static void time_it(const char* what, const std::function<void()>& fn) {
  constexpr int kCalls = 20000, kRounds = 7;
  std::vector<double> per;
  for (int round = 0; round < kRounds; ++round) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) fn();
    auto t1 = std::chrono::steady_clock::now();
    per.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / kCalls);
  }
  std::sort(per.begin(), per.end());
  std::printf("%-52s median %.3f us  min %.3f us\n", what, per[kRounds / 2], per[0]);
}

int main() {
  CK(cuInit(0));
  CUdevice d;
  CK(cuDeviceGet(&d, 0));
  CUcontext c;
  CK(cuDevicePrimaryCtxRetain(&c, d));
  CK(cuCtxSetCurrent(c));
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr buf;
  CK(cuMemAlloc(&buf, 64 << 20));
  // A [batch 4, seq 4096, heads 16, dim 128] bf16 tensor seen as fa3 sees it: rank 4, box 128 rows x 64.
  cuuint64_t dims[4] = {128, 16, 4096, 4};
  cuuint64_t strides[3] = {128 * 2, 16 * 128 * 2, 4096ull * 16 * 128 * 2};
  cuuint32_t box[4] = {64, 1, 128, 1}, elem[4] = {1, 1, 1, 1};
  CUtensorMap map;
  int flip = 0;
  time_it("cuTensorMapEncodeTiled (bf16, rank 4, 128B swizzle)", [&] {
    flip ^= 1;
    cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, (void*)(buf + flip * 4096), dims, strides, box,
                           elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                           CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  });
  CUstreamCaptureStatus st;
  time_it("cuStreamIsCapturing (non-blocking stream)", [&] { cuStreamIsCapturing(s, &st); });
  time_it("cuStreamIsCapturing (legacy default stream)", [&] { cuStreamIsCapturing(nullptr, &st); });
  CUcontext got;
  time_it("cuStreamGetCtx", [&] { cuStreamGetCtx(s, &got); });
  time_it("cuCtxGetCurrent", [&] { cuCtxGetCurrent(&got); });
  CUdevice dev;
  time_it("cuCtxGetDevice", [&] { cuCtxGetDevice(&dev); });
  return 0;
}
