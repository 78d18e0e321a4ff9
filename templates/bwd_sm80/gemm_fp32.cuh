// bwd_sm80/gemm.cuh's warp product for fp32 inputs: the same tiles and orientations, with
// m16n8k8 tf32 mmas (two per k16 step of the caller) whose fragments come from scalar and 64-bit
// shared loads (ldmatrix moves 16-bit elements only). Exact mode (Fp32Math::exact) splits every
// operand x = big + small, both tf32, and sums big*big + big*small + small*big (the forward's
// 3xTF32: common/warp_gemm_sm80.cuh's split_tf32 and mma_f32); tf32 mode takes one product.
//
// The order of k within a k8 step. An mma sums over k, so any order both operands agree on gives
// the same product; each orientation pair takes the order whose reads are free of bank conflicts
// at layout.cuh's fp32 row stride (8 mod 16 words). Lane (g, t) holds logical k = t and t + 4:
//   both plain (S, dP):       at columns 2t and 2t + 1: one 64-bit load a row;
//   both transposed (dK, dV): at rows t and t + 4 (the PTX order): scalar loads, 4 rows x 8 words;
//   A plain, B transposed (dQ): at 2t + h and 2t + 1 - h, h = t / 2: A by one 64-bit load (its
//     halves swapped in lanes t >= 2), B by scalar loads at rows 0, 2, 5, 7 (and 1, 3, 4, 6)
//     over t, four distinct banks mod 4 rows (rows 2t and 2t + 1 would meet two at a time).
#pragma once

#include "bwd_sm80/config.cuh"
#include "common/warp_gemm_sm80.cuh"

namespace fj::bwd {

// split_tf32 and mma_f32 of the variant's fp32 math (the other template arguments are unused by them).
using Mma32 = sm80::WarpGemm<Elem, kDtype, kTf32, 1, 2, 2, 16, 8, 8>;
constexpr int kK8 = 8;  // k of one m16n8k8 tf32 mma
constexpr unsigned kFloatBytes = 4;

// Splits x for the variant's math (tf32 mode: small is 0 and unused).
FJ_DEVICE sm80::Tf32Pair split_of(float x) { return Mma32::split_tf32(x); }

// Whether exact mode sums each k8 step's three products from zero and adds them to the
// accumulator in fp32 (layout.cuh's kBwdFp32FreshStepAccumulators says why and where): the
// forward's gemm_pv32 measured the truncation's bias at 3e-5 over 4096 keys, and without fresh
// steps dK and dV drift by 1e-5 at 1K keys, 3e-5 at 4K and 1.2e-4 at 16K (H100,
// bench/fp32_accuracy.py; 1e-6 with them). Past the bound the accumulators take the products
// directly, as tf32 mode's do.
constexpr int kThreadAccumulators =
    kDkvMTiles * (kDkColsWarp + kDvColsWarp) / 8 * 4 +
    (2 * kSdpMTiles * kSdpNTiles > kDqMTiles * kDqNTiles ? 2 * kSdpMTiles * kSdpNTiles : kDqMTiles * kDqNTiles) * 4;
constexpr bool kFreshSteps = !kTf32 && kThreadAccumulators <= fj_layout::kBwdFp32FreshStepAccumulators;

// d += a.b for one m16n8 tile.
FJ_DEVICE void mma_step(float (&d)[4], const sm80::Tf32Pair (&a)[4], sm80::Tf32Pair b0, sm80::Tf32Pair b1) {
  if constexpr (!kFreshSteps) {
    Mma32::mma_f32(d, a, b0, b1);
  } else {
    float step[4] = {0.f, 0.f, 0.f, 0.f};
    Mma32::mma_f32(step, a, b0, b1);
#pragma unroll
    for (int i = 0; i < 4; ++i) d[i] += step[i];
  }
}

// c += A . B over kSteps k16 steps, as gemm.cuh's warp_gemm (addresses in bytes, strides in
// elements); fp32 variants only.
template <int kMTiles, int kNTiles, int kSteps, bool kATrans, int kStrideA, bool kBTrans, int kStrideB>
FJ_DEVICE void warp_gemm_fp32(float (&c)[kMTiles][kNTiles][4], unsigned a, unsigned b) {
  static_assert(!kATrans || kBTrans, "no product reads A transposed beside B plain");
  constexpr bool kMixed = !kATrans && kBTrans;  // dQ: the swapped-pairs order
  // The lane as a volatile read (common/ptx.cuh's lane_id), not `lane`: offsets derived from
  // `lane` were hoisted out of the Q-block loop and kept live across it, 4 a product, which cost
  // tf32 at D = 256 (32 x 32 on 4 warps) a spill.
  const sm80::Frag f{lane_id()};
  const unsigned g = f.g(), t = f.t();
  const bool swap = kMixed && t >= 2;  // this lane's A halves are (k t + 4, k t)
  // Each operand's lane offsets: `lo` holds logical k = t, `hi` k = t + 4 (plain: one address,
  // the 64-bit pair).
  const unsigned a_lo = kATrans ? a + (t * kStrideA + g) * kFloatBytes : a + (g * kStrideA + 2 * t) * kFloatBytes;
  const unsigned a_hi = a_lo + (kATrans ? 4 * kStrideA * kFloatBytes : 0u);
  const unsigned b_row_lo = kMixed ? 2 * t + (t >> 1) : t, b_row_hi = kMixed ? 2 * t + 1 - (t >> 1) : t + 4;
  const unsigned b_lo = kBTrans ? b + (b_row_lo * kStrideB + g) * kFloatBytes : b + (g * kStrideB + 2 * t) * kFloatBytes;
  const unsigned b_hi = kBTrans ? b + (b_row_hi * kStrideB + g) * kFloatBytes : b_lo;
#pragma unroll
  for (int kk = 0; kk < kSteps * 16 / kK8; ++kk) {
    sm80::Tf32Pair af[kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      float x[4];  // a0..a3: (row g, k t), (g + 8, t), (g, t + 4), (g + 8, t + 4)
      if constexpr (!kATrans) {
        float p0, p1, q0, q1;
        ld_shared_v2_f32(p0, p1, a_lo + (mt * 16 * kStrideA + kk * kK8) * kFloatBytes);
        ld_shared_v2_f32(q0, q1, a_lo + ((mt * 16 + 8) * kStrideA + kk * kK8) * kFloatBytes);
        x[0] = swap ? p1 : p0, x[2] = swap ? p0 : p1;
        x[1] = swap ? q1 : q0, x[3] = swap ? q0 : q1;
      } else {
        const unsigned at = (kk * kK8 * kStrideA + mt * 16) * kFloatBytes;
        x[0] = ld_shared_f32(a_lo + at), x[1] = ld_shared_f32(a_lo + at + 8 * kFloatBytes);
        x[2] = ld_shared_f32(a_hi + at), x[3] = ld_shared_f32(a_hi + at + 8 * kFloatBytes);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) af[mt][i] = split_of(x[i]);
    }
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
      float y0, y1;  // b0, b1: (k t, column g), (k t + 4, column g)
      if constexpr (!kBTrans) {
        ld_shared_v2_f32(y0, y1, b_lo + (nt * 8 * kStrideB + kk * kK8) * kFloatBytes);
      } else {
        const unsigned at = (kk * kK8 * kStrideB + nt * 8) * kFloatBytes;
        y0 = ld_shared_f32(b_lo + at), y1 = ld_shared_f32(b_hi + at);
      }
      const sm80::Tf32Pair b0 = split_of(y0), b1 = split_of(y1);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) mma_step(c[mt][nt], af[mt], b0, b1);
    }
  }
}

}  // namespace fj::bwd
