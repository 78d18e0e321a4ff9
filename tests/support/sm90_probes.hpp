// Probe kernels for the Hopper PTX wrappers (templates/common/sm90/), as NVRTC sources. The CPU
// suite compiles each for sm_90a (so CI catches a broken probe); the GPU suite runs the wgmma
// probe on an sm_90 device against a CPU product.
#pragma once

namespace flashjit::test_support {

// The probe: one use of each wrapper, every wgmma N in one kernel, values from memory so
// nothing folds away.
constexpr const char* kPtxProbe = R"(
#include "common/sm90/async_copy.cuh"
#include "common/sm90/wgmma.cuh"
using namespace fj::sm90;

template <int N>
__device__ void probe_wgmma(unsigned long long da, unsigned long long db, float* out, const unsigned* a) {
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = out[i];
  const unsigned ar[4] = {a[0], a[1], a[2], a[3]};
  wgmma_fence();
  Wgmma<N>::template ss<true, 0>(d, da, db, 0);
  Wgmma<N>::template ss<false, 1>(d, da, db, 1);
  Wgmma<N>::template rs<true, 1>(d, ar, db, 1);
  Wgmma<N>::template rs<false, 0>(d, ar, db, 1);
  wgmma_commit();
  wgmma_wait<0>();
  fence_registers(d);
  for (int i = 0; i < N / 2; ++i) out[threadIdx.x * 128 + i] = d[i];
}

template <int... Ns>
__device__ void probe_all(unsigned long long da, unsigned long long db, float* out, const unsigned* a) {
  (probe_wgmma<Ns>(da, db, out, a), ...);
}

struct alignas(64) TensorMap { unsigned long long words[16]; };

extern "C" __global__ void __launch_bounds__(256) probe(const __grid_constant__ TensorMap map, float* out,
                                                        const unsigned* a) {
  __shared__ alignas(1024) unsigned short tile[64 * 64];
  __shared__ unsigned long long bar;
  if (threadIdx.x == 0) {
    mbarrier_init(&bar, 1);
    fence_barrier_init();
  }
  __syncthreads();
  prefetch_tensor_map(&map);
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(&bar, 3 * 8192);
    tma_load_2d(tile, &map, 0, 1, &bar);
    tma_load_3d(tile, &map, 0, 1, 2, &bar);
    tma_load_4d(tile, &map, 0, 1, 2, 3, &bar);
  }
  mbarrier_wait(&bar, 0);
  const unsigned long long da = matrix_descriptor(tile, 16, 1024, Swizzle::b128);
  const unsigned long long db = advance_descriptor(matrix_descriptor(tile, 16, 512, Swizzle::b64), 32);
  probe_all<16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256>(da, db, out, a);
  fence_async_shared();
  if (threadIdx.x == 0) {
    tma_store_3d(&map, tile, 0, 1, 2);
    tma_store_4d(&map, tile, 0, 1, 2, 3);
    bulk_commit_group();
    bulk_wait_group_read<0>();
  }
  mbarrier_arrive(&bar);
  named_barrier_sync(1, 256);
  named_barrier_arrive(2, 256);
  if (threadIdx.x < 128) setmaxnreg_dec<40>();
  else setmaxnreg_inc<232>();
}
)";

// Four products of one kernel:
//   kk   D = A . B^T, B stored [N=64][K] (K-major)             wgmma ss, trans-b 0
//   nk   D = A . C,   C stored [K][N=64] (N-major, one atom)    wgmma ss, trans-b 1
//   nk2  D = A . E,   E stored [K][N=128] (N-major, two atoms)  wgmma ss, trans-b 1
//   rs   D = A . B^T with A from registers (m16n8k16 A fragments)  wgmma rs, trans-b 0
constexpr const char* kWgmmaProbe = R"(
#include "common/sm90/async_copy.cuh"
#include "common/sm90/wgmma.cuh"
using namespace fj::sm90;

struct alignas(64) TensorMap { unsigned long long words[16]; };
struct Params {
  TensorMap a, b, c, e;        // [64][64] A, B, C; [64][128] E as two 64-column boxes
  const unsigned short* a_raw; // A again, for register fragments
  float* out;                  // 4 products x [64][128] floats (64 columns used but nk2)
};

constexpr unsigned kTileBytes = 64 * 64 * 2;
constexpr unsigned kSw128 = 1024;  // bytes from one 8-row group to the next in a 128B-swizzled tile

template <int N>
__device__ void store(const float (&d)[N / 2], float* out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  for (int j = 0; j < N / 8; ++j) {
    const int row = 16 * warp + g, col = 8 * j + 2 * t;
    out[row * 128 + col] = d[4 * j];
    out[row * 128 + col + 1] = d[4 * j + 1];
    out[(row + 8) * 128 + col] = d[4 * j + 2];
    out[(row + 8) * 128 + col + 1] = d[4 * j + 3];
  }
}

extern "C" __global__ void __launch_bounds__(128) probe(const __grid_constant__ Params p) {
  __shared__ alignas(1024) unsigned short sa[64 * 64], sb[64 * 64], sc[64 * 64], se[2 * 64 * 64];
  __shared__ unsigned long long bar;
  if (threadIdx.x == 0) {
    mbarrier_init(&bar, 1);
    fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(&bar, 5 * kTileBytes);
    tma_load_2d(sa, &p.a, 0, 0, &bar);
    tma_load_2d(sb, &p.b, 0, 0, &bar);
    tma_load_2d(sc, &p.c, 0, 0, &bar);
    tma_load_2d(se, &p.e, 0, 0, &bar);
    tma_load_2d(se + 64 * 64, &p.e, 64, 0, &bar);
  }
  mbarrier_wait(&bar, 0);

  float kk[32] = {}, nk[32] = {}, nk2[64] = {}, rs[32] = {};
  unsigned afrag[4][4];
  {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const unsigned* a32 = reinterpret_cast<const unsigned*>(p.a_raw);
    for (int ks = 0; ks < 4; ++ks) {
      const int r0 = 16 * warp + g, c0 = 16 * ks + 2 * t;
      afrag[ks][0] = a32[(r0 * 64 + c0) / 2];
      afrag[ks][1] = a32[((r0 + 8) * 64 + c0) / 2];
      afrag[ks][2] = a32[(r0 * 64 + c0 + 8) / 2];
      afrag[ks][3] = a32[((r0 + 8) * 64 + c0 + 8) / 2];
    }
  }
  wgmma_fence();
  for (int ks = 0; ks < 4; ++ks) {
    // K-major operands step 16 elements (32 bytes) inside the 128-byte row; N-major ones step
    // 16 rows of K (2048 bytes).
    const unsigned long long da = matrix_descriptor(sa + 16 * ks, 16, kSw128, Swizzle::b128);
    const unsigned long long db = matrix_descriptor(sb + 16 * ks, 16, kSw128, Swizzle::b128);
    const unsigned long long dc = matrix_descriptor(sc + 16 * 64 * ks, 64 * 64 * 2, kSw128, Swizzle::b128);
    const unsigned long long de = matrix_descriptor(se + 16 * 64 * ks, 64 * 64 * 2, kSw128, Swizzle::b128);
    Wgmma<64>::ss<true, 0>(kk, da, db, 1);
    Wgmma<64>::ss<true, 1>(nk, da, dc, 1);
    Wgmma<128>::ss<true, 1>(nk2, da, de, 1);
    Wgmma<64>::rs<true, 0>(rs, afrag[ks], db, 1);
  }
  wgmma_commit();
  wgmma_wait<0>();
  fence_registers(kk);
  fence_registers(nk);
  fence_registers(nk2);
  fence_registers(rs);
  store<64>(kk, p.out);
  store<64>(nk, p.out + 64 * 128);
  store<128>(nk2, p.out + 2 * 64 * 128);
  store<64>(rs, p.out + 3 * 64 * 128);
}
)";

}  // namespace flashjit::test_support
