// Masking and the online (streaming) softmax over score tiles in the m16n8 C layout: each
// thread holds rows g and g+8 of every 16-row tile, columns 2t and 2t+1 of every n8 tile, and
// the four threads of a quad share a row.
#pragma once

#include "common/online_softmax.cuh"
#include "common/sequence.cuh"
#include "fa2_sm80/config.cuh"


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

using SoftmaxState = OnlineSoftmax<kMTiles, kNTilesS, kNTilesO>;

}  // namespace fj::fa2
