// Where one sequence of a batch lives and which of its keys a block of query rows may see:
// shared by the forward families. Everything here is in the sequence's own row numbers.
#pragma once

#include "common/attention_params.cuh"
#include "common/ptx.cuh"

namespace fj {

struct Sequence {
  int q_start;  // first row of the sequence in the q/o tensors' seq dim (0 unless varlen)
  int k_start;  // likewise in k/v; paged: the first key's slot in the table row's keys (0 unless kv_starts)
  int len_q;
  int len_k;
  int cap_k;    // keys its k/v rows hold before kv_lens and kv_starts: rows a backward still writes
  int batch;    // index into the tensors' batch dim (0 with varlen: one packed batch)
  // The bottom-right diagonal: query i lines up with key i + offset().
  FJ_DEVICE int offset() const { return len_k - len_q; }
};

// Sequence b: fixed sizes, or a varlen batch's prefix sums clamped to the tensors, so bad
// prefix sums shorten a sequence but never reach outside q, k, v or o. Paged keys run to the
// capacity of the sequence's table row; kv_lens then shortens the keys to what the sequence uses
// (clamped to what is there), and kv_starts drops the left padding before its first key (clamped
// to the end): key 0 of the sequence is then cache slot k_start, which paged lookups add too.
// The variant's own constants (cfg::) choose the branches, so a new per-sequence semantic is a
// branch here and nothing at the call sites.
FJ_DEVICE Sequence sequence_of(const FjAttentionParams& p, int b) {
  Sequence s;
  if constexpr (cfg::kVarlen) {
    const int q0 = min(max(p.cu_seqlens_q[b], 0), p.total_q);
    s.q_start = q0;
    s.len_q = min(max(p.cu_seqlens_q[b + 1], q0), p.total_q) - q0;
    s.batch = 0;
  } else {
    s.q_start = 0;
    s.len_q = p.seqlen_q;
    s.batch = b;
  }
  if constexpr (cfg::kPaged) {
    s.k_start = 0;
    s.len_k = p.max_pages * p.page_size;
  } else if constexpr (cfg::kVarlen) {
    const int k0 = min(max(p.cu_seqlens_k[b], 0), p.total_k);
    s.k_start = k0;
    s.len_k = min(max(p.cu_seqlens_k[b + 1], k0), p.total_k) - k0;
  } else {
    s.k_start = 0;
    s.len_k = p.seqlen_k;
  }
  s.cap_k = s.len_k;
  if constexpr (cfg::kKvLens) s.len_k = min(max(p.kv_lens[b], 0), s.len_k);
  if constexpr (cfg::kKvStarts) {
    const int skip = min(max(p.kv_starts[b], 0), s.len_k);
    s.k_start += skip;
    s.len_k -= skip;
  }
  return s;
}

// The address of key `key` of sequence s's head `kv_head` in a contiguous k or v (element strides
// `st`); paged caches go through common/paged_kv.cuh.
template <typename Elem>
FJ_DEVICE const Elem* key_row(const void* base, const long long (&st)[4], const Sequence& s, int kv_head, int key) {
  return static_cast<const Elem*>(base) + s.batch * st[0] + (s.k_start + key) * st[1] + kv_head * st[2];
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
