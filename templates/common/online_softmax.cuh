// The streaming softmax of FlashAttention over score tiles in the m16n8 C layout: each thread
// holds rows g and g+8 of every 16-row tile, columns 2t and 2t+1 of every n8 tile, and the four
// threads of a quad share a row. Shared by the forward families, mma.sync and wgmma alike.
#pragma once

#include "common/ptx.cuh"
#include "common/row_total.cuh"  // the end of a row, for the softmax's users

// Developer switch for A/B timing through FLASHJIT_NVRTC_OPTIONS (part of the cache key):
// FJ_LAZY_RESCALE=1 moves the max only when a tile's max exceeds it by more than 2^8, which
// skips most O rescales (fa2_sm80: 1-5% faster on the H100) but leaves a row's largest
// probability at 2^d for some d in (0, 8] instead of exactly 1, and its 16-bit rounding is then
// the largest single error of a peaked row: 1.2-1.26x cuDNN's error at score std 3 and 8
// (issue 21; bench/NOTES.md). Off by default: the max moves on every increase, as FA2 does.
#ifndef FJ_LAZY_RESCALE
#define FJ_LAZY_RESCALE 0
#endif
namespace fj {

// kVotePerHalf: rescale() votes once per row half (a thread's rows g and g+8 of each 16-row
// tile: 8 rows of a warp each) and multiplies only the halves where some row's max moved,
// instead of all of the warp's O when any of its 16 rows moved. On random scores a row's max
// moves on about 1/j of its j-th tile, so 8-row halves skip more often; the extra votes cost
// where O is small (decode_sm80: -0.8% at B = 1, 32K keys on the H200; bench/NOTES.md entry 24).
template <int kMTiles, int kNTilesS, int kNTilesO, bool kVotePerHalf = false>
struct OnlineSoftmax {
  float row_max[kMTiles][2];  // running max of raw scores (unscaled)
  float row_sum[kMTiles][2];  // this thread's partial sum of exp; quads reduce it at the end

  FJ_DEVICE void init() {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        row_max[mt][h] = neg_inf();
        row_sum[mt][h] = 0.f;
      }
  }

  // Turns scores into probabilities relative to the running max and rescales what o and row_sum
  // hold so far. The max moves when a tile's max exceeds it by more than kRescaleThreshold (log2
  // units; 0 unless FJ_LAZY_RESCALE), so a row's largest probability is exactly 1 and the 16-bit
  // P fed to P.V rounds only the smaller ones. The O rescale (one multiply per output element)
  // runs only for warps where some row's max moved. A row that has seen only masked keys keeps
  // max = -inf; its probabilities are exp2(-inf) = 0 and it never produces NaN.
  FJ_DEVICE void update(float (&s)[kMTiles][kNTilesS][4], float (&o)[kMTiles][kNTilesO][4],
                        float scale_log2) {
    float alpha[kMTiles][2];
    const bool any_rescale = probabilities(s, scale_log2, alpha);
    rescale(o, alpha, any_rescale);
  }

  // update()'s first half, for kernels whose O is still being accumulated by an asynchronous
  // GEMM: scores to probabilities and the running max and sums moved; the factor O must be
  // multiplied by is left in alpha, and the return value says whether any row of the warp needs it.
  FJ_DEVICE bool probabilities(float (&s)[kMTiles][kNTilesS][4], float scale_log2, float (&alpha)[kMTiles][2]) {
    bool any_rescale = false;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        any_rescale |= move_row_max(s, mt, h, scale_log2, alpha);
        exponentiate_row<0, kNTilesS>(s, mt, h, scale_log2);
      }
    return __any_sync(0xffffffffu, any_rescale);
  }

  // probabilities() in parts, for a kernel that waits for O's GEMM between them and multiplies O
  // by alpha (rescale_all) among the exponentials of later columns, where the multiplies may fill
  // the issue slots the exponentials' latency leaves: every row's max moved, then the
  // probabilities of n8 tiles [kFrom, kTo).
  FJ_DEVICE void move_max(const float (&s)[kMTiles][kNTilesS][4], float scale_log2, float (&alpha)[kMTiles][2]) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) move_row_max(s, mt, h, scale_log2, alpha);
  }
  template <int kFrom, int kTo>
  FJ_DEVICE void exponentiate(float (&s)[kMTiles][kNTilesS][4], float scale_log2) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) exponentiate_row<kFrom, kTo>(s, mt, h, scale_log2);
  }

  // Row (mt, h)'s max moved to the tile's where that is larger (its sum scaled by alpha);
  // whether it moved.
  FJ_DEVICE bool move_row_max(const float (&s)[kMTiles][kNTilesS][4], int mt, int h, float scale_log2,
                              float (&alpha)[kMTiles][2]) {
    constexpr float kRescaleThreshold = FJ_LAZY_RESCALE ? 8.f : 0.f;
    float mx = neg_inf();
#pragma unroll
    for (int nt = 0; nt < kNTilesS; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
    mx = quad_max(mx);
    const float old = row_max[mt][h];
    const bool move = mx != neg_inf() && (old == neg_inf() || (mx - old) * scale_log2 > kRescaleThreshold);
    alpha[mt][h] = 1.f;
    if (move) {
      alpha[mt][h] = exp2_approx((old - mx) * scale_log2);  // 0 when old is -inf
      row_max[mt][h] = mx;
      row_sum[mt][h] *= alpha[mt][h];
    }
    return move;
  }

  // Row (mt, h)'s probabilities in n8 tiles [kFrom, kTo), relative to its max, added to its sum.
  template <int kFrom, int kTo>
  FJ_DEVICE void exponentiate_row(float (&s)[kMTiles][kNTilesS][4], int mt, int h, float scale_log2) {
    const float shift = row_max[mt][h] == neg_inf() ? 0.f : row_max[mt][h] * scale_log2;
    float sum = 0.f;
#pragma unroll
    for (int nt = kFrom; nt < kTo; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float p = exp2_approx(fmaf(s[mt][nt][2 * h + e], scale_log2, -shift));
        s[mt][nt][2 * h + e] = p;
        sum += p;
      }
    }
    row_sum[mt][h] += sum;
  }

  // O times alpha, every element, with no branch (a multiply by 1 where the max stayed).
  FJ_DEVICE void rescale_all(float (&o)[kMTiles][kNTilesO][4], const float (&alpha)[kMTiles][2]) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNTilesO; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) o[mt][nt][i] *= alpha[mt][i / 2];
  }

  // update()'s second half. Warp-uniform: skips the multiply over all of O (or, kVotePerHalf, a
  // row half of it) unless some row of the warp (of the half) moved its max.
  FJ_DEVICE void rescale(float (&o)[kMTiles][kNTilesO][4], const float (&alpha)[kMTiles][2], bool any_rescale) {
    if constexpr (kVotePerHalf) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          if (__any_sync(0xffffffffu, alpha[mt][h] != 1.f)) {  // warp-uniform: a branch, not predicates
#pragma unroll
            for (int nt = 0; nt < kNTilesO; ++nt) {
              o[mt][nt][2 * h] *= alpha[mt][h];
              o[mt][nt][2 * h + 1] *= alpha[mt][h];
            }
          }
    } else if (any_rescale) {
      rescale_all(o, alpha);
    }
  }
};

}  // namespace fj
