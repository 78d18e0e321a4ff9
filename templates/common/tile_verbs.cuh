// Whole-tile verbs on register accumulators in the m16n8 C layout ([m16 tiles][n8 tiles][4]),
// so kernels say "zero O" instead of spelling out a triple loop. Fully unrolled: the tiles live
// in registers, and a loop that is not unrolled would force them into local memory.
#pragma once

#include "common/ptx.cuh"

namespace fj {

template <int kMTiles, int kNTiles>
FJ_DEVICE void zero_tile(float (&a)[kMTiles][kNTiles][4]) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) a[mt][nt][i] = 0.f;
}

// acc += x, element by element (ordinary fp32 adds, in the order of the loops).
template <int kMTiles, int kNTiles>
FJ_DEVICE void add_tile(float (&acc)[kMTiles][kNTiles][4], const float (&x)[kMTiles][kNTiles][4]) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] += x[mt][nt][i];
}

// A flat accumulator (the wgmma C fragment of one warp's rows): zeroed the same way.
template <int kN>
FJ_DEVICE void zero_tile(float (&a)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) a[i] = 0.f;
}

}  // namespace fj
