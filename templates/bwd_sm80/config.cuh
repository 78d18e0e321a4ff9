// Derived compile-time shape of the bwd_sm80 kernels, from the rendered variant constants in
// namespace fj::cfg (the same semantics constants every family gets from
// engine/src/kernel_source.cpp, and this family's tiling: kBlockM, kBlockN, kWarps, kStages).
// The warp splits come from layout.cuh, the rule the host checks tilings with.
#pragma once

#include "common/ptx.cuh"
#include "common/variant_types.cuh"
#include "bwd_sm80/layout.cuh"
#include "bwd_sm80/params.cuh"

namespace fj::bwd {

using namespace fj::cfg;
using namespace fj::var;

// What the family serves so far; the host refuses the rest (docs/design/backward.md).
static_assert(!kKvStarts && !kPaged, "bwd_sm80: no kv_starts or paged K/V (no training through a KV cache)");
static_assert(kStages == 1 || kStages == 2, "bwd_sm80: one Q/dO buffer, or two (the next Q block's copies under this one)");

constexpr int kThreads = kWarps * 32;
constexpr int kMmaRows = 16;  // rows of one m16n8k16 tile, and its k step

constexpr fj_layout::BwdLayout kLayout =
    fj_layout::bwd_layout(int(sizeof(Elem)), kHeadDimQK, kHeadDimV, kBlockM, kBlockN, kWarps, kStages);
constexpr int kDQK = kLayout.dqk;
constexpr int kDV = kLayout.dv;
constexpr int kStrideQK = kLayout.stride_qk;
constexpr int kStrideV = kLayout.stride_v;
constexpr int kStridePS = kLayout.stride_ps;
constexpr int kStrideConvert = kLayout.stride_convert;
constexpr bool kSwizzleQK = kLayout.swizzle_qk;  // Q and K tiles: common/smem_swizzle.cuh
constexpr bool kSwizzleV = kLayout.swizzle_v;    // V and dO tiles
static_assert(kLayout.sdp_warps_m && kLayout.dkv_warps_n && kLayout.dq_warps_m,
              "the warps must split every product into warp tiles of whole 16 x 16 steps (the host checks this)");

// Each product's warp tile: warp w is (w % along-first, w / along-first) in its grid.
// S = Q K^T and dP = dO V^T: kSdpRows query rows x kSdpKeys keys a warp.
constexpr int kSdpWarpsM = kLayout.sdp_warps_m;
constexpr int kSdpRows = kBlockM / kSdpWarpsM;
constexpr int kSdpKeys = kBlockN / (kWarps / kSdpWarpsM);
constexpr int kSdpMTiles = kSdpRows / kMmaRows;
constexpr int kSdpNTiles = kSdpKeys / 8;
// A Q block's rows keep their LSE and D (workspace, shared memory) grouped by row % 8, the C
// fragment row a lane holds (Frag::g): a lane's 2 * kSdpMTiles rows of its S/dP tile are then
// adjacent and load as vectors, not one broadcast word each.
constexpr int kRowGroups = 8;
FJ_DEVICE int row_stat_slot(int r) { return r % kRowGroups * (kBlockM / kRowGroups) + r / kRowGroups; }
// dV += P^T dO and dK += dS^T Q: kDkvKeys keys x a kDkvCols share of each head dim a warp.
constexpr int kDkvWarpsN = kLayout.dkv_warps_n;
constexpr int kDkvWarpsD = kWarps / kDkvWarpsN;
constexpr int kDkvKeys = kBlockN / kDkvWarpsN;
constexpr int kDkvMTiles = kDkvKeys / kMmaRows;
constexpr int kDkColsWarp = kDQK / kDkvWarpsD;
constexpr int kDvColsWarp = kDV / kDkvWarpsD;
// dQ = dS K: kDqRows query rows x kDqCols of the head dim a warp.
constexpr int kDqWarpsM = kLayout.dq_warps_m;
constexpr int kDqRows = kBlockM / kDqWarpsM;
constexpr int kDqCols = kDQK / (kWarps / kDqWarpsM);
constexpr int kDqMTiles = kDqRows / kMmaRows;
constexpr int kDqNTiles = kDqCols / 8;

}  // namespace fj::bwd
