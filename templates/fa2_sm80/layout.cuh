// Shared-memory layout of the fa2_sm80 family, included by the kernel and by the host (which
// needs the byte count to launch and to prune tile candidates without a GPU): one definition.
#pragma once

#include "common/host_device.cuh"

namespace fj_layout {

FJ_HOST_DEVICE constexpr int round_up(int x, int m) { return (x + m - 1) / m * m; }

// Head dims pad to 16: a 16-bit mma consumes k in steps of 16, and one ldmatrix.x4 covers two
// n8 tiles of V.
constexpr int kHeadDimAlign = 16;

struct Fa2Layout {
  int elem_bytes;
  int dqk;       // padded head dim of Q and K
  int dv;        // padded head dim of V and O
  int stride_qk; // shared row stride of Q and K tiles, in elements
  int stride_v;  // shared row stride of V tiles
  int stride_o;  // shared row stride of the output staging tile
  int smem_bytes;
};

// Row padding: for 16-bit tiles +8 elements (16 bytes) makes the row stride an odd multiple of
// 16 bytes, so the 8 rows one ldmatrix reads hit distinct banks. For fp32, fragments are read
// one word per lane: Q/K rows are read 8 rows x 4 columns (stride = 4 mod 8 words spreads them
// over 32 banks) and V rows 4 rows x 8 columns (stride = 8 mod 16 words).
FJ_HOST_DEVICE constexpr Fa2Layout fa2_layout(int elem_bytes, int head_dim_qk, int head_dim_v,
                                              int block_m, int block_n, int stages) {
  Fa2Layout l{};
  l.elem_bytes = elem_bytes;
  l.dqk = round_up(head_dim_qk, kHeadDimAlign);
  l.dv = round_up(head_dim_v, kHeadDimAlign);
  l.stride_qk = l.dqk + (elem_bytes == 2 ? 8 : 4);
  l.stride_v = l.dv + 8;
  l.stride_o = l.dv + (elem_bytes == 2 ? 8 : 4);
  const int mainloop = block_m * l.stride_qk + stages * block_n * (l.stride_qk + l.stride_v);
  const int epilogue = block_m * l.stride_o;
  l.smem_bytes = (mainloop > epilogue ? mainloop : epilogue) * elem_bytes;
  return l;
}

}  // namespace fj_layout
