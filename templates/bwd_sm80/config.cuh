// Derived compile-time shape of the bwd_sm80 kernels, from the rendered variant constants in
// namespace fj::cfg (the same semantics constants every family gets from
// engine/src/kernel_source.cpp, and this family's tiling: kBlockM, kBlockN, kWarps).
#pragma once

#include "common/ptx.cuh"
#include "common/variant_types.cuh"
#include "bwd_sm80/layout.cuh"
#include "bwd_sm80/params.cuh"

namespace fj::bwd {

using namespace fj::cfg;
using namespace fj::var;

// What the family serves so far; the host refuses the rest until the later increments land
// (docs/design/backward.md).
static_assert(k16Bit, "bwd_sm80: fp16 and bf16 only so far");
static_assert(!kKvStarts && !kPaged, "bwd_sm80: no kv_starts or paged K/V (no training through a KV cache)");

constexpr int kThreads = kWarps * 32;
constexpr int kMmaRows = 16;  // rows of one m16n8k16 tile

// Key phase (S^T, dP^T, dV, dK): each warp owns kKeyRowsPerWarp of the CTA's kBlockN keys
// against all kBlockM query rows of the current Q block.
constexpr int kKeyRowsPerWarp = kBlockN / kWarps;
constexpr int kKeyTiles = kKeyRowsPerWarp / kMmaRows;
static_assert(kKeyRowsPerWarp % kMmaRows == 0, "BLOCK_N must give every warp a multiple of 16 keys");
// Query phase (dQ = dS.K): the warps form kQRowWarps x kQColWarps; each owns kQRowsPerWarp of
// the Q block's rows and kQColsPerWarp of dQ's (padded) columns against all keys. More warps
// than 16-row tiles split the columns, so a short Q block still has work for every warp
// (BLOCK_M 64 on 8 warps: 4 x 2).
constexpr int kQRowWarps = kBlockM / kMmaRows < kWarps ? kBlockM / kMmaRows : kWarps;
constexpr int kQColWarps = kWarps / kQRowWarps;
constexpr int kQRowsPerWarp = kBlockM / kQRowWarps;
constexpr int kQTiles = kQRowsPerWarp / kMmaRows;
static_assert(kQRowsPerWarp % kMmaRows == 0, "BLOCK_M must give every warp a multiple of 16 query rows");
static_assert(kWarps % kQRowWarps == 0, "the warps must split into whole column groups");

constexpr fj_layout::BwdLayout kLayout = fj_layout::bwd_layout(kHeadDimQK, kHeadDimV, kBlockM, kBlockN);
constexpr int kDQK = kLayout.dqk;
constexpr int kDV = kLayout.dv;
constexpr int kStrideQK = kLayout.stride_qk;
constexpr int kStrideV = kLayout.stride_v;
constexpr int kStrideDs = kLayout.stride_ds;
// The fp32 dQ staging tile over the Q and dO tiles: rows padded by 4 floats, so the C layout's
// float2 stores of 8 rows start in different banks.
constexpr int kStrideDq = kDQK + 4;
static_assert(kBlockM * kStrideDq * 4 <= kLayout.ds - kLayout.q, "the dQ staging tile must fit in the Q and dO tiles");

constexpr int kNTilesM = kBlockM / 8;    // n8 tiles across the Q block (columns of S^T)
constexpr int kNTilesN = kBlockN / 8;    // n8 tiles across the keys (columns of dS in dQ = dS.K)
constexpr int kNTilesQK = kDQK / 8;      // n8 tiles of dK and dQ
constexpr int kNTilesV = kDV / 8;        // n8 tiles of dV
// A warp's dQ columns in the query phase, in n8 tiles: a whole number of ldmatrix.x4 pairs.
constexpr int kNTilesQKWarp = kNTilesQK / kQColWarps;
static_assert(kNTilesQK % (2 * kQColWarps) == 0, "each column group of warps takes pairs of n8 tiles of dQ");
constexpr int kQColsPerWarp = kNTilesQKWarp * 8;
// dQ = dS K in this many column parts of the warp's columns (each a whole number of pairs).
constexpr int kDqParts = kNTilesQKWarp % 4 == 0 && kNTilesQKWarp >= 8 ? 2 : 1;

}  // namespace fj::bwd
