// The warp-level product every one of the backward's five products is: a warp's tile of
// C (kMTiles m16 tiles x kNTiles n8 tiles, fp32, m16n8 C layout) += A . B over kSteps k16 steps,
// both operands read from shared memory (16-bit) with ldmatrix, in whichever orientation they
// are stored:
//   A (m x k): kATrans false: stored [m][k] (k contiguous) -> ldmatrix; true: stored [k][m] -> ldmatrix.trans
//   B (k x n): kBTrans false: stored [n][k] (k contiguous) -> ldmatrix; true: stored [k][n] -> ldmatrix.trans
// The five (bwd_sm80/backward.cu):
//   S   = Q  . K^T   A = Q [row][d],        B = K [key][d]     (plain, plain)
//   dP  = dO . V^T   A = dO [row][d],       B = V [key][d]     (plain, plain)
//   dV += P^T . dO   A = P [row][key],      B = dO [row][d]    (trans, trans)
//   dK += dS^T . Q   A = dS [row][key],     B = Q [row][d]     (trans, trans)
//   dQ  = dS . K     A = dS [row][key],     B = K [key][d]     (plain, trans)
// so P and dS, written once to shared memory (in 16 bits; fp32 for fp32 inputs), are read by two
// products each in two orientations, and every warp's fragments serve all of its tile's mmas
// (the reuse the earlier one-warp-per-16-keys layout lacked: each of its warps re-read all of Q
// and dO per product). fp32 inputs take bwd_sm80/gemm_fp32.cuh's tf32 product instead.
#pragma once

#include "bwd_sm80/config.cuh"
#include "bwd_sm80/gemm_fp32.cuh"
#include "common/smem_swizzle.cuh"
#include "common/warp_gemm_sm80.cuh"

namespace fj::bwd {

using sm80::Frag;
// mma16 and pack16 of the variant's 16-bit type (common/warp_gemm_sm80.cuh's; the other
// template arguments are unused by them).
using Mma16 = sm80::WarpGemm<Elem, kDtype, kTf32, 1, 2, 2, 16, 8, 8>;

// a and b: shared-space addresses (common/ptx.cuh's smem_addr, in bytes) of the warp tile's
// first m row / k row and first n column / k row as stored (kASwizzled, kBSwizzled: in a
// swizzled tile, the logical address; its rows start at multiples of 8). All address arithmetic
// stays in 32 bits, so each load's offset is the lane's (computed once) plus a constant ptxas
// folds into the instruction (swizzled: plus one of a few lane values, common/smem_swizzle.cuh).
template <int kMTiles, int kNTiles, int kSteps, bool kATrans, int kStrideA, bool kBTrans, int kStrideB,
          bool kASwizzled = false, bool kBSwizzled = false>
FJ_DEVICE void warp_gemm(float (&c)[kMTiles][kNTiles][4], unsigned a, unsigned b, int lane) {
  if constexpr (!k16Bit) {
    static_assert(!kASwizzled && !kBSwizzled, "fp32 tiles are padded (layout.cuh)");
    warp_gemm_fp32<kMTiles, kNTiles, kSteps, kATrans, kStrideA, kBTrans, kStrideB>(c, a, b);
    return;
  }
  static_assert(kNTiles % 2 == 0, "B is loaded two n8 tiles at a time (one ldmatrix.x4)");
  constexpr unsigned kBytes = sizeof(Elem);
  // Each lane's row and column within the four 8x8 matrices of one ldmatrix.x4:
  const unsigned r8 = lane & 7, m1 = (lane >> 3) & 1, m2 = lane >> 4;
  // A: plain, matrices m 0-7 / k 0-7, m 8-15 / k 0-7, m 0-7 / k 8-15, m 8-15 / k 8-15 (the A
  // layout's a0..a3); transposed, the same four matrices from [k][m] storage.
  const unsigned lane_a = kATrans ? ((r8 + m2 * 8) * kStrideA + m1 * 8) * kBytes
                                  : ((unsigned(lane) & 15) * kStrideA + m2 * 8) * kBytes;
  // B: plain, matrices n 0-7 / k 0-7, n 0-7 / k 8-15, n 8-15 / k 0-7, n 8-15 / k 8-15; transposed
  // from [k][n] storage, k 0-7 / n 0-7, k 8-15 / n 0-7, k 0-7 / n 8-15, k 8-15 / n 8-15.
  const unsigned lane_b = kBTrans ? ((r8 + m1 * 8) * kStrideB + m2 * 8) * kBytes : ((r8 + m2 * 8) * kStrideB + m1 * 8) * kBytes;
  a += lane_a;
  b += lane_b;
  // Every row an ldmatrix below reads is its lane's row (r8, or lane & 15) plus a multiple of 8,
  // so all of them share the lane's swizzle phase.
  const unsigned phase16 = r8 << kSwizzleChunkShift;
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
    unsigned af[kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      if constexpr (!kATrans)
        ldmatrix_x4_at(af[mt], shared_at<kASwizzled>(a, (mt * 16 * kStrideA + kk * 16) * kBytes, phase16));
      else
        ldmatrix_x4_trans_at(af[mt], shared_at<kASwizzled>(a, (kk * 16 * kStrideA + mt * 16) * kBytes, phase16));
    }
#pragma unroll
    for (int np = 0; np < kNTiles / 2; ++np) {
      unsigned bf[4];
      if constexpr (!kBTrans)
        ldmatrix_x4_at(bf, shared_at<kBSwizzled>(b, (np * 16 * kStrideB + kk * 16) * kBytes, phase16));
      else
        ldmatrix_x4_trans_at(bf, shared_at<kBSwizzled>(b, (kk * 16 * kStrideB + np * 16) * kBytes, phase16));
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        Mma16::mma16(c[mt][2 * np], af[mt], bf[0], bf[1]);
        Mma16::mma16(c[mt][2 * np + 1], af[mt], bf[2], bf[3]);
      }
    }
  }
}

}  // namespace fj::bwd
