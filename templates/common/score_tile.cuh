// What happens to a tile of scores between S = Q.K^T and the softmax, for every forward family
// whose scores sit in the m16n8 C layout (mma.sync and wgmma alike): each thread holds rows g
// and g+8 of every 16-row tile, columns 2t and 2t+1 of every n8 tile, and the four threads of a
// quad share a row. The transforms (softcap, ALiBi), then the mask (sequence end, causal
// diagonal, sliding window), in FlashAttention's order.
#pragma once

#include "common/attention_params.cuh"
#include "common/ptx.cuh"
#include "common/sequence.cuh"
#include "common/variant_types.cuh"

namespace fj {

// Sets scores of keys this thread's rows do not see to -inf. A tile crossing only the upper
// edge (the sequence's end, the causal diagonal, the window's right side) checks only that edge,
// one crossing only the window's left edge only that one: one compare a score instead of three.
// row_base: this thread's row g of m-tile 0 in sequence rows; col_base: its first column.
template <bool kLowerEdge, bool kUpperEdge, int kMTiles, int kNTiles>
FJ_DEVICE void apply_mask(float (&s)[kMTiles][kNTiles][4], int row_base, int col_base, const Sequence& seq, int left,
                          int right) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int lo, hi;
      row_key_bounds<var::kCausal, cfg::kWindow>(row_base + mt * 16 + h * 8, seq, left, right, lo, hi);
      lo -= col_base;  // compare against the tile's own column offsets, which are constants
      hi -= col_base;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = nt * 8 + e;
          if ((kUpperEdge && c > hi) || (kLowerEdge && c < lo)) s[mt][nt][2 * h + e] = neg_inf();
        }
      }
    }
  }
}

// Which edges of the visible keys cut a tile of keys [n0, n0 + kNTiles * 8), for rows whose
// first row sees keys up to `full_to` and whose last row sees keys from `full_from` (the window's
// left side): tiles inside both are left alone.
struct TileEdges {
  int full_from, full_to;

  // Bounds for rows [first_row, last_row] of sequence `seq` (left/right: the window's sides).
  FJ_DEVICE static TileEdges of(const Sequence& seq, int first_row, int last_row, int left, int right) {
    return {cfg::kWindow ? last_row + seq.offset() - left : 0, first_row + seq.offset() + (cfg::kWindow ? right : 0)};
  }

  template <int kMTiles, int kNTiles>
  FJ_DEVICE void mask(float (&s)[kMTiles][kNTiles][4], int n0, int row_base, int col_base, const Sequence& seq,
                      int left, int right) const {
    const bool upper = n0 + kNTiles * 8 > seq.len_k || ((var::kCausal || cfg::kWindow) && n0 + kNTiles * 8 - 1 > full_to);
    const bool lower = cfg::kWindow && n0 < full_from;
    if (upper && lower) apply_mask<true, true>(s, row_base, col_base, seq, left, right);
    else if (upper) apply_mask<false, true>(s, row_base, col_base, seq, left, right);
    else if (cfg::kWindow && lower) apply_mask<true, false>(s, row_base, col_base, seq, left, right);
  }
};

// The softcap's tanh(scale * s / cap) of a raw score s: the forward scales it by cap (in log2
// units) and the backward also needs it bare, for the derivative 1 - tanh^2.
FJ_DEVICE float softcap_tanh(float x, const FjAttentionParams& p) {
  // fp32 keeps its 1e-5 error bound only with the accurate tanh.
  const float t = x * p.softcap_scale;
  return var::k16Bit || var::kTf32 ? tanh_fast(t) : tanhf(t);
}

// ALiBi's bias -slope * |row + offset - col|, in the scores' units (slope from alibi_slope_of).
FJ_DEVICE void add_alibi(float& x, int row, int col, int offset, float alibi_slope) {
  x -= alibi_slope * float(abs(row + offset - col));
}

// Whether the variant transforms scores at all: a family skips the pass over a tile without one,
// so a new transform is a term here and a line in transform_score. A function, not a constant:
// a namespace-scope constant is emitted into the cubin's constant bank.
FJ_DEVICE constexpr bool transforms_scores() { return cfg::kSoftcap || cfg::kAlibi; }

// The score transforms of one score x at (row, col), in FlashAttention's order: softcap (cap *
// tanh(scale * s / cap), which leaves scores in log2 units), then ALiBi (-slope * |row + offset
// - col|, in the scores' units). The one definition every family applies.
FJ_DEVICE void transform_score(float& x, int row, int col, int offset, const FjAttentionParams& p,
                               float alibi_slope) {
  if constexpr (cfg::kSoftcap) x = p.softcap_log2 * softcap_tanh(x, p);
  if constexpr (cfg::kAlibi) add_alibi(x, row, col, offset, alibi_slope);
}

// transform_score over a tile whose rows share one ALiBi slope (one query head).
template <int kMTiles, int kNTiles>
FJ_DEVICE void transform_scores(float (&s)[kMTiles][kNTiles][4], int row_base, int col_base, int offset,
                                const FjAttentionParams& p, float alibi_slope) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row_base + mt * 16 + h * 8;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) transform_score(s[mt][nt][2 * h + e], row, col_base + nt * 8 + e, offset, p, alibi_slope);
      }
    }
  }
}

// This CTA's ALiBi slope in score units (0 without ALiBi); `b` indexes the slopes' batch dim,
// which varlen keeps per sequence.
FJ_DEVICE float alibi_slope_of(const FjAttentionParams& p, int b, int head) {
  return cfg::kAlibi ? p.alibi_slopes[b * p.alibi_batch_stride + head] * p.alibi_unit : 0.f;
}

}  // namespace fj
