// One fa3_sm90 consumer's view of its 64 rows and of its wgmma accumulators: where the rows sit,
// which keys they see, the score transforms' per-row constants, and the accumulators as the
// m16n8 C-layout tiles the shared softmax and score transforms index.
#pragma once

#include "common/attention_params.cuh"
#include "common/online_softmax.cuh"
#include "common/ptx.cuh"
#include "common/score_tile.cuh"
#include "common/sequence.cuh"
#include "fa3_sm90/config.cuh"

namespace fj::fa3 {

using Softmax = OnlineSoftmax<1, kNTilesS, kNTilesO, kRescaleVotePerHalf>;

FJ_DEVICE unsigned pack(float lo, float hi) { return kBf16 ? pack_bf16x2(lo, hi) : pack_f16x2(lo, hi); }

// A wgmma accumulator as the m16n8 C-layout tiles the softmax and the score transforms index.
template <int kRegs>
FJ_DEVICE float (&c_tiles(float (&acc)[kRegs]))[1][kRegs / 4][4] {
  return *reinterpret_cast<float(*)[1][kRegs / 4][4]>(acc);
}

// One consumer's view of its 64 rows: where they sit, which keys they see, and the score
// transforms' per-row constants.
struct ConsumerRows {
  const FjAttentionParams* p;
  Sequence seq;
  int row0;  // this thread's row g (of g and g + 8) of its warp's 16, in sequence rows
  int col0;  // this thread's first column of every n8 tile
  int right;
  TileEdges edges;
  float alibi_slope, score_scale;

  // Scores of keys [n0, n0 + kBlockN) transformed and masked, ready for the softmax.
  FJ_DEVICE void prepare(float (&s)[kBlockN / 2], int n0) const {
    if constexpr (transforms_scores()) transform_scores(c_tiles(s), row0, n0 + col0, seq.offset(), *p, alibi_slope);
    edges.mask(c_tiles(s), n0, row0, n0 + col0, seq, p->window_left, right);
  }
};

}  // namespace fj::fa3
