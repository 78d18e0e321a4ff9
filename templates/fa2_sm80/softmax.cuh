// Masking and the online (streaming) softmax over score tiles in the m16n8 C layout: each
// thread holds rows g and g+8 of every 16-row tile, columns 2t and 2t+1 of every n8 tile, and
// the four threads of a quad share a row.
#pragma once

#include "fa2_sm80/config.cuh"

namespace fj::fa2 {

// Sets scores of keys past seqlen_k, and (causal) keys past a row's diagonal, to -inf.
// row_base: the global query index of this thread's row g in m-tile 0.
FJ_DEVICE void apply_mask(float (&s)[kMTiles][kNTilesS][4], int row_base, int col_base,
                          int seqlen_k, int causal_offset) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row_base + mt * 16 + h * 8;
      const int limit = kCausal ? min(seqlen_k, row + causal_offset + 1) : seqlen_k;
#pragma unroll
      for (int nt = 0; nt < kNTilesS; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (col_base + nt * 8 + e >= limit) s[mt][nt][2 * h + e] = neg_inf();
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

  // Turns scores into probabilities relative to the new running max and rescales what o and
  // row_sum hold so far. A row that has seen only masked keys keeps max = -inf; its
  // probabilities are exp2(-inf) = 0 and it never produces NaN.
  FJ_DEVICE void update(float (&s)[kMTiles][kNTilesS][4], float (&o)[kMTiles][kNTilesO][4],
                        float scale_log2) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = row_max[mt][h];
#pragma unroll
        for (int nt = 0; nt < kNTilesS; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
        mx = quad_max(mx);
        const float shift = mx == neg_inf() ? 0.f : mx * scale_log2;
        const float alpha = exp2_approx(row_max[mt][h] * scale_log2 - shift);
        row_max[mt][h] = mx;
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
        row_sum[mt][h] = fmaf(row_sum[mt][h], alpha, sum);
#pragma unroll
        for (int nt = 0; nt < kNTilesO; ++nt) {
          o[mt][nt][2 * h] *= alpha;
          o[mt][nt][2 * h + 1] *= alpha;
        }
      }
    }
  }
};

}  // namespace fj::fa2
