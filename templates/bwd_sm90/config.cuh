// Compile-time shape of the bwd_sm90 kernels, from the rendered constants in namespace fj::cfg
// (the semantics every family gets, and this family's tiling: kBlockM, kBlockN,
// kMmaWarpgroups), and the two constants bwd_sm80's preprocess and convert take besides.
//
// So far (docs/design/hopper_backward.md, steps 1, 2 without the producer, 5 and 6): one or two
// MMA warpgroups own 64 keys each of the CTA's block and walk the Q blocks of 64 rows that see
// them together, over every q-head of their KV head; no mask or causal, GQA, head dims 64 and
// 128. The host refuses the rest, which stays on bwd_sm80.
#pragma once

namespace fj::cfg {
// bwd_sm80's preprocess and convert run with 4 warps and read the dQ accumulator in the order
// their 4-warp split of a 64-row block gives (dq_store.cuh); this family's main kernel adds in
// that order. One Q/dO stage: their layout's byte counts assume nothing of ours.
constexpr int kWarps = 4;
constexpr int kStages = 1;
}  // namespace fj::cfg

#include "bwd_sm80/config.cuh"
#include "bwd_sm80/dq_store.cuh"
#include "bwd_sm90/layout.cuh"
#include "common/sm90/wgmma.cuh"

namespace fj::bwd90 {

using namespace fj::cfg;
using namespace fj::var;
using fj::bwd::kDQK;
using fj::bwd::kDV;

static_assert(k16Bit, "bwd_sm90: 16-bit inputs (the host keeps fp32 on bwd_sm80)");
static_assert((kMmaWarpgroups == 1 || kMmaWarpgroups == 2) && kBlockN == 64 * kMmaWarpgroups,
              "bwd_sm90: one or two MMA warpgroups of 64 keys each");
static_assert(kBlockM == 64 || (kBlockM == 128 && kMmaWarpgroups == 2 && kHeadDimQK == 64),
              "bwd_sm90: Q blocks of 64 rows, or of 128 at head dim 64 (S^T and dP^T of 128 queries and dK, dV "
              "of 64 columns fit a thread's registers there, not at 128)");
static_assert(kHeadDimQK == kHeadDimV && (kHeadDimQK == 64 || kHeadDimQK == 128), "bwd_sm90: head dims 64 and 128 so far");
static_assert(!kWindow && !kVarlen && !kKvLens && !kSoftcap && !kAlibi && !kSinks && !kDeterministic,
              "bwd_sm90: no mask but causal, no other semantics so far (the host refuses them)");

constexpr bool kBf16 = kDtype == kBF16;
constexpr int kMmaThreads = fj_layout::kBwd90WarpgroupThreads * kMmaWarpgroups;
constexpr int kThreads = fj_layout::bwd90_threads(kMmaWarpgroups);
// The producer warpgroup after the MMA warpgroups issues every copy (cp.async, counted on mbarriers).
constexpr int kLoaderThreads = kThreads - kMmaThreads;
// setmaxnreg with two MMA warpgroups: the CTA holds what its launch gave it (384 threads at 168
// registers; setmaxnreg.inc waits forever for registers beyond that pool). The producer keeps 32
// (its copy loop spilled at 24), the MMA warpgroups take the rest (dK, dV, S^T, dP^T and their
// 16-bit copies at head dim 128). With one, every thread has 255 from the start.
constexpr bool kMoveRegisters = kMmaWarpgroups == 2;
constexpr int kRegisterFile = 65536;
constexpr int kRegisterGranule = 8;  // registers are allocated (and setmaxnreg counts) in 8s
constexpr int kLaunchRegs = kRegisterFile / kThreads / kRegisterGranule * kRegisterGranule;
constexpr int kProducerRegs = 32;
constexpr int kSetmaxnregCap = 240;  // a thread addresses at most 255 registers; setmaxnreg counts in 8s
constexpr int kMmaRegs = (kLaunchRegs * kThreads - kLoaderThreads * kProducerRegs) / kMmaThreads / kRegisterGranule * kRegisterGranule;
static_assert(!kMoveRegisters || (kMmaRegs <= kSetmaxnregCap &&
              kLoaderThreads * kProducerRegs + kMmaThreads * kMmaRegs <= kLaunchRegs * kThreads),
              "setmaxnreg moves registers within the launch's allocation, at most kSetmaxnregCap a thread");
constexpr int kDsBarrier = 1;  // named barrier between the MMA warpgroups (0 is __syncthreads)

// The producer's handshakes: K and V landed once; per Q stage, its copies landed (full, one
// arrival per producer thread) and every MMA thread is done with it (empty).
struct Barriers {
  unsigned long long kv_full;
  unsigned long long full[fj_layout::kBwd90Stages];
  unsigned long long empty[fj_layout::kBwd90Stages];
};
constexpr int kWgmmaK = 16;          // a 16-bit wgmma's K step
constexpr int kAtomElems = fj_layout::kBwd90AtomElems;
constexpr int kAtomBytes = fj_layout::kBwd90AtomBytes;
constexpr int kStepsPerAtom = kAtomElems / kWgmmaK;
constexpr unsigned kGroupStride = 8 * kAtomBytes;  // 8 rows: the swizzle's repeat
constexpr int kWgKeys = 64;  // keys a warpgroup owns: the M of its S^T, dP^T, dV and dK wgmmas
// dQ = dS.K is split among the warpgroups (each reads every key's dS, so each element is added
// once a Q block): by rows where the block has 64 for each (a wgmma's M), else by head-dim
// columns, in chunks of at most 64 columns: 32 accumulators a thread each.
constexpr bool kDqSplitRows = kBlockM == 64 * kMmaWarpgroups && kMmaWarpgroups > 1;
constexpr int kDqWgRows = kDqSplitRows ? 64 : kBlockM;
static_assert(kDqWgRows == 64, "dQ's wgmma M: 64 rows a warpgroup");
constexpr int kDqWgCols = kDqSplitRows ? kDQK : kDQK / kMmaWarpgroups;
constexpr int kDqChunk = kDqWgCols < 64 ? kDqWgCols : 64;
static_assert(kDqWgCols % kDqChunk == 0 && kDqChunk % 16 == 0, "dQ in whole chunks of a multiple of 16 columns");
constexpr int kQStages = fj_layout::kBwd90Stages;  // Q blocks in shared memory (layout.cuh)
constexpr int kDsBuffers = fj_layout::kBwd90DsBuffers;

constexpr fj_layout::Bwd90Layout kLayout = fj_layout::bwd90_layout(kHeadDimQK, kHeadDimV, kBlockM, kBlockN);

}  // namespace fj::bwd90
