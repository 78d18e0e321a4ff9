// Shared-memory layout and thread count of the bwd_sm90 main kernel, included by the kernel and by
// the host (which needs both to launch, and the byte count to prune tilings without a GPU): one
// definition.
//
// Every 16-bit tile is stored as fa3_sm90's are: atoms of 64 head-dim elements (128 bytes) by the
// tile's rows, one atom after another along the head dim, the 16-byte chunk c of row r at chunk
// c ^ (r % 8) (the 128-byte swizzle wgmma's descriptors name). K and V stay for the whole kernel;
// Q, dO and their rows' LSE and D (fp32, in the workspace's row_stat_slot order, each of its
// kBwd90StatRuns runs followed by 16 bytes of padding) come in kBwd90Stages buffers, the next Q block's landing under this one's products; dS is the Q
// block's dS with queries as rows (dQ = dS.K reads it as its A operand), in atoms of 64 keys, in
// kBwd90DsBuffers buffers.
#pragma once

namespace fj_layout {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define FJ_BWD90_FN __host__ __device__ constexpr
#else
#define FJ_BWD90_FN constexpr
#endif

constexpr int kBwd90AtomElems = 64;    // 16-bit elements in one 128-byte swizzled row
constexpr int kBwd90AtomBytes = 128;
constexpr int kBwd90Align = 1024;      // the swizzle repeats every 8 rows: tiles start aligned to it
constexpr int kBwd90StatBytes = 4;     // LSE and D: fp32
// row_stat_slot order groups a Q block's statistics in 8 runs (row % 8). A thread reads 16 bytes
// from 4 of them at once; 16 bytes of padding after each run put those reads in different banks
// (unpadded, runs of 64 or 32 bytes start at the same bank: 4- or 2-way conflicts).
constexpr int kBwd90StatRuns = 8;
constexpr int kBwd90StatRunPad = 16;
constexpr int kBwd90Stages = 2;        // Q blocks in shared memory: this one and the next, loading
constexpr int kBwd90DsBuffers = 2;     // a warpgroup writes a block's dS while the other reads the last
constexpr int kBwd90WarpgroupThreads = 128;
constexpr int kBwd90ProducerWarpgroups = 1;  // after the MMA warpgroups: issues every copy

// Threads of the main kernel's CTA: what the host launches and what the kernel's roles assume.
FJ_BWD90_FN int bwd90_threads(int mma_warpgroups) {
  return (mma_warpgroups + kBwd90ProducerWarpgroups) * kBwd90WarpgroupThreads;
}

struct Bwd90Layout {
  int atoms_qk, atoms_v;  // head dims / 64, rounded up
  int k, v, ds, ds_bytes; // byte offsets from the (1024-aligned) start; ds_bytes: one dS buffer
  int q, dout, lse, dpsum, stage;  // stage 0's offsets; stage s is s * stage bytes further on
  int smem_bytes;         // including the alignment slack of the dynamic shared memory start
};

FJ_BWD90_FN int bwd90_round_up(int x, int to) { return (x + to - 1) / to * to; }

// Bytes of one statistic (LSE or D) of a Q block in a stage, padding included.
FJ_BWD90_FN int bwd90_stat_bytes(int block_m) { return block_m * kBwd90StatBytes + kBwd90StatRuns * kBwd90StatRunPad; }

FJ_BWD90_FN Bwd90Layout bwd90_layout(int head_dim_qk, int head_dim_v, int block_m, int block_n) {
  Bwd90Layout l{};
  l.atoms_qk = (head_dim_qk + kBwd90AtomElems - 1) / kBwd90AtomElems;
  l.atoms_v = (head_dim_v + kBwd90AtomElems - 1) / kBwd90AtomElems;
  const int row_qk = l.atoms_qk * kBwd90AtomBytes, row_v = l.atoms_v * kBwd90AtomBytes;
  l.k = 0;
  l.v = l.k + block_n * row_qk;
  // dS: block_m query rows of block_n keys, in atoms of 64 keys.
  l.ds = l.v + block_n * row_v;
  l.ds_bytes = bwd90_round_up(block_n, kBwd90AtomElems) / kBwd90AtomElems * block_m * kBwd90AtomBytes;
  const int stages = l.ds + kBwd90DsBuffers * l.ds_bytes;
  // A stage: Q, dO (both 1024-aligned: whole 8-row groups), then LSE and D; stages 1024-aligned.
  l.q = stages;
  l.dout = l.q + block_m * row_qk;
  l.lse = l.dout + block_m * row_v;
  l.dpsum = l.lse + bwd90_stat_bytes(block_m);
  l.stage = bwd90_round_up(l.dpsum + bwd90_stat_bytes(block_m) - stages, kBwd90Align);
  l.smem_bytes = stages + kBwd90Stages * l.stage + kBwd90Align;
  return l;
}

#undef FJ_BWD90_FN

}  // namespace fj_layout
