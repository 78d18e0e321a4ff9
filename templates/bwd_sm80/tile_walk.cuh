// Which Q blocks a K/V block meets, and which warp tiles of scores need the mask. query_range
// is the dual of common/sequence.cuh's key_range; it moves there when a second family needs
// it. Per-element visibility comes from row_key_bounds, the one definition
// the forward masks with, so the backward cannot disagree with the forward about a key.
// left/right are the window's sides from the host (right = 0 with causal; unused without a window).
#pragma once

#include "bwd_sm80/config.cuh"
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

// The Q blocks [first, end) the K/V block at n0 walks: those holding rows of query_range, cut
// at the workspace's rows_cap (seqlen_q_rounded); none for a block past the sequence's keys
// (varlen, kv_lens: only its zeros are written) or with no row. Both ends grow with n0 and the
// walk is empty only below or above the blocks that have rows, so the K/V blocks that walk a
// given Q block are consecutive: dq_order.cuh counts on it.
struct QBlocks {
  int first, end;
  FJ_DEVICE bool has(int m_block) const { return first <= m_block && m_block < end; }
};
FJ_DEVICE QBlocks q_blocks_of(const Sequence& s, int n0, int left, int right, int rows_cap) {
  int lo, hi;
  query_range(s, n0, left, right, lo, hi);
  hi = min(hi, rows_cap);
  if (n0 >= s.len_k || hi <= lo) return {0, 0};
  return {lo / kBlockM, (hi + kBlockM - 1) / kBlockM};
}

// Whether any score of a warp's tile (keys [key0, key0 + kKeys), query rows [row0, row0 +
// kRows)) is masked: keys past the sequence's end, right of the first row's last key (causal
// diagonal, window's right side) or left of the last row's first key (window's left side).
// Rows past the sequence's end are not masked: their Q and dO load as zeros and their LSE
// reads as +inf (bwd_sm80/score_grad.cuh), so their P and dS are 0 anyway.
template <int kRows, int kKeys>
FJ_DEVICE bool tile_needs_mask(int key0, int row0, const Sequence& s, int left, int right) {
  const bool end = key0 + kKeys > s.len_k;
  const bool upper = (kCausal || kWindow) && key0 + kKeys - 1 > row0 + s.offset() + right;
  const bool lower = kWindow && key0 < row0 + kRows - 1 + s.offset() - left;
  return end || upper || lower;
}

}  // namespace fj::bwd
