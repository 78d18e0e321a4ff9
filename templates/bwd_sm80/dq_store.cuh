// Where dQ lives between the main kernel and convert: each Q block's kBlockM x kDQK floats of
// the fp32 accumulator (the same span a row-major block would take) hold its dQ in the main
// kernel's register order, not row-major. Thread tid's n8 tile f of the dQ product (f = mt *
// kDqNTiles + nt) has its 4 floats at dq_slot(f, i, tid), i = 0..3, so a warp's atomic adds are
// 32 consecutive floats (sm_80: one per instruction) or 32 consecutive float4s (sm_90: one
// red.global.add.v4.f32 a lane), with no staging through shared memory. convert reads the
// accumulator back in the same order (it runs kThreads threads with the same warp split) and
// puts each value at its row and column there.
#pragma once

#include "bwd_sm80/config.cuh"

namespace fj::bwd {

// sm_90 adds four consecutive floats with one instruction (red.global.add.v4.f32, PTX 8.1).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr bool kDqVec4 = true;
#else
constexpr bool kDqVec4 = false;
#endif
constexpr int kDqTileFloats = 4;  // fp32 values a thread holds of one m16n8 tile
constexpr int kDqBlockFloats = kBlockM * kDQK;
static_assert(kDqMTiles * kDqNTiles * kDqTileFloats * kThreads == kDqBlockFloats,
              "the warps' dQ fragments cover the Q block's accumulator exactly once");

// Offset in the Q block's accumulator of element i of thread tid's dQ tile f.
FJ_DEVICE int dq_slot(int f, int i, int tid) {
  if constexpr (kDqVec4) return (f * kThreads + tid) * kDqTileFloats + i;
  else return (f * kDqTileFloats + i) * kThreads + tid;
}

// The query row and the column (within the Q block) of element i of thread tid's dQ tile
// (mt, nt): the dQ product's warp split (config.cuh) and the m16n8 C layout.
FJ_DEVICE int dq_row(int mt, int i, int tid) {
  const int warp = tid / 32, lane = tid % 32;
  return warp % kDqWarpsM * kDqRows + mt * 16 + (lane >> 2) + (i / 2) * 8;
}
FJ_DEVICE int dq_col(int nt, int i, int tid) {
  const int warp = tid / 32, lane = tid % 32;
  return warp / kDqWarpsM * kDqCols + nt * 8 + 2 * (lane & 3) + (i & 1);
}

// accum[dq_slot(...)] += x * dq, the whole tile of this thread, atomically (other K/V blocks'
// CTAs add into the same Q block).
FJ_DEVICE void add_dq(float* accum, const float (&dq)[kDqMTiles][kDqNTiles][4], float x, int tid) {
#pragma unroll
  for (int mt = 0; mt < kDqMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < kDqNTiles; ++nt) {
      const int f = mt * kDqNTiles + nt;
      if constexpr (kDqVec4) {
        red_add_v4(accum + dq_slot(f, 0, tid), dq[mt][nt][0] * x, dq[mt][nt][1] * x, dq[mt][nt][2] * x,
                   dq[mt][nt][3] * x);
      } else {
#pragma unroll
        for (int i = 0; i < kDqTileFloats; ++i) atomicAdd(accum + dq_slot(f, i, tid), dq[mt][nt][i] * x);
      }
    }
}

}  // namespace fj::bwd
