// fa2_sm80's softmax state over its warps' score tiles (masks and transforms: common/score_tile.cuh).
#pragma once

#include "common/online_softmax.cuh"
#include "common/score_tile.cuh"
#include "fa2_sm80/config.cuh"

namespace fj::fa2 {

using SoftmaxState = OnlineSoftmax<kMTiles, kNTilesS, kNTilesO>;

}  // namespace fj::fa2
