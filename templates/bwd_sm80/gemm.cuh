// bwd_sm80's instances of the shared warp-level products (common/warp_gemm_sm80.cuh). The key
// phase works on transposed scores (rows = the warp's keys, columns = the Q block's rows), so
// every product of the backward is one the forward already has:
//   GemmS:  S^T  = K_warp . Q^T     (gemm_qk16: A = K rows, B = Q rows, over kDQK)
//           dV  += P^T . dO         (gemm_pv16: A = P^T in registers, B = dO rows, over kBlockM)
//   GemmDP: dP^T = V_warp . dO^T    (gemm_qk16: A = V rows, B = dO rows, over kDV)
//           dK  += dS^T . Q         (gemm_pv16: A = dS^T in registers, B = Q rows, over kBlockM)
//   GemmDQ: dQ   = dS_warp . K      (gemm_pv16: A = dS read back from shared fp32, B = K rows, 16 keys a call)
// WarpGemm's template names are the forward's (kDQK = the contraction of gemm_qk16, kStrideQK
// its operands' stride, kStrideV gemm_pv16's B stride); the comments above say what each means here.
#pragma once

#include "bwd_sm80/config.cuh"
#include "common/warp_gemm_sm80.cuh"

namespace fj::bwd {

using sm80::Frag;
using GemmS = sm80::WarpGemm<Elem, kDtype, kTf32, kKeyTiles, kNTilesM, kNTilesV, kDQK, kStrideQK, kStrideV>;
using GemmDP = sm80::WarpGemm<Elem, kDtype, kTf32, kKeyTiles, kNTilesM, kNTilesQK, kDV, kStrideV, kStrideQK>;
// dQ one k16 step of keys and one of kDqParts column parts at a time (bwd_sm80/backward.cu says
// why): A is 16 keys of dS, B those keys' rows of K, the part's columns.
using GemmDQ = sm80::WarpGemm<Elem, kDtype, kTf32, kQTiles, 2, kNTilesQKWarp / kDqParts, kDQK, kStrideQK, kStrideQK>;

}  // namespace fj::bwd
