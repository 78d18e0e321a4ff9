// Shared-memory layout of the bwd_sm80 main kernel, included by the kernel and (later) by the
// host, which needs the byte count to launch and to prune tile candidates without a GPU.
#pragma once

#include "common/host_device.cuh"

namespace fj_layout {

// Head dims pad to 16: a 16-bit mma consumes k in steps of 16 and one ldmatrix.x4 covers two
// n8 tiles (the same rule as fa2_sm80's layout).
constexpr int kBwdHeadDimAlign = 16;
// 16-bit rows pad by 8 elements (16 bytes): an odd multiple of 16 bytes per row puts the 8 rows
// one ldmatrix reads in distinct banks.
constexpr int kBwdRowPad16 = 8;
// The fp32 dS tile pads each row by 4 words: rows then start in different banks for the
// scalar stores and loads of the C layout (a first-cut choice, not tuned).
constexpr int kBwdDsRowPad = 4;

FJ_HOST_DEVICE constexpr int bwd_round_up(int x, int m) { return (x + m - 1) / m * m; }

struct BwdLayout {
  int dqk;        // padded head dim of Q, K, dQ, dK
  int dv;         // padded head dim of V, O, dO, dV
  int stride_qk;  // shared row stride of the Q and K tiles, in elements
  int stride_v;   // shared row stride of the V and dO tiles (one stride: dP^T = V.dO^T reads both
                  // through one WarpGemm instance)
  int stride_ds;  // row stride of the fp32 dS tile, in floats
  // Byte offsets of the regions, in order: K, V (live for the whole CTA), Q, dO (one Q block),
  // dS (fp32), LSE and D (fp32 per query row).
  int k, v, q, dout, ds, lse, dpsum;
  int smem_bytes;
};

// 16-bit inputs only in the first cut (the fp32 path needs tf32 fragment loads; see backward.cu).
FJ_HOST_DEVICE constexpr BwdLayout bwd_layout(int head_dim_qk, int head_dim_v, int block_m, int block_n) {
  constexpr int kElemBytes = 2;
  BwdLayout l{};
  l.dqk = bwd_round_up(head_dim_qk, kBwdHeadDimAlign);
  l.dv = bwd_round_up(head_dim_v, kBwdHeadDimAlign);
  l.stride_qk = l.dqk + kBwdRowPad16;
  l.stride_v = l.dv + kBwdRowPad16;
  l.stride_ds = block_n + kBwdDsRowPad;
  l.k = 0;
  l.v = l.k + block_n * l.stride_qk * kElemBytes;
  l.q = l.v + block_n * l.stride_v * kElemBytes;
  l.dout = l.q + block_m * l.stride_qk * kElemBytes;
  l.ds = l.dout + block_m * l.stride_v * kElemBytes;
  l.lse = l.ds + block_m * l.stride_ds * 4;
  l.dpsum = l.lse + block_m * 4;
  l.smem_bytes = l.dpsum + block_m * 4;
  return l;
}

}  // namespace fj_layout
