// The backward's element-wise step between the score products and the gradient products: from
// a warp's tiles of raw scores S and of dP (m16n8 C layout: rows = query rows, columns = keys),
// P = exp2(z * scale_log2 - LSE log2 e) and dS = P (dP - D) dz/ds, where z is the forward's
// transformed score. The transforms are the forward's own (common/score_tile.cuh), in its order:
// softcap, then ALiBi, then the mask. The softcap's derivative is taken between the two: with
// z = cap * tanh(scale * s / cap) - bias, dz/ds = scale * (1 - tanh^2), and the ALiBi bias is a
// constant (no slope gradient). The scale itself is applied where dQ and dK are formed, as
// without softcap.
//
// Two orders (backward.cu's kProbsFirst). P between the two products, so that its exponentials
// run under dP's mma instructions (FlashAttention-2's order), and dS after dP: without softcap
// and without a mask by position. Else P and dS after both products in one pass: the softcap's
// factor never needs a register tile, and under causal or window masks the first order measured
// 2.5-4% slower at D 64 and 128 (spilling 16 B at D 64; bench/NOTES.md entry 37).
#pragma once

#include "bwd_sm80/config.cuh"
#include "bwd_sm80/tile_walk.cuh"
#include "common/row_total.cuh"
#include "common/score_tile.cuh"
#include "common/sequence.cuh"
#include "common/warp_gemm_sm80.cuh"

namespace fj::bwd {

FJ_DEVICE float pos_inf() { return __int_as_float(0x7f800000); }

// Replaces the raw score x of (query `row`, key `col`) by its transformed score, in the units
// exp2 takes after multiplying by `score_scale` (log2 units with softcap), and returns the
// factor dS is multiplied by (1 without softcap).
FJ_DEVICE float transform_with_grad(float& x, int row, int col, int offset, const FjAttentionParams& p,
                                    float alibi_slope) {
  float factor = 1.f;
  if constexpr (kSoftcap) {
    const float t = softcap_tanh(x, p);
    x = p.softcap_log2 * t;
    factor = 1.f - t * t;
  }
  if constexpr (kAlibi) add_alibi(x, row, col, offset, alibi_slope);
  return factor;
}

// A row's LSE as P's exponent takes it: in log2 units, and +inf (P = 0 for every key) for a row
// that saw no key (the forward wrote -inf: its P would be exp2(-inf + inf) = NaN on the masked
// keys) or past the sequence's end (lse: -inf). preprocess computes it once a row
// (FjBackwardParams::lse_log2) rather than every K/V block once a Q block.
FJ_DEVICE float exponent_lse(float lse) { return lse == neg_inf() ? pos_inf() : lse * kLog2e; }

// s (raw scores) becomes P, for a warp tile whose thread rows are row_base + mt * 16 + h * 8
// (sequence rows; h = 0, 1) and columns key_base + nt * 8 + e (keys; e = 0, 1); kWithGrads: dp
// becomes dS in the same pass (the softcap order), else dp is not read. lse: each row's
// exponent_lse; dsum: each row's D = rowsum(dO * O). kMasked: the tile crosses an edge of the
// visible keys (tile_needs_mask), so each score is checked against its row's bounds.
template <bool kMasked, bool kWithGrads, int kMTiles, int kNTiles>
FJ_DEVICE void scores_to_probs(float (&s)[kMTiles][kNTiles][4], float (&dp)[kMTiles][kNTiles][4],
                               const float (&lse)[kMTiles][2], const float (&dsum)[kMTiles][2], int row_base,
                               int key_base, const Sequence& seq, int left, int right, const FjAttentionParams& f,
                               float alibi_slope) {
  const float score_scale = kScoresInLog2 ? 1.f : f.scale_log2;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row_base + mt * 16 + h * 8;
      int lo = 0, hi = 0;
      if constexpr (kMasked) {
        row_key_bounds<kCausal, kWindow>(row, seq, left, right, lo, hi);
        lo -= key_base;  // compared with the tile's own column offsets, which are constants
        hi -= key_base;
      }
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = nt * 8 + e, key = key_base + c;
          float& x = s[mt][nt][2 * h + e];
          const float factor = transform_with_grad(x, row, key, seq.offset(), f, alibi_slope);
          // Keys left of a row's first are masked only under a window (else it is key 0).
          if (kMasked && ((kWindow && c < lo) || c > hi)) x = neg_inf();
          x = exp2_approx(fmaf(x, score_scale, -lse[mt][h]));
          if constexpr (kWithGrads) {
            float& d = dp[mt][nt][2 * h + e];
            d = x * (d - dsum[mt][h]) * factor;
          }
        }
    }
}

// scores_to_probs over a warp tile of kRows x kKeys (rows tile_row0 + ..., keys tile_key0 + ...,
// in the sequence), masked only where it crosses an edge of the visible keys.
template <bool kWithGrads, int kRows, int kKeys, int kMTiles, int kNTiles>
FJ_DEVICE void form_probs(float (&s)[kMTiles][kNTiles][4], float (&dp)[kMTiles][kNTiles][4],
                          const float (&lse)[kMTiles][2], const float (&dsum)[kMTiles][2], int tile_row0,
                          int tile_key0, const sm80::Frag& fr, const Sequence& seq, int left, int right,
                          const FjAttentionParams& f, float alibi_slope) {
  const int row_base = tile_row0 + fr.g(), key_base = tile_key0 + 2 * fr.t();
  if (tile_needs_mask<kRows, kKeys>(tile_key0, tile_row0, seq, left, right))
    scores_to_probs<true, kWithGrads>(s, dp, lse, dsum, row_base, key_base, seq, left, right, f, alibi_slope);
  else
    scores_to_probs<false, kWithGrads>(s, dp, lse, dsum, row_base, key_base, seq, left, right, f, alibi_slope);
}

// dp becomes dS = P (dP - D), P from scores_to_probs (the order without softcap: no factor).
template <int kMTiles, int kNTiles>
FJ_DEVICE void probs_to_grads(const float (&p)[kMTiles][kNTiles][4], float (&dp)[kMTiles][kNTiles][4],
                              const float (&dsum)[kMTiles][2]) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) dp[mt][nt][i] = p[mt][nt][i] * (dp[mt][nt][i] - dsum[mt][i / 2]);
}

}  // namespace fj::bwd
