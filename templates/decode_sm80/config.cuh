// Derived compile-time shape of one decode_sm80 kernel, from the rendered variant constants in
// namespace fj::cfg. A CTA owns kRows (token, query head) rows of one key/value head: the query
// heads of a GQA group are packed together, so each K/V tile is read once for the whole group.
// Its warps split every key tile between them (kWarpKeys keys each) and merge their partial
// results at the end.
#pragma once

#include "common/online_softmax.cuh"
#include "common/ptx.cuh"
#include "common/sm80_mainloop.cuh"
#include "common/variant_types.cuh"
#include "common/warp_gemm_sm80.cuh"
#include "decode_sm80/layout.cuh"

namespace fj::dec {

using namespace fj::cfg;
using namespace fj::var;

constexpr int kThreads = kWarps * 32;
constexpr int kRows = 16 * kRowTiles;  // rows of a CTA: whole 16-row mma tiles
constexpr int kNTilesS = kWarpKeys / 8;
static_assert(kWarpKeys % 16 == 0, "a warp's keys come in 16-key mma steps");

constexpr fj_layout::DecodeLayout kLayout =
    fj_layout::decode_layout(k16Bit ? 2 : 4, kHeadDimQK, kHeadDimV, kRows, kWarps, kWarpKeys, kStages);
constexpr int kDQK = kLayout.dqk;
constexpr int kDV = kLayout.dv;
constexpr int kStrideQK = kLayout.stride_qk;
constexpr int kStrideV = kLayout.stride_v;
constexpr int kTileKeys = kLayout.tile_keys;
constexpr int kStageElems = kLayout.stage_elems;
constexpr int kMergeStride = kLayout.merge_stride;
constexpr int kNTilesO = kDV / 8;

using sm80::Frag;
using Gemm = sm80::WarpGemm<Elem, kDtype, kTf32, kRowTiles, kNTilesS, kNTilesO, kDQK, kStrideQK, kStrideV>;
using Softmax = OnlineSoftmax<kRowTiles, kNTilesS, kNTilesO>;
using KvRing = sm80::KvRing<Elem, kTileKeys, kHeadDimQK, kDQK, kStrideQK, kHeadDimV, kDV, kStrideV, kStages, kThreads>;
static_assert(KvRing::kStageElems == kStageElems, "the ring's stages are the layout's (host and device agree)");

// Q fragments stay in registers across the key loop when they are cheap (at most 32 registers).
constexpr bool kQInRegisters = k16Bit && kRowTiles * (kDQK / 16) * 4 <= 32;

}  // namespace fj::dec
