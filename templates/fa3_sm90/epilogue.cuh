// fa3_sm90's epilogues: a consumer's normalized rows and their LSE, from registers (store_rows)
// or through a swizzled shared-memory tile and a TMA store (store_tile).
#pragma once

#include "common/attention_params.cuh"
#include "common/online_softmax.cuh"
#include "common/sm90/async_copy.cuh"
#include "fa3_sm90/config.cuh"
#include "fa3_sm90/params.cuh"
#include "fa3_sm90/rows.cuh"

namespace fj::fa3 {

using namespace fj::sm90;

// Rows g and g + 8 of this thread: normalized output (the head dim's columns, pairs per thread)
// and the LSE from each quad's first thread.
FJ_DEVICE void store_rows(const FjAttentionParams& p, const ConsumerRows& rows, const float (&o)[kDV / 2],
                          const Softmax& sm, int head, int lane) {
  const float sink_log2 = sink_log2_of(p.sinks, head, kSinks);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = rows.row0 + h * 8;
    const RowTotal total = row_total<kSinks>(quad_sum(sm.row_sum[0][h]), sm.row_max[0][h], rows.score_scale, sink_log2);
    if (row >= rows.seq.len_q) continue;
    unsigned short* out = static_cast<unsigned short*>(p.o) + rows.seq.batch * p.o_stride[0] +
                          (rows.seq.q_start + row) * p.o_stride[1] + head * p.o_stride[2];
#pragma unroll
    for (int nt = 0; nt < kHeadDimV / 8; ++nt) {
      const int col = nt * 8 + 2 * (lane % 4);
      *reinterpret_cast<unsigned*>(out + col) = pack(o[nt * 4 + 2 * h] * total.inv, o[nt * 4 + 2 * h + 1] * total.inv);
    }
    if constexpr (kWriteLse) {
      if (lane % 4 == 0) store_lse(p, rows.seq, head, row, total.lse);
    }
  }
}

// This consumer's 64 rows through its shared-memory output tile and one TMA store per 64-column
// atom, laid out as TMA's 128-byte swizzle expects (16-byte chunk k of row r at k ^ (r % 8)): a
// warp's stores then fall on 32 different banks. The LSE goes from registers as in store_rows.
// The tile is rewritten only once the previous tile's store has read it.
FJ_DEVICE void store_tile(const FjFa3Params& prm, const ConsumerRows& rows, const float (&o)[kDV / 2],
                          const Softmax& sm, int head, int wg_row0, int c, int warp, int lane, unsigned char* smem) {
  const FjAttentionParams& p = prm.attn;
  unsigned char* tile = smem + kLayout.o_offset + c * kLayout.atoms_v * kRowsPerWg * kAtomBytes;
  const bool elected = warp == 0 && lane == 0;
  if (elected) bulk_wait_group_read<0>();
  named_barrier_sync(kEpilogueBarrier + c, kWgThreads);
  const float sink_log2 = sink_log2_of(p.sinks, head, kSinks);
  // The lane read again here, opaquely: otherwise the compiler hoists the tile's swizzled
  // addresses (two per 8 columns) out of the tile walk, and they stay live through the main loop.
  const int lane_now = lane_id();
  // Columns 8 nt + 2 (lane % 4) + {0, 1}: atom nt / 8, 16-byte chunk nt % 8 (swizzled by the
  // row), bytes 4 (lane % 4) within it. All unsigned, the column parts compile-time per nt.
  constexpr unsigned kChunksPerAtom = fj_layout::kAtomElems / 8;
  constexpr unsigned kAtomTileBytes = kRowsPerWg * kAtomBytes;
  const unsigned lane_u = unsigned(lane_now);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const unsigned r = unsigned(warp) * 16u + lane_u / 4u + unsigned(h) * 8u;  // the row within the consumer's 64
    const unsigned row_at = smem_addr(tile) + r * kAtomBytes + 4u * (lane_u % 4u), swizzle = (r % 8u) * 16u;
    const RowTotal total = row_total<kSinks>(quad_sum(sm.row_sum[0][h]), sm.row_max[0][h], rows.score_scale, sink_log2);
#pragma unroll
    for (int nt = 0; nt < kHeadDimV / 8; ++nt) {
      const unsigned at = row_at + unsigned(nt) / kChunksPerAtom * kAtomTileBytes + ((unsigned(nt) % kChunksPerAtom * 16u) ^ swizzle);
      st_shared_b32(at, pack(o[nt * 4 + 2 * h] * total.inv, o[nt * 4 + 2 * h + 1] * total.inv));
    }
    const int row = rows.row0 + h * 8;
    if (kWriteLse && lane % 4 == 0 && row < rows.seq.len_q) store_lse(p, rows.seq, head, row, total.lse);
  }
  fence_async_shared();  // the generic proxy's writes, before the copy engine reads them
  named_barrier_sync(kEpilogueBarrier + c, kWgThreads);
  if (elected) {
#pragma unroll
    for (int a = 0; a < kLayout.atoms_v; ++a)
      tma_store_4d(&prm.o_map, tile + a * kRowsPerWg * kAtomBytes, a * fj_layout::kAtomElems, head,
                   rows.seq.q_start + wg_row0, rows.seq.batch);
    bulk_commit_group();
  }
}

}  // namespace fj::fa3
