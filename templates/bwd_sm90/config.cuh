// Compile-time shape of the bwd_sm90 kernels, from the rendered constants in namespace fj::cfg
// (the semantics every family gets, and this family's tiling: kBlockM, kBlockN,
// kMmaWarpgroups), and the two constants bwd_sm80's preprocess and convert take besides.
//
// First cut (docs/design/hopper_backward.md, step 1): one MMA warpgroup owns a block of 64 keys
// and walks every Q block of 64 rows; no mask, no GQA, head dims 64 and 128. The host refuses
// the rest, which stays on bwd_sm80.
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
static_assert(kMmaWarpgroups == 1 && kBlockM == 64 && kBlockN == 64,
              "bwd_sm90 step 1: one MMA warpgroup, 64 keys a CTA, Q blocks of 64 rows");
static_assert(kHeadDimQK == kHeadDimV && (kHeadDimQK == 64 || kHeadDimQK == 128), "bwd_sm90 step 1: head dims 64 and 128");
static_assert(!kCausal && !kWindow && !kGqa && !kVarlen && !kKvLens && !kSoftcap && !kAlibi && !kSinks && !kDeterministic,
              "bwd_sm90 step 1: no mask, GQA or other semantics (the host refuses them)");

constexpr bool kBf16 = kDtype == kBF16;
constexpr int kMmaThreads = 128 * kMmaWarpgroups;
constexpr int kWgmmaK = 16;          // a 16-bit wgmma's K step
constexpr int kAtomElems = fj_layout::kBwd90AtomElems;
constexpr int kAtomBytes = fj_layout::kBwd90AtomBytes;
constexpr int kStepsPerAtom = kAtomElems / kWgmmaK;
constexpr unsigned kGroupStride = 8 * kAtomBytes;  // 8 rows: the swizzle's repeat
constexpr int kDqChunk = 64;  // dQ's columns a wgmma group: one atom of K, 32 accumulators a thread
static_assert(kDQK % kDqChunk == 0, "dQ in whole 64-column chunks");

constexpr fj_layout::Bwd90Layout kLayout = fj_layout::bwd90_layout(kHeadDimQK, kHeadDimV, kBlockM, kBlockN);

}  // namespace fj::bwd90
