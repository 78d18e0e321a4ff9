// Key tiles of a paged cache: every key row's page comes from the block table. A thread fetches
// the pages of the rows it will copy for a tile one tile ahead, into registers, so the table's
// load latency hides behind a tile of compute instead of stalling every copy it feeds.
#pragma once

#include "common/attention_params.cuh"
#include "common/ptx.cuh"

namespace fj {

// The pages of the rows a thread copies of a kRows x (kChunks accesses) tile, as
// load_tile_async assigns rows to threads. Only the pages are kept (a register a row); the slot
// in the page is recomputed at copy time, arithmetic rather than a wait.
template <int kRows, int kChunks, int kThreads>
struct TilePages {
  static constexpr int kIters = (kRows * kChunks + kThreads - 1) / kThreads;
  int page[kIters];
  int n0;  // the tile's first key

  // Issues the table loads for the tile starting at key n0 of sequence b; nothing waits on them
  // until the copies that use them. Entries are clamped to the pools.
  FJ_DEVICE void fetch(const FjAttentionParams& p, int b, int tile_key, int tid) {
    const int* row = p.block_table + b * p.table_stride;
    n0 = tile_key;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int key = n0 + (it * kThreads + tid) / kChunks;
      page[it] = min(max(row[min(key / p.page_size, p.max_pages - 1)], 0), p.num_pages - 1);
    }
  }
};

// The address of key `key` of sequence b's head `kv_head` in a paged pool (element strides `st`),
// the table read on the spot: for copies that keep no page list.
template <typename Elem>
FJ_DEVICE const Elem* paged_row(const FjAttentionParams& p, const void* pool, const long long (&st)[4], int b,
                                int kv_head, int key) {
  const int entry = key / p.page_size;
  const int page = min(max(p.block_table[b * p.table_stride + min(entry, p.max_pages - 1)], 0), p.num_pages - 1);
  return static_cast<const Elem*>(pool) + page * st[0] + (key - entry * p.page_size) * st[1] + kv_head * st[2];
}

// load_tile_async over a paged pool (element strides `st`: page, slot, head, dim) with the pages
// fetched for this tile. Rows past rows_valid (>= 1) become zeros.
template <typename Elem, int kRows, int kCols, int kSmemStride, int kVec, int kThreads>
FJ_DEVICE void load_paged_tile_async(Elem* smem, const void* pool, const long long (&st)[4], int kv_head, int page_size,
                                     const TilePages<kRows, kCols / kVec, kThreads>& pages, int rows_valid, int tid) {
  constexpr int kChunks = kCols / kVec;
  constexpr int kBytes = kVec * int(sizeof(Elem));
  constexpr int kTotal = kRows * kChunks;
  const Elem* base = static_cast<const Elem*>(pool) + kv_head * st[2];
#pragma unroll
  for (int it = 0; it < pages.kIters; ++it) {
    const int i = it * kThreads + tid;
    if (kTotal % kThreads != 0 && i >= kTotal) break;
    const int r = i / kChunks;
    const int c = (i % kChunks) * kVec;
    const bool inside = r < rows_valid;
    Elem* dst = smem + r * kSmemStride + c;
    // Outside rows read nothing; their source only has to be an address (the pool's start).
    const int key = pages.n0 + r;
    const Elem* src = inside ? base + pages.page[it] * st[0] + (key % page_size) * st[1] + c * (kVec == 1 ? st[3] : 1)
                             : base;
    if constexpr (kBytes >= 4) {
      cp_async<kBytes>(dst, src, inside ? kBytes : 0);
    } else {
      *dst = inside ? *src : Elem(0);
    }
  }
}

}  // namespace fj
