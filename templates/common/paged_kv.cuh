// Key tiles of a paged cache: every key row's page comes from the block table. A thread fetches
// the pages of the rows it will copy for a tile one tile ahead, into registers, so the table's
// load latency hides behind a tile of compute instead of stalling every copy it feeds.
#pragma once

#include "common/attention_params.cuh"
#include "common/ptx.cuh"
#include "common/tile_io.cuh"

namespace fj {

// The rows a thread copies of a kRows x (kChunks accesses) tile, as load_tile_async assigns them,
// and where each sits: its page's pool row and its slot in the page. The slot is kept rather than
// recomputed at copy time: a runtime modulo a row a copy cost the H100 decode 1.3-1.5x
// (bench/NOTES.md).
template <int kRows, int kChunks, int kThreads>
struct TilePages {
  static constexpr int kIters = (kRows * kChunks + kThreads - 1) / kThreads;
  int page[kIters];
  int slot[kIters];

  // Issues the table loads for the tile starting at key tile_key of sequence b; nothing waits on them
  // until the copies that use them. Entries are clamped to the pools.
  FJ_DEVICE void fetch(const FjAttentionParams& p, int b, int tile_key, int tid) {
    const int* row = p.block_table + b * p.table_stride;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int key = tile_key + (it * kThreads + tid) / kChunks;
      const int entry = key / p.page_size;
      page[it] = min(max(row[min(entry, p.max_pages - 1)], 0), p.num_pages - 1);
      slot[it] = key - entry * p.page_size;
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

// The list V's copies use: K's own when both lists would be equal (kSame: equal head dims split
// rows alike between threads), else V's. A template, so the branch not taken is never compiled.
template <bool kSame, typename VPages, typename KPages>
FJ_DEVICE const VPages& pages_for_v(const KPages& k_pages, const VPages& v_pages) {
  if constexpr (kSame) {
    return k_pages;
  } else {
    return v_pages;
  }
}

// load_tile_async over a paged pool (element strides `st`: page, slot, head, dim) with the pages
// fetched for this tile. Rows past rows_valid (>= 1) become zeros.
template <typename Elem, int kRows, int kCols, int kSmemStride, int kVec, int kThreads>
FJ_DEVICE void load_paged_tile_async(Elem* smem, const void* pool, const long long (&st)[4], int kv_head,
                                     const TilePages<kRows, kCols / kVec, kThreads>& pages, int rows_valid, int tid) {
  constexpr int kChunks = kCols / kVec;
  constexpr int kTotal = kRows * kChunks;
  const Elem* base = static_cast<const Elem*>(pool) + kv_head * st[2];
  // load_tile_async's access loop, written out here too (tile_io.cuh's head says why).
#pragma unroll
  for (int it = 0; it < pages.kIters; ++it) {
    const int i = it * kThreads + tid;
    if (kTotal % kThreads != 0 && i >= kTotal) break;
    const int r = i / kChunks;
    const int c = (i % kChunks) * kVec;
    const bool inside = r < rows_valid;
    Elem* dst = smem + r * kSmemStride + c;
    // Outside rows read nothing; their source only has to be an address (the pool's start).
    const Elem* src = inside ? base + pages.page[it] * st[0] + pages.slot[it] * st[1] + c * (kVec == 1 ? st[3] : 1)
                             : base;
    copy_chunk_async<Elem, kVec>(dst, src, inside);
  }
}

}  // namespace fj
