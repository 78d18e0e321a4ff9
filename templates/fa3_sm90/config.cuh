// Derived compile-time shape of one fa3_sm90 kernel, from the rendered variant constants in
// namespace fj::cfg (see engine/src/kernel_source.cpp).
#pragma once

#include "common/ptx.cuh"
#include "common/variant_types.cuh"
#include "fa3_sm90/layout.cuh"

namespace fj::fa3 {

using namespace fj::cfg;
using namespace fj::var;

constexpr bool kBf16 = kDtype == kBF16;  // f16 otherwise: the host refuses fp32
constexpr int kWgmmaK = 16;  // a 16-bit wgmma's K step
// Head dims are padded to wgmma's step: TMA zero-fills the columns past the tensor's head dim,
// so Q.K^T gains nothing from them and P.V writes zero columns that are never stored.
constexpr int kDQK = (kHeadDimQK + kWgmmaK - 1) / kWgmmaK * kWgmmaK;  // K extent of S = Q.K^T
constexpr int kDV = (kHeadDimV + kWgmmaK - 1) / kWgmmaK * kWgmmaK;    // N of O += P.V
static_assert(kHeadDimV % 8 == 0, "the host refuses head dims TMA cannot address (rows of 16 bytes)");

constexpr int kRowsPerWg = fj_layout::kWarpgroupRows;
constexpr int kConsumers = kWarpgroups;
constexpr int kWgThreads = fj_layout::kWarpgroupThreads;
constexpr int kThreads = (kConsumers + 1) * kWgThreads;
constexpr int kBlockM = kConsumers * kRowsPerWg;
constexpr int kStepsQK = kDQK / kWgmmaK;
constexpr int kStepsPV = kBlockN / kWgmmaK;
constexpr int kNTilesS = kBlockN / 8;  // n8 tiles of a score row block (the m16n8 C layout)
constexpr int kNTilesO = kDV / 8;
constexpr int kAtomBytes = fj_layout::kAtomElems * 2;  // one swizzled row: 128 bytes
constexpr int kStepsPerAtom = fj_layout::kAtomElems / kWgmmaK;
constexpr unsigned kGroupStride = 8 * kAtomBytes;  // 8 rows: the swizzle's repeat
static_assert(kBlockN % kWgmmaK == 0, "BLOCK_N must be a multiple of 16 (P.V's K step)");

// A cluster of kCluster CTAs (adjacent query blocks of one head) reads each K/V tile from L2
// once: every CTA loads 1/kCluster of the keys and TMA multicasts them to all. Only where every
// CTA of a cluster sees the same key tiles (the host's tile rules enforce it).
static_assert(kCluster == 1 || kCluster == 2, "clusters of 1 or 2 CTAs");
static_assert(kCluster == 1 || (!kCausal && !kWindow && !kVarlen && !kPaged),
              "a cluster's CTAs share every K/V tile: no per-block key ranges, no per-box page loads");
static_assert(kBlockN / kCluster % 8 == 0, "each CTA's share of a tile starts on the swizzle's 8-row repeat");
constexpr unsigned short kClusterMask = (1u << kCluster) - 1;
// Developer switch for A/B timing through FLASHJIT_NVRTC_OPTIONS (part of the cache key):
// FJ_MULTICAST=0 keeps the cluster but has each CTA load whole tiles itself.
#ifndef FJ_MULTICAST
#define FJ_MULTICAST 1
#endif
constexpr int kShareCtas = FJ_MULTICAST ? kCluster : 1;  // CTAs that share each K/V tile's load

constexpr fj_layout::Fa3Layout kLayout =
    fj_layout::fa3_layout(kHeadDimQK, kHeadDimV, kWarpgroups, kBlockN, kStages, /*stage_o=*/!kVarlen);
constexpr bool kStoreOViaTma = kLayout.o_bytes > 0;
constexpr int kCtasPerSm = fj_layout::fa3_ctas_per_sm(kConsumers, kLayout.smem_bytes);
constexpr int kConsumerRegs = fj_layout::fa3_consumer_regs(kConsumers, kLayout.smem_bytes);
constexpr int kProducerRegs = fj_layout::kProducerRegs;
static_assert(kCtasPerSm * kWgThreads * (kProducerRegs + kConsumers * kConsumerRegs) <= fj_layout::kRegisterFile,
              "the consumers' registers must fit the register file");

// Whether a sequence's keys may end inside the K/V tensors, with whatever bits an unowned cache
// slot holds after them (kv_lens, varlen, paged): TMA zero-fills only rows past the tensor, and a
// masked P of 0 times a NaN or Inf in V is NaN, so the last tile's V rows past the keys are zeroed.
constexpr bool kKeysEndInsideTensor = kVarlen || kKvLens || kPaged;

// Whether a consumer's softmax runs under its own P.V_{j-1} (the intra-warpgroup overlap) with
// the wait held back past it (sm90::wgmma_wait_after): measured +2-3% at D = 128 and, once the
// max moved on every increase put an O rescale on each tile, +3.8% at D = 256 (every cell of
// the H200 grid, bench/NOTES.md entry 24; ptxas holds it in 240 registers without spilling);
// but with three consumers (whose turns already hide each softmax) -1-5% at D = 64.
// Developer switch FJ_SOFTMAX_UNDER_PV=0/1 overrides the rule for A/B timing.
#ifdef FJ_SOFTMAX_UNDER_PV
constexpr bool kSoftmaxUnderPV = FJ_SOFTMAX_UNDER_PV;
#else
constexpr bool kSoftmaxUnderPV = kConsumers <= 2;
#endif
// Whether the O rescale votes per 8-row half instead of per warp (OnlineSoftmax::kVotePerHalf):
// above D = 128, where O is largest, +1.6% on top of the overlap above (H200, D = 256 grid);
// at D = 128 0.993, within noise of none (entry 24).
constexpr bool kRescaleVotePerHalf = kDV > 128;
// Whether O's rescale runs unconditionally among the second half of the tile's exponentials
// (OnlineSoftmax::rescale_all, its multiplies in the issue slots the exponentials leave) instead
// of after them behind a vote: at D = 64, where O is 32 registers, +2.4% (H200, bf16/fp16 grid,
// one consumer or three; bench/NOTES.md entry 24); at D = 128 -0.8%. FJ_RESCALE_AMONG_EXPS=0/1
// overrides the rule for A/B timing.
#ifdef FJ_RESCALE_AMONG_EXPS
constexpr bool kRescaleAmongExps = FJ_RESCALE_AMONG_EXPS;
#else
constexpr bool kRescaleAmongExps = kDV <= 64;
#endif

// Named barriers 1..kConsumers (0 is __syncthreads): consumer c waits on kTurnBarrier + c for
// its turn, which the consumer before it completes: two warpgroups per barrier.
constexpr int kTurnBarrier = 1;
constexpr int kTurnThreads = 2 * kWgThreads;
// Named barriers kEpilogueBarrier + c: consumer c's warps between writing its output tile and
// the TMA store that reads it (consumer 0's also between zeroing a V tile's tail and its P.V).
constexpr int kEpilogueBarrier = kTurnBarrier + kConsumers;
static_assert(kEpilogueBarrier + kConsumers <= 16, "sm_90 has 16 named barriers");

}  // namespace fj::fa3
