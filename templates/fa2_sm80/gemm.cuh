// fa2_sm80's instance of the shared warp-level products (common/warp_gemm_sm80.cuh): a warp
// multiplies its own 16*kMTiles query rows against a whole kBlockN-key tile.
#pragma once

#include "common/warp_gemm_sm80.cuh"
#include "fa2_sm80/config.cuh"

namespace fj::fa2 {

using sm80::Frag;
using Gemm = sm80::WarpGemm<Elem, kDtype, kTf32, kMTiles, kNTilesS, kNTilesO, kDQK, kStrideQK, kStrideV>;

}  // namespace fj::fa2
