// Which Q blocks a K/V block meets, and the mask on a transposed score tile (rows = keys,
// columns = query rows). The dual of common/sequence.cuh's key_range; it moves there when a
// second family needs it. Per-element visibility comes from row_key_bounds, the one definition
// the forward masks with, so the backward cannot disagree with the forward about a key.
// left/right are the window's sides from the host (right = 0 with causal; unused without a window).
#pragma once

#include "bwd_sm80/gemm.cuh"
#include "common/sequence.cuh"

namespace fj::bwd {

// The window's right side as the mask uses it: the causal diagonal alone is right = 0.
FJ_DEVICE int window_right_of(const FjAttentionParams& p) { return kWindow ? p.window_right : 0; }

// Query rows [lo, hi) that may see some key of [n0, n0 + kBlockN). Row i sees keys
// [i + offset - left, i + offset + right], so key n is seen by rows [n - offset - right,
// n - offset + left]: rows above the block's first key's range see none of it (causal, window),
// rows below its last key's range neither (window's left side).
FJ_DEVICE void query_range(const Sequence& s, int n0, int left, int right, int& lo, int& hi) {
  lo = 0;
  hi = s.len_q;
  if constexpr (kCausal || kWindow) lo = max(0, n0 - s.offset() - right);
  if constexpr (kWindow) hi = min(hi, n0 + kBlockN - s.offset() + left);  // last key n0 + kBlockN - 1, inclusive + 1
  if (hi < lo) hi = lo;
}

// Whether query `row` does not see `key` (past the sequence's end, the causal diagonal, the
// window): its S^T entry becomes -inf, after the score transforms, as in the forward.
FJ_DEVICE bool key_hidden(int key, int row, const Sequence& s, int left, int right) {
  int lo, hi;
  row_key_bounds<kCausal, kWindow>(row, s, left, right, lo, hi);
  return row >= s.len_q || key < lo || key > hi;
}

// Whether any entry of the tile (keys [n0, n0 + kBlockN), rows [m0, m0 + kBlockM)) is masked:
// past either sequence's end, right of the first row's last key (causal diagonal, window's
// right side) or left of the last row's first key (window's left side).
FJ_DEVICE bool tile_needs_mask(int n0, int m0, const Sequence& s, int left, int right) {
  const bool ends = n0 + kBlockN > s.len_k || m0 + kBlockM > s.len_q;
  const bool upper = (kCausal || kWindow) && n0 + kBlockN - 1 > m0 + s.offset() + right;
  const bool lower = kWindow && n0 < m0 + kBlockM - 1 + s.offset() - left;
  return ends || upper || lower;
}

}  // namespace fj::bwd
