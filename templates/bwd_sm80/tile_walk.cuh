// Which Q blocks a K/V block meets, and the mask on a transposed score tile (rows = keys,
// columns = query rows). The dual of common/sequence.cuh's key_range; it moves there when a
// second family needs it. Per-element visibility comes from row_key_bounds, the one definition
// the forward masks with, so the backward cannot disagree with the forward about a key.
#pragma once

#include "bwd_sm80/gemm.cuh"
#include "common/sequence.cuh"

namespace fj::bwd {

// Query rows [lo, hi) that may see some key of [n0, n0 + kBlockN): with the bottom-right causal
// diagonal, row i sees keys up to i + offset, so rows below n0 - offset see none of the block.
FJ_DEVICE void query_range(const Sequence& s, int n0, int& lo, int& hi) {
  lo = 0;
  hi = s.len_q;
  if constexpr (kCausal) lo = max(0, n0 - s.offset());
  if (hi < lo) hi = lo;
}

// Sets S^T entries of keys a query row does not see to -inf (the sequence's end, the causal
// diagonal). st holds rows key_row0 + kt*16 + g (+8) and columns 2t (+1) of every n8 tile.
FJ_DEVICE void mask_transposed(float (&st)[kKeyTiles][kNTilesM][4], int key_row0, int m0, const Sequence& s,
                               int lane) {
  const Frag f{lane};
#pragma unroll
  for (int kt = 0; kt < kKeyTiles; ++kt)
#pragma unroll
    for (int nt = 0; nt < kNTilesM; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = key_row0 + kt * 16 + f.g() + (i / 2) * 8;
        const int row = m0 + nt * 8 + 2 * f.t() + (i & 1);
        int lo, hi;
        row_key_bounds<kCausal, kWindow>(row, s, 0, 0, lo, hi);
        if (row >= s.len_q || key < lo || key > hi) st[kt][nt][i] = neg_inf();
      }
}

// Whether any entry of the tile (keys [n0, n0 + kBlockN), rows [m0, m0 + kBlockM)) is masked:
// past either sequence's end, or above the causal diagonal of the block's first row.
FJ_DEVICE bool tile_needs_mask(int n0, int m0, const Sequence& s) {
  return n0 + kBlockN > s.len_k || m0 + kBlockM > s.len_q || (kCausal && n0 + kBlockN - 1 > m0 + s.offset());
}

}  // namespace fj::bwd
