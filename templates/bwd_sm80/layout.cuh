// The host/device contract of the bwd_sm80 kernels, in one place: the shared-memory layout of
// the main and convert kernels, and how each of the main kernel's five products splits over the
// warps. Included by the kernels (config.cuh) and by the host (engine/src/families/bwd_sm80.cpp),
// which needs the byte counts to launch and both to check tilings and prune candidates without
// a GPU.
#pragma once

#include "common/host_device.cuh"

namespace fj_layout {

// Head dims pad to 16 (up to kBwdWideHeadDim): a 16-bit mma consumes k in steps of 16 and one
// ldmatrix.x4 covers two n8 tiles (the same rule as fa2_sm80's layout).
constexpr int kBwdHeadDimAlign = 16;
// 16-bit rows pad by 8 elements (16 bytes): an odd multiple of 16 bytes per row puts the 8 rows
// one ldmatrix reads (plain or transposed) in distinct banks, and so the 8 rows of a C-layout
// store of P or dS.
constexpr int kBwdRowPad16 = 8;
// 16-bit Q, dO, K and V tiles whose padded width is whole 128-byte groups are not padded but
// XOR-swizzled (common/smem_swizzle.cuh): the same conflict-free ldmatrix reads, and cp.async
// copies that write aligned 128-byte spans. Padded, those copies took 2.6x their ideal shared-
// memory wavefronts (ncu, D 64 and 256) and the whole backward 3-5% longer (bench/NOTES.md
// entry 35). P and dS, written from registers, keep their pad.
constexpr int kBwdSwizzleBytes = 128;  // common/smem_swizzle.cuh's kSwizzleGroupBytes (that header is device-only)
FJ_HOST_DEVICE constexpr bool bwd_swizzled(int elem_bytes, int padded_width) {
  return elem_bytes == 2 && padded_width * elem_bytes % kBwdSwizzleBytes == 0;
}
// fp32 rows pad by 8 elements too (32 bytes), for another reason: every unpadded width is a
// multiple of 16, so a row is 8 mod 16 words, the one stride both of bwd_sm80/gemm_fp32.cuh's
// fragment reads need: 64-bit reads of 4 rows x 2 words a half-warp (plain) and scalar reads of
// 4 rows x 8 words (transposed) each land in 32 distinct banks, and so do C-layout stores.
constexpr int kBwdRowPad32 = 8;
// fp32 exact mode sums each k8 step's three tf32 products from zero and adds them in fp32 (fresh
// steps: tensor-core accumulation truncates, and dK, dV carry their sums over every Q block) only
// where dK, dV and the phase's tile hold at most this many accumulators a thread: ptxas keeps a
// step tile live per tile of a product, and past it they spilled 88-1900 B with every feature on
// (compile_bwd_check.py). The host keeps exact fp32's tilings under it where its defaults are.
constexpr int kBwdFp32FreshStepAccumulators = 96;
// Every warp tile side is a whole number of 16-row / 16-column mma steps (an m16 tile, a k16
// step, or a pair of n8 tiles one ldmatrix.x4 fills).
constexpr int kBwdMmaSide = 16;
// Past this padded width a pair of head dims is wide. A width of an odd count of 16-column
// steps puts every warp of dK/dV along the keys, 16 keys' whole rows a warp: (Dqk + Dv) / 2
// fp32 registers a thread, up to 256 at D = 256 (beside S, dP or dQ): too many past here.
constexpr int kBwdWideHeadDim = 128;
// Wide pairs pad both head dims to 32: an even count of 16-column steps, so 8 warps split dK
// and dV of 64 keys 4 along the keys x 2 along the head dims (FlashAttention-2's shape at 256).
constexpr int kBwdWideHeadDimAlign = 32;

FJ_HOST_DEVICE constexpr int bwd_round_up(int x, int m) { return (x + m - 1) / m * m; }

// Whether head dims `head_dim` and `other` (Q/K's and V's, either order) take the wide padding.
FJ_HOST_DEVICE constexpr bool bwd_wide(int head_dim, int other) {
  return bwd_round_up(head_dim > other ? head_dim : other, kBwdHeadDimAlign) > kBwdWideHeadDim;
}

// The padded width of head dim `head_dim` beside the other one (`other`): what the mma tiles,
// the shared rows and the dQ accumulator's rows hold (the kernels' kDQK and kDV).
FJ_HOST_DEVICE constexpr int bwd_padded_head_dim(int head_dim, int other) {
  return bwd_round_up(head_dim, bwd_wide(head_dim, other) ? kBwdWideHeadDimAlign : kBwdHeadDimAlign);
}

// How many of `warps` warps go along the rows of a rows x cols product (the rest go along its
// columns), where cols2 is a second product's width sharing the split (dK and dV: Dqk and Dv;
// 0: none): the split whose warp tile has the smallest rows + cols (the wider), i.e. the fewest
// fragment loads from shared memory per mma (A fragments go with the rows, B with the columns);
// ties go to fewer warps along the rows. Every warp tile side must be a multiple of 16, in both
// widths. 0: no split.
FJ_HOST_DEVICE constexpr int bwd_warps_along_rows(int warps, int rows, int cols, int cols2 = 0) {
  const int widest = cols > cols2 ? cols : cols2;
  int best = 0, best_cost = 0;
  for (int wm = 1; wm <= warps; ++wm) {
    if (warps % wm != 0) continue;
    const int wn = warps / wm;
    if (rows % (kBwdMmaSide * wm) != 0 || cols % (kBwdMmaSide * wn) != 0 || cols2 % (kBwdMmaSide * wn) != 0) continue;
    const int cost = rows / wm + widest / wn;
    if (best == 0 || cost < best_cost) best = wm, best_cost = cost;
  }
  return best;
}

struct BwdLayout {
  int dqk;        // padded head dim of Q, K, dQ, dK (bwd_padded_head_dim)
  int dv;         // padded head dim of V, O, dO, dV
  bool swizzle_qk;  // the Q and K tiles are swizzled (bwd_swizzled), not padded
  bool swizzle_v;   // the V and dO tiles likewise
  int stride_qk;    // shared row stride of the Q and K tiles, in elements
  int stride_v;     // shared row stride of the V and dO tiles
  int stride_ps;    // shared row stride of the P and dS tiles ([query row][key], in the element type)
  int stride_convert;  // convert's staging tile's row stride (padded: its stores are C-layout pairs)
  // Warps along the first dimension of each product (the rest go along the second):
  int sdp_warps_m;  // S = Q K^T and dP = dO V^T: along the Q block's rows (the rest along its keys)
  int dkv_warps_n;  // dV += P^T dO and dK += dS^T Q: along the keys (the rest along the head dim)
  int dq_warps_m;   // dQ = dS K: along the Q block's rows (the rest along the head dim)
  // Byte offsets of the main kernel's regions: K, V (the CTA's keys, live throughout), `stages`
  // buffers each of Q, dO (one Q block), P, dS (one Q block against the keys), `stages` buffers
  // each of LSE and D (fp32, one a query row).
  int k, v, q, dout, p, ds, lse, dpsum;
  int q_stage, dout_stage, rows_stage;  // bytes from one stage's buffer to the next (Q, dO, LSE/D)
  int smem_bytes;
  int convert_smem_bytes;  // convert's staging tile: a Q block of dQ in the element type, stride_convert a row
};

// `elem_bytes`: 2 (f16, bf16) or 4 (fp32: every tile, P and dS included, holds fp32); `warps`
// and `stages` (1 or 2 Q/dO buffers) as the tiling's knobs; a split of 0 marks a tiling the
// warps cannot divide (the host refuses it). The splits do not depend on the element type.
FJ_HOST_DEVICE constexpr BwdLayout bwd_layout(int elem_bytes, int head_dim_qk, int head_dim_v, int block_m, int block_n,
                                              int warps, int stages) {
  const int row_pad = elem_bytes == 2 ? kBwdRowPad16 : kBwdRowPad32;
  constexpr int kFloatBytes = 4;
  BwdLayout l{};
  l.dqk = bwd_padded_head_dim(head_dim_qk, head_dim_v);
  l.dv = bwd_padded_head_dim(head_dim_v, head_dim_qk);
  l.swizzle_qk = bwd_swizzled(elem_bytes, l.dqk);
  l.swizzle_v = bwd_swizzled(elem_bytes, l.dv);
  l.stride_qk = l.swizzle_qk ? l.dqk : l.dqk + row_pad;
  l.stride_v = l.swizzle_v ? l.dv : l.dv + row_pad;
  l.stride_ps = block_n + row_pad;
  l.stride_convert = l.dqk + row_pad;
  l.sdp_warps_m = bwd_warps_along_rows(warps, block_m, block_n);
  // dK and dV share the split (one loop of their products): both head dims must divide.
  l.dkv_warps_n = bwd_warps_along_rows(warps, block_n, l.dqk, l.dv);
  l.dq_warps_m = bwd_warps_along_rows(warps, block_m, l.dqk);
  l.q_stage = block_m * l.stride_qk * elem_bytes;
  l.dout_stage = block_m * l.stride_v * elem_bytes;
  l.rows_stage = block_m * kFloatBytes;
  l.k = 0;
  l.v = l.k + block_n * l.stride_qk * elem_bytes;
  l.q = l.v + block_n * l.stride_v * elem_bytes;
  l.dout = l.q + stages * l.q_stage;
  l.p = l.dout + stages * l.dout_stage;
  l.ds = l.p + block_m * l.stride_ps * elem_bytes;
  l.lse = l.ds + block_m * l.stride_ps * elem_bytes;
  l.dpsum = l.lse + stages * l.rows_stage;
  l.smem_bytes = l.dpsum + stages * l.rows_stage;
  l.convert_smem_bytes = block_m * l.stride_convert * elem_bytes;
  return l;
}

}  // namespace fj_layout
