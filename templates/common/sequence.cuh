// Where one sequence of a batch lives and which of its keys a block of query rows may see:
// shared by the forward families. Everything here is in the sequence's own row numbers.
#pragma once

#include "common/attention_params.cuh"
#include "common/ptx.cuh"

namespace fj {

struct Sequence {
  int q_start;  // first row of the sequence in the q/o tensors' seq dim (0 unless varlen)
  int k_start;  // likewise in k/v
  int len_q;
  int len_k;
  int batch;    // index into the tensors' batch dim (0 with varlen: one packed batch)
  // The bottom-right diagonal: query i lines up with key i + offset().
  FJ_DEVICE int offset() const { return len_k - len_q; }
};

// Sequence b: fixed sizes, or a varlen batch's prefix sums clamped to the tensors, so bad
// prefix sums shorten a sequence but never reach outside q, k, v or o.
template <bool kIsVarlen>
FJ_DEVICE Sequence sequence_of(const FjAttentionParams& p, int b) {
  if constexpr (kIsVarlen) {
    const int q0 = min(max(p.cu_seqlens_q[b], 0), p.total_q);
    const int q1 = min(max(p.cu_seqlens_q[b + 1], q0), p.total_q);
    const int k0 = min(max(p.cu_seqlens_k[b], 0), p.total_k);
    const int k1 = min(max(p.cu_seqlens_k[b + 1], k0), p.total_k);
    return {q0, k0, q1 - q0, k1 - k0, 0};
  } else {
    return {0, 0, p.seqlen_q, p.seqlen_k, b};
  }
}

// Keys [lo, hi) that query rows [m0, m0 + rows) may see under the causal mask and the sliding
// window (left/right from the host, right = 0 with causal); empty when hi <= lo. Whole key
// tiles outside it are skipped, so the cost follows the window.
template <bool kIsCausal, bool kHasWindow>
FJ_DEVICE void key_range(const Sequence& s, int m0, int rows, int left, int right, int& lo, int& hi) {
  lo = 0;
  hi = s.len_k;
  if constexpr (kIsCausal || kHasWindow) hi = min(hi, m0 + rows + s.offset() + (kHasWindow ? right : 0));
  if constexpr (kHasWindow) lo = max(0, m0 + s.offset() - left);
  if (hi < lo) hi = lo;
}

// The keys query `row` sees, [lo, hi] inclusive (none when hi < lo): after the sequence's end,
// the causal diagonal and the window (left/right from the host, right = 0 with causal).
template <bool kIsCausal, bool kHasWindow>
FJ_DEVICE void row_key_bounds(int row, const Sequence& s, int left, int right, int& lo, int& hi) {
  hi = s.len_k - 1;
  if constexpr (kIsCausal || kHasWindow) hi = min(hi, row + s.offset() + (kHasWindow ? right : 0));
  lo = kHasWindow ? row + s.offset() - left : 0;
}

}  // namespace fj
