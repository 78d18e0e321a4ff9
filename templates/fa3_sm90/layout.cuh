// Shared-memory layout of the fa3_sm90 family, included by the kernel and by the host (which
// needs the byte count to launch and to prune tilings without a GPU): one definition.
//
// Every tile is stored as TMA writes it with the 128-byte swizzle: "atoms" of 64 head-dim
// elements (128 bytes) by the tile's rows, one atom after another along the head dim. wgmma
// reads Q and K K-major and V N-major straight from these tiles.
#pragma once

namespace fj_layout {

constexpr int kAtomElems = 64;         // 16-bit elements in one 128-byte swizzled row
constexpr int kWarpgroupRows = 64;     // rows of one wgmma (m64)
constexpr int kSwizzleAlign = 1024;    // a 128-byte swizzle repeats every 8 rows: tiles start aligned to it

struct Fa3Layout {
  int atoms;        // head dim / 64
  int q_bytes;      // the CTA's query rows
  int kv_bytes;     // one stage's K (or V) tile
  int q_offset, k_offset, v_offset;  // bytes from the (1024-aligned) start
  int smem_bytes;   // including the alignment slack of the dynamic shared memory start
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
__host__ __device__
#endif
constexpr Fa3Layout fa3_layout(int head_dim, int warpgroups, int block_n, int stages) {
  Fa3Layout l{};
  l.atoms = (head_dim + kAtomElems - 1) / kAtomElems;
  l.q_bytes = warpgroups * kWarpgroupRows * l.atoms * kAtomElems * 2;
  l.kv_bytes = block_n * l.atoms * kAtomElems * 2;
  l.q_offset = 0;
  l.k_offset = l.q_bytes;
  l.v_offset = l.k_offset + stages * l.kv_bytes;
  l.smem_bytes = l.v_offset + stages * l.kv_bytes + kSwizzleAlign;
  return l;
}

}  // namespace fj_layout
