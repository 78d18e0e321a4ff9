// The sm_80 main loop of the mma.sync families (fa2_sm80, decode_sm80): a ring of kStages shared
// K/V buffers filled by cp.async, and one attend() per key tile (S = Q.K^T, the family's score
// transform and mask, the online softmax, O += P.V). The families differ in which rows and keys
// a warp owns and in how a tile's rows are copied (dense, paged), which they pass in; the order
// of waits, copies and products is this file's.
#pragma once

#include "common/ptx.cuh"
#include "common/tile_io.cuh"
#include "common/tile_verbs.cuh"

namespace fj::sm80 {

// kKeys keys a stage: K rows (padded to kDQK columns, row stride kStrideQK) then V rows.
template <typename Elem, int kKeys, int kHeadDimQK, int kDQK, int kStrideQK, int kHeadDimV, int kDV, int kStrideV,
          int kStages, int kThreads>
struct KvRing {
  static_assert(kStages >= 2, "the ring prefetches at least one tile ahead");
  static constexpr int kStageElems = kKeys * (kStrideQK + kStrideV);
  Elem* base;

  // Tile t of the CTA's range lives in slot t % kStages: its K rows, then its V rows.
  struct Slot {
    Elem* k;
    Elem* v;
  };
  FJ_DEVICE Slot slot(int t) const {
    Elem* k = base + (t % kStages) * kStageElems;
    return {k, k + kKeys * kStrideQK};
  }
  // Keys [key0, ...) of tile t's slot: a warp's slice of the tile (decode_sm80).
  FJ_DEVICE Slot slice(int t, int key0) const {
    return {base + (t % kStages) * kStageElems + key0 * kStrideQK,
            base + (t % kStages) * kStageElems + kKeys * kStrideQK + key0 * kStrideV};
  }

  // Tiles 0 .. kStages-2 in flight; load(t) starts the copies of tile t.
  template <class Load>
  FJ_DEVICE void prologue(int n_tiles, Load&& load) const {
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < n_tiles) load(s);
      cp_async_commit();  // empty groups keep the wait count uniform
    }
  }

  // Tile t has landed and every warp is done with the slot the next copy overwrites.
  FJ_DEVICE void wait() const {
    cp_async_wait<kStages - 2>();
    __syncthreads();
  }

  // The copy kStages-1 tiles ahead of t, into the slot tile t-1 has left.
  template <class Load>
  FJ_DEVICE void issue_ahead(int t, int n_tiles, Load&& load) const {
    if (t + kStages - 1 < n_tiles) load(t + kStages - 1);
    cp_async_commit();
  }

  // No copy in flight and every warp past its last tile: the stages may be reused.
  FJ_DEVICE void drain() const {
    cp_async_wait<0>();
    __syncthreads();
  }
};

// Q fragments of rows [row0, row0 + 16 * kMTiles) into registers, for every head-dim step.
template <class Gemm, int kQSteps, int kMTiles, typename Elem>
FJ_DEVICE void load_q_regs(unsigned (&qreg)[kQSteps][kMTiles][4], const Elem* sQ, int row0, int lane) {
#pragma unroll
  for (int kk = 0; kk < kQSteps; ++kk)
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) Gemm::load_q_frag16(qreg[kk][mt], sQ, row0 + mt * 16, kk, lane);
}

// One key tile: S = Q.K^T (Q rows from q_row0, from registers when kQInRegisters), then
// score_mod(S) (the family's transforms and mask), the online softmax, and O += P.V.
template <class Gemm, int kNTilesS, bool k16Bit, bool kQInRegisters, int kMTiles, int kNTilesO, int kQSteps,
          typename Elem, class Softmax, class ScoreMod>
FJ_DEVICE void attend(float (&o)[kMTiles][kNTilesO][4], Softmax& sm, const unsigned (&qreg)[kQSteps][kMTiles][4],
                      const Elem* sQ, const Elem* sK, const Elem* sV, int q_row0, int lane, float score_scale,
                      ScoreMod&& score_mod) {
  float s[kMTiles][kNTilesS][4];
  zero_tile(s);
  if constexpr (k16Bit) Gemm::template gemm_qk16<kQInRegisters>(s, qreg, sQ, sK, q_row0, lane);
  else Gemm::gemm_qk32(s, sQ, sK, q_row0, lane);
  score_mod(s);
  sm.update(s, o, score_scale);
  if constexpr (k16Bit) Gemm::gemm_pv16(o, s, sV, lane);
  else Gemm::gemm_pv32(o, s, sV, lane);
}

}  // namespace fj::sm80
