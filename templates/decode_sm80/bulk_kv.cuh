// K/V tiles of the decode kernel by Hopper's bulk copy engine (common/bulk_copy.cuh): each thread
// copies whole rows, K rows first then V rows, one instruction a row. Rows past the sequence's
// end become zeros (a stale V row times a zero weight could still be NaN).
// An experiment until measured: FLASHJIT_NVRTC_OPTIONS=-DFJ_DECODE_BULK=1 turns it on.
#pragma once

#include "common/attention_params.cuh"
#include "common/bulk_copy.cuh"
#include "common/tile_io.cuh"

#ifndef FJ_DECODE_BULK
#define FJ_DECODE_BULK 0
#endif

namespace fj::dec {

template <typename Elem, int kTileKeys, int kHeadDimQK, int kHeadDimV, int kStrideQK, int kStrideV, int kThreads>
struct BulkKvTiles {
  static constexpr int kRowsAll = 2 * kTileKeys;  // K rows, then V rows
  static constexpr int kIters = (kRowsAll + kThreads - 1) / kThreads;
  static constexpr unsigned kRowBytesK = kHeadDimQK * sizeof(Elem);
  static constexpr unsigned kRowBytesV = kHeadDimV * sizeof(Elem);

  // Paged: each of the thread's rows' page and slot for the next tile, fetched a tile ahead
  // like TilePages (the table load must not stall the copy that needs it).
  int page[kIters];
  int slot[kIters];

  FJ_DEVICE void fetch(const FjAttentionParams& p, int b, int tile_key, int tid) {
    const int* row = p.block_table + b * p.table_stride;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int key = tile_key + (it * kThreads + tid) % kTileKeys;
      const int entry = key / p.page_size;
      page[it] = min(max(row[min(entry, p.max_pages - 1)], 0), p.num_pages - 1);
      slot[it] = key - entry * p.page_size;
    }
  }

  // Starts tile `tile`'s copies into stage memory sK (V after the K rows). k_row0/v_row0: the
  // tile's first key row (contiguous caches); paged caches use the fetched pages. valid: keys of
  // the sequence from the tile's first on (>= 1).
  template <bool kPaged, int kStages>
  FJ_DEVICE void load(Elem* sK, const BulkRing<kStages>& ring, int tile, const FjAttentionParams& p, int kv_head,
                      const Elem* k_row0, const Elem* v_row0, int valid, int tid) const {
    // valid counts the sequence's keys from the tile's first on: more than a tile but the last.
    ring.expect(tile, unsigned(min(valid, kTileKeys)) * (kRowBytesK + kRowBytesV), tid);
    Elem* sV = sK + kTileKeys * kStrideQK;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int i = it * kThreads + tid;
      if (kRowsAll % kThreads != 0 && i >= kRowsAll) break;
      const bool is_v = i >= kTileKeys;
      const int r = is_v ? i - kTileKeys : i;
      Elem* dst = is_v ? sV + r * kStrideV : sK + r * kStrideQK;
      const unsigned bytes = is_v ? kRowBytesV : kRowBytesK;
      if (r < valid) {
        const Elem* src;
        if constexpr (kPaged) {
          const void* pool = is_v ? p.v : p.k;
          const long long(&st)[4] = is_v ? p.v_stride : p.k_stride;
          src = static_cast<const Elem*>(pool) + page[it] * st[0] + slot[it] * st[1] + kv_head * st[2];
        } else {
          src = is_v ? v_row0 + r * p.v_stride[1] : k_row0 + r * p.k_stride[1];
        }
        bulk_copy_row(dst, src, bytes, ring.bar(tile));
      } else {
        for (unsigned c = 0; c < bytes / 16; ++c) reinterpret_cast<Bytes16*>(dst)[c] = Bytes16{};
      }
    }
  }
};

}  // namespace fj::dec
