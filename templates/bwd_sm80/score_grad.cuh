// The backward's recompute of one probability from its raw score, and the score transforms'
// derivative, on the transposed tile (rows = keys, columns = query rows). The transforms are the
// forward's own (common/score_tile.cuh), in its order: softcap, then ALiBi, then the mask. The
// softcap's derivative is taken between the two: with z = cap * tanh(scale * s / cap) - bias,
// dz/ds = scale * (1 - tanh^2), and the ALiBi bias is a constant (no slope gradient). The
// scale itself is applied where dQ and dK are formed, as without softcap.
#pragma once

#include "bwd_sm80/config.cuh"
#include "common/score_tile.cuh"

namespace fj::bwd {

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

}  // namespace fj::bwd
