// Derived compile-time shape of one fa2_sm80 kernel, from the rendered variant constants in
// namespace fj::cfg (see engine/src/kernel_source.cpp).
#pragma once

#include "common/ptx.cuh"
#include "common/sm80_mainloop.cuh"
#include "common/variant_types.cuh"
#include "fa2_sm80/layout.cuh"

namespace fj::fa2 {

using namespace fj::cfg;
using namespace fj::var;

constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = kBlockM / kWarps;
constexpr int kMTiles = kRowsPerWarp / 16;  // 16-row mma tiles each warp owns
static_assert(kRowsPerWarp % 16 == 0, "BLOCK_M must give every warp a multiple of 16 rows");
static_assert(kBlockN % 16 == 0, "BLOCK_N must be a multiple of 16 (one 16-bit mma k-step)");
static_assert(kStages >= 2, "the pipeline prefetches at least one tile ahead");

constexpr fj_layout::Fa2Layout kLayout =
    fj_layout::fa2_layout(k16Bit ? 2 : 4, kHeadDimQK, kHeadDimV, kBlockM, kBlockN, kStages);
constexpr int kDQK = kLayout.dqk;
constexpr int kDV = kLayout.dv;
constexpr int kStrideQK = kLayout.stride_qk;
constexpr int kStrideV = kLayout.stride_v;
constexpr int kStrideO = kLayout.stride_o;

constexpr int kNTilesS = kBlockN / 8;  // n8 tiles of the score tile
constexpr int kNTilesO = kDV / 8;      // n8 tiles of the output tile

using KvRing = sm80::KvRing<Elem, kBlockN, kHeadDimQK, kDQK, kStrideQK, kHeadDimV, kDV, kStrideV, kStages, kThreads>;

// Q fragments stay in registers across the key loop when they are cheap (at most 16 registers
// a thread); otherwise they are re-read from shared memory, which FA2 also does at large D.
constexpr int kQFragRegs = kMTiles * (kDQK / 16) * 4;
constexpr bool kQInRegisters = k16Bit && kQFragRegs <= 16;

}  // namespace fj::fa2
