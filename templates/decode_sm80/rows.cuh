// decode_sm80's rows: a CTA's rows are (query token, query head) pairs of one key/value head, the
// query heads of a GQA group packed together (row = token * group + head's place in the group),
// so each K/V tile is read once for the whole group. Each row keeps its own token's key bounds
// and its own head's ALiBi slope.
#pragma once

#include "common/attention_params.cuh"
#include "common/score_tile.cuh"
#include "common/sequence.cuh"
#include "decode_sm80/config.cuh"

namespace fj::dec {

// Packed row `row` of key/value head `kv_head`: its query token and its query head.
struct PackedRow {
  int token, head;
};
FJ_DEVICE PackedRow packed_row(int row, int group, int kv_head) { return {row / group, kv_head * group + row % group}; }

// The (token, query head) of each row a thread holds: rows g and g+8 of every 16-row tile.
struct RowMap {
  int token[kRowTiles][2];
  int head[kRowTiles][2];
  bool valid[kRowTiles][2];
};

FJ_DEVICE RowMap map_rows(int row0, int rows_total, int group, int kv_head, int lane) {
  RowMap m;
#pragma unroll
  for (int mt = 0; mt < kRowTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + mt * 16 + h * 8 + (lane >> 2);
      m.valid[mt][h] = row < rows_total;
      m.token[mt][h] = row / group;
      m.head[mt][h] = kv_head * group + row % group;
    }
  return m;
}

// Each row's ALiBi slope in score units (0 without ALiBi, and for rows past the CTA's real rows).
FJ_DEVICE void alibi_slopes(float (&slope)[kRowTiles][2], const RowMap& rm, const FjAttentionParams& p, int b) {
#pragma unroll
  for (int mt = 0; mt < kRowTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      slope[mt][h] = kAlibi && rm.valid[mt][h] ? p.alibi_slopes[b * p.alibi_batch_stride + rm.head[mt][h]] * p.alibi_unit
                                               : 0.f;
}

// The shared score transform (softcap, ALiBi) with each row's own token and slope, then the
// mask: each row by its own token's bounds (causal, window, the sequence's end); rows past the
// CTA's real rows see nothing.
FJ_DEVICE void scores(float (&s)[kRowTiles][kNTilesS][4], const RowMap& rm, const float (&slope)[kRowTiles][2],
                      int col_base, const Sequence& seq, const FjAttentionParams& p, int right) {
#pragma unroll
  for (int mt = 0; mt < kRowTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int lo, hi;
      row_key_bounds<kCausal, kWindow>(rm.token[mt][h], seq, p.window_left, right, lo, hi);
      if (!rm.valid[mt][h]) lo = 1, hi = 0;
#pragma unroll
      for (int nt = 0; nt < kNTilesS; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = col_base + nt * 8 + e;
          float& x = s[mt][nt][2 * h + e];
          transform_score(x, rm.token[mt][h], col, seq.offset(), p, slope[mt][h]);
          if (col < lo || col > hi) x = neg_inf();
        }
    }
}

}  // namespace fj::dec
