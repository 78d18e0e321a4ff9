// Masking and the online (streaming) softmax over score tiles in the m16n8 C layout: each
// thread holds rows g and g+8 of every 16-row tile, columns 2t and 2t+1 of every n8 tile, and
// the four threads of a quad share a row.
#pragma once

#include "common/sequence.cuh"
#include "fa2_sm80/config.cuh"

// Developer switch for A/B timing through FLASHJIT_NVRTC_OPTIONS (part of the cache key):
// FJ_LAZY_RESCALE=0 moves the max on every increase, as FA2 does. Measured on the H100,
// default tilings, fp16: lazy is 1-5% faster at D=64 and D=128 except D=128 S=16384
// non-causal (346 vs 358 TFLOP/s); see bench/NOTES.md.
#ifndef FJ_LAZY_RESCALE
#define FJ_LAZY_RESCALE 1
#endif

namespace fj::fa2 {

// Sets scores of keys this thread's rows do not see to -inf. A tile crossing only the upper
// edge (the sequence's end, the causal diagonal, the window's right side) checks only that edge,
// one crossing only the window's left edge only that one: one compare a score instead of three.
// row_base: this thread's row g of m-tile 0 in sequence rows.
template <bool kLowerEdge, bool kUpperEdge>
FJ_DEVICE void apply_mask(float (&s)[kMTiles][kNTilesS][4], int row_base, int col_base, const Sequence& seq,
                          int left, int right) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int lo, hi;
      row_key_bounds<kCausal, kWindow>(row_base + mt * 16 + h * 8, seq, left, right, lo, hi);
      lo -= col_base;  // compare against the tile's own column offsets, which are constants
      hi -= col_base;
#pragma unroll
      for (int nt = 0; nt < kNTilesS; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = nt * 8 + e;
          if ((kUpperEdge && c > hi) || (kLowerEdge && c < lo)) s[mt][nt][2 * h + e] = neg_inf();
        }
      }
    }
  }
}

// The score transforms, in FlashAttention's order: softcap (cap * tanh(scale * s / cap), which
// leaves scores in log2 units), then ALiBi (-slope * |row + offset - col|, in the scores' units).
FJ_DEVICE void transform_scores(float (&s)[kMTiles][kNTilesS][4], int row_base, int col_base, int offset,
                                const FjAttentionParams& p, float alibi_slope) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row_base + mt * 16 + h * 8;
#pragma unroll
      for (int nt = 0; nt < kNTilesS; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[mt][nt][2 * h + e];
          if constexpr (kSoftcap) {
            // fp32 keeps its 1e-5 error bound only with the accurate tanh.
            const float t = x * p.softcap_scale;
            x = p.softcap_log2 * (k16Bit || kTf32 ? tanh_fast(t) : tanhf(t));
          }
          if constexpr (kAlibi) x -= alibi_slope * float(abs(row + offset - (col_base + nt * 8 + e)));
        }
      }
    }
  }
}

struct SoftmaxState {
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
  // hold so far. The max is only moved when a tile's max exceeds it by more than
  // kRescaleThreshold (log2 units): probabilities may then reach 2^8, which fp32 sums and
  // 16-bit P hold as precisely as values below 1, and the O rescale (one multiply per output
  // element) is skipped for nearly every tile. Exact either way: the final division and the LSE
  // use the same max. A row that has seen only masked keys keeps max = -inf; its probabilities
  // are exp2(-inf) = 0 and it never produces NaN.
  FJ_DEVICE void update(float (&s)[kMTiles][kNTilesS][4], float (&o)[kMTiles][kNTilesO][4],
                        float scale_log2) {
    constexpr float kRescaleThreshold = FJ_LAZY_RESCALE ? 8.f : 0.f;
    float alpha[kMTiles][2];
    bool any_rescale = false;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
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
          any_rescale = true;
        }
        const float shift = row_max[mt][h] == neg_inf() ? 0.f : row_max[mt][h] * scale_log2;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNTilesS; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float p = exp2_approx(fmaf(s[mt][nt][2 * h + e], scale_log2, -shift));
            s[mt][nt][2 * h + e] = p;
            sum += p;
          }
        }
        row_sum[mt][h] += sum;
      }
    }
    // Warp-uniform: skip the multiply over all of O unless some row of the warp moved its max.
    if (__any_sync(0xffffffffu, any_rescale)) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNTilesO; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) o[mt][nt][i] *= alpha[mt][i / 2];
    }
  }
};

}  // namespace fj::fa2
