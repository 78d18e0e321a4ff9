// Copies between a [rows x cols] tile of a strided global view and a padded shared tile.
// kVec elements move per access; the host picks the widest kVec that every pointer and stride
// allows, and kVec == 1 also honours a non-unit stride along the head dim.
// The unrolled access loop (i = it * kThreads + tid, the early break) is written out in each copy
// here and in paged_kv.cuh on purpose: behind a helper taking the body as a lambda, ptxas allocated
// and scheduled registers differently in some kernels (bwd store_tile, paged decode at kVec 1).
// kSwizzle: the shared tile is XOR-swizzled (common/smem_swizzle.cuh) instead of padded.
#pragma once

#include "common/ptx.cuh"
#include "common/smem_swizzle.cuh"

namespace fj {

struct alignas(16) Bytes16 { unsigned w[4]; };
struct alignas(8) Bytes8 { unsigned w[2]; };

template <int kBytes> struct BytesOf;
template <> struct BytesOf<16> { using type = Bytes16; };
template <> struct BytesOf<8> { using type = Bytes8; };
template <> struct BytesOf<4> { using type = unsigned; };
template <> struct BytesOf<2> { using type = unsigned short; };

// One access of a tile copy: kVec elements from src to dst, or zeros where the row is outside
// (src then only has to be an address: nothing is read). cp.async moves at least 4 bytes, so
// 2-byte elements go one at a time through registers.
template <typename Elem, int kVec>
FJ_DEVICE void copy_chunk_async(Elem* dst, const Elem* src, bool inside) {
  constexpr int kBytes = kVec * int(sizeof(Elem));
  if constexpr (kBytes >= 4) {
    cp_async<kBytes>(dst, src, inside ? kBytes : 0);
  } else {
    *dst = inside ? *src : Elem(0);
  }
}

// Access i of load_tile_async's copies that walk accesses (kChunks a row): row i / kChunks, columns
// from (i % kChunks) * kVec.
template <typename Elem, int kChunks, int kSmemStride, int kVec, bool kSwizzle = false>
FJ_DEVICE void load_access_async(Elem* smem, const Elem* gmem, long long row_stride, long long col_stride,
                                 int rows_valid, int i) {
  const int r = i / kChunks;
  const int c = (i % kChunks) * kVec;
  const bool inside = r < rows_valid;
  Elem* dst = smem + swizzle_index<kSwizzle, Elem>(r * kSmemStride + c, r);
  const Elem* src = gmem + (inside ? r * row_stride + c * (kVec == 1 ? col_stride : 1) : 0);
  copy_chunk_async<Elem, kVec>(dst, src, inside);
}

// Starts asynchronous loads of rows [0, rows_valid) into smem; rows past rows_valid become
// zeros so padded keys and queries contribute nothing. Columns past kCols are left untouched.
template <typename Elem, int kRows, int kCols, int kSmemStride, int kVec, int kThreads, bool kSwizzle = false>
FJ_DEVICE void load_tile_async(Elem* smem, const Elem* gmem, long long row_stride,
                               long long col_stride, int rows_valid, int tid) {
  static_assert(kCols % kVec == 0, "the host picks kVec dividing the head dim");
  constexpr int kChunks = kCols / kVec;
  constexpr bool kRowStepKeepsPhase = kThreads / kChunks % kSwizzleRows == 0;  // the swizzle's XOR stays put
  if constexpr (kThreads % kChunks == 0 && (!kSwizzle || kRowStepKeepsPhase)) {
    // Each thread keeps one column and walks rows: one pointer and one 64-bit step stay live
    // instead of a precomputed address per access.
    constexpr int kRowStep = kThreads / kChunks;
    const int c = (tid % kChunks) * kVec;
    const int r0 = tid / kChunks;
    const Elem* src = gmem + r0 * row_stride + c * (kVec == 1 ? col_stride : 1);
    const long long step = kRowStep * row_stride;
    Elem* dst = smem + swizzle_index<kSwizzle, Elem>(r0 * kSmemStride + c, r0);
#pragma unroll
    for (int r = r0; r < kRows; r += kRowStep) {
      const bool inside = r < rows_valid;
      copy_chunk_async<Elem, kVec>(dst, inside ? src : gmem, inside);
      src += step;
      dst += kRowStep * kSmemStride;
    }
  } else {
    constexpr int kTotal = kRows * kChunks;
#pragma unroll
    for (int it = 0; it < (kTotal + kThreads - 1) / kThreads; ++it) {
      const int i = it * kThreads + tid;
      if (kTotal % kThreads != 0 && i >= kTotal) break;
      load_access_async<Elem, kChunks, kSmemStride, kVec, kSwizzle>(smem, gmem, row_stride, col_stride, rows_valid, i);
    }
  }
}

// load_tile_async in a rolled loop: for copies issued inside a loop whose other work needs every
// register (the backward's Q and dO tiles, once a Q block). When kThreads is not a multiple of
// the chunks a row, load_tile_async unrolls into one precomputed offset per access, which the
// compiler hoists out of the caller's loop and keeps live across it (the bwd_sm80 main kernel
// spilled at head dim 96 and 112); here only the index and the base stay live.
template <typename Elem, int kRows, int kCols, int kSmemStride, int kVec, int kThreads, bool kSwizzle = false>
FJ_DEVICE void load_tile_async_rolled(Elem* smem, const Elem* gmem, long long row_stride, long long col_stride,
                                      int rows_valid, int tid) {
  static_assert(kCols % kVec == 0, "the host picks kVec dividing the head dim");
  constexpr int kChunks = kCols / kVec;
#pragma unroll 1
  for (int i = tid; i < kRows * kChunks; i += kThreads) {
    load_access_async<Elem, kChunks, kSmemStride, kVec, kSwizzle>(smem, gmem, row_stride, col_stride, rows_valid, i);
  }
}

// load_tile_async for rows that are not one stride apart: row r starts at row_ptr(r) (pages of a
// paged cache, the query heads of a decode tile). Rows past rows_valid (>= 1) become zeros.
template <typename Elem, int kRows, int kCols, int kSmemStride, int kVec, int kThreads, class RowPtr>
FJ_DEVICE void load_rows_async(Elem* smem, const RowPtr& row_ptr, long long col_stride, int rows_valid, int tid) {
  static_assert(kCols % kVec == 0, "the host picks kVec dividing the head dim");
  constexpr int kChunks = kCols / kVec;
  constexpr int kTotal = kRows * kChunks;
  const Elem* any_row = row_ptr(0);  // a valid source for zero-filling copies, which read nothing
#pragma unroll
  for (int it = 0; it < (kTotal + kThreads - 1) / kThreads; ++it) {
    const int i = it * kThreads + tid;
    if (kTotal % kThreads != 0 && i >= kTotal) break;
    const int r = i / kChunks;
    const int c = (i % kChunks) * kVec;
    const bool inside = r < rows_valid;
    Elem* dst = smem + r * kSmemStride + c;
    const Elem* src = (inside ? row_ptr(r) : any_row) + c * (kVec == 1 ? col_stride : 1);
    copy_chunk_async<Elem, kVec>(dst, src, inside);
  }
}

// Writes rows [0, rows_valid) of a shared tile to global memory.
template <typename Elem, int kRows, int kCols, int kSmemStride, int kVec, int kThreads, bool kSwizzle = false>
FJ_DEVICE void store_tile(Elem* gmem, long long row_stride, long long col_stride,
                          const Elem* smem, int rows_valid, int tid) {
  constexpr int kChunks = kCols / kVec;
  constexpr int kTotal = kRows * kChunks;
  using Word = typename BytesOf<kVec * int(sizeof(Elem))>::type;
#pragma unroll
  for (int it = 0; it < (kTotal + kThreads - 1) / kThreads; ++it) {
    const int i = it * kThreads + tid;
    if (kTotal % kThreads != 0 && i >= kTotal) break;
    const int r = i / kChunks;
    const int c = (i % kChunks) * kVec;
    if (r < rows_valid) {
      *reinterpret_cast<Word*>(gmem + r * row_stride + c * (kVec == 1 ? col_stride : 1)) =
          *reinterpret_cast<const Word*>(smem + swizzle_index<kSwizzle, Elem>(r * kSmemStride + c, r));
    }
  }
}

// Fills columns [kFrom, kTo) of every row with zeros (the head-dim padding the mma reads).
template <typename Elem, int kRows, int kFrom, int kTo, int kSmemStride, int kThreads, bool kSwizzle = false>
FJ_DEVICE void zero_columns(Elem* smem, int tid) {
  constexpr int kWidth = kTo - kFrom;
  if constexpr (kWidth > 0) {
    for (int i = tid; i < kRows * kWidth; i += kThreads) {
      const int r = i / kWidth;
      smem[swizzle_index<kSwizzle, Elem>(r * kSmemStride + kFrom + i % kWidth, r)] = Elem(0);
    }
  }
}

}  // namespace fj
