// Shared-memory layout of the decode_sm80 family, included by the kernel and by the host (which
// needs the byte count to launch and to prune tilings without a GPU): one definition.
#pragma once

#include "common/host_device.cuh"

namespace fj_layout {

// Splits of one row block's keys at most: the merge keeps a weight per (row, split) in shared
// memory, and more splits than this only add merge traffic.
constexpr int kMaxDecodeSplits = 128;

struct DecodeLayout {
  int dqk, dv;              // head dims padded to 16 (a 16-bit mma step)
  int stride_qk, stride_v;  // shared row strides of Q/K and V tiles, in elements
  int tile_keys;            // keys per pipeline stage: warps x keys per warp
  int q_elems;              // the query rows' tile
  int stage_elems;          // one stage's K and V
  int merge_stride;         // row stride (floats) of the cross-warp merge buffer
  int smem_bytes;
};

// Rows are padded like fa2_sm80's (an odd multiple of 16 bytes for 16-bit ldmatrix; 4 words for
// fp32 scalar fragments). The end of the main loop reuses the stages for the cross-warp merge:
// every warp's partial output rows and their max and sum.
FJ_HOST_DEVICE constexpr DecodeLayout decode_layout(int elem_bytes, int head_dim_qk, int head_dim_v, int rows,
                                                    int warps, int warp_keys, int stages) {
  DecodeLayout l{};
  l.dqk = (head_dim_qk + 15) / 16 * 16;
  l.dv = (head_dim_v + 15) / 16 * 16;
  l.stride_qk = l.dqk + (elem_bytes == 2 ? 8 : 4);
  l.stride_v = l.dv + 8;
  l.tile_keys = warps * warp_keys;
  l.q_elems = rows * l.stride_qk;
  l.stage_elems = l.tile_keys * (l.stride_qk + l.stride_v);
  l.merge_stride = l.dv + 4;  // 4 floats of padding: the 8 row groups of a warp hit distinct banks
  const int mainloop = (l.q_elems + stages * l.stage_elems) * elem_bytes;
  // ...and the split merge's weights: rows x splits floats.
  const int warp_merge = (warps * rows * l.merge_stride + 2 * warps * rows) * 4;
  const int split_merge = rows * kMaxDecodeSplits * 4;
  const int merge = warp_merge > split_merge ? warp_merge : split_merge;
  l.smem_bytes = mainloop > merge ? mainloop : merge;
  return l;
}

}  // namespace fj_layout
