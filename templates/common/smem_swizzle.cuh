// The XOR swizzle of shared tiles whose rows are whole 128-byte groups (FlashAttention-2's shared
// layout; bwd_sm80 stores its 16-bit Q, dO, K and V tiles so): the 16-byte chunk c of row r sits
// at chunk c ^ (r % 8) of its row. The 8 rows one ldmatrix reads at one chunk land in 8 distinct
// bank groups, as a 16-byte row pad would put them; unlike a pad, every row stays 128-byte
// aligned, so the 8 threads that copy one row's 128 bytes with cp.async write one aligned span
// (padded rows straddle two: bench/NOTES.md entry 35 measured what that costs).
#pragma once

#include "common/ptx.cuh"

namespace fj {

constexpr int kSwizzleRows = 8;        // rows one XOR pattern spans: ldmatrix's 8 row addresses
constexpr int kSwizzleChunkShift = 4;  // 16-byte chunks: one ldmatrix row, one cp.async
constexpr unsigned kSwizzleGroupBytes = 128;  // the span a row's pattern permutes: 8 chunks

// Byte `offset` of row `row` in a tile starting 128-byte aligned, where the swizzle puts it.
template <bool kSwizzle>
FJ_DEVICE constexpr unsigned swizzle_offset(unsigned offset, int row) {
  return kSwizzle ? offset ^ (unsigned(row % kSwizzleRows) << kSwizzleChunkShift) : offset;
}

// The same for element `index` (row-major, the tile's row stride included) of a tile of Elem.
template <bool kSwizzle, typename Elem>
FJ_DEVICE int swizzle_index(int index, int row) {
  return kSwizzle ? int(swizzle_offset<true>(unsigned(index) * sizeof(Elem), row) / sizeof(Elem)) : index;
}

// Shared-space address at + off, swizzled when kSwizzle, for callers whose accesses all share one
// row phase: at is a lane's address in rows of phase row % 8 (phase16 = that phase << 4), and off
// (a compile-time constant) moves by whole multiples of 8 rows plus columns. Only off's bits within
// a 128-byte group go through the XOR (a handful of values a product), so ptxas folds the rest of
// off into the load's immediate offset as it does unswizzled.
template <bool kSwizzle>
FJ_DEVICE unsigned shared_at(unsigned at, unsigned off, unsigned phase16) {
  if constexpr (!kSwizzle) return at + off;
  return ((at + (off & (kSwizzleGroupBytes - 1))) ^ phase16) + (off & ~(kSwizzleGroupBytes - 1));
}

}  // namespace fj
