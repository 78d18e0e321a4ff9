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

constexpr fj_layout::Fa3Layout kLayout =
    fj_layout::fa3_layout(kHeadDimQK, kHeadDimV, kWarpgroups, kBlockN, kStages, /*stage_o=*/!kVarlen);
constexpr bool kStoreOViaTma = kLayout.o_bytes > 0;
constexpr int kCtasPerSm = fj_layout::fa3_ctas_per_sm(kConsumers, kLayout.smem_bytes);
constexpr int kConsumerRegs = fj_layout::fa3_consumer_regs(kConsumers, kLayout.smem_bytes);
constexpr int kProducerRegs = fj_layout::kProducerRegs;
static_assert(kCtasPerSm * kWgThreads * (kProducerRegs + kConsumers * kConsumerRegs) <= fj_layout::kRegisterFile,
              "the consumers' registers must fit the register file");

// Named barriers 1..kConsumers (0 is __syncthreads): consumer c waits on kTurnBarrier + c for
// its turn, which the consumer before it completes: two warpgroups per barrier.
constexpr int kTurnBarrier = 1;
constexpr int kTurnThreads = 2 * kWgThreads;
// Named barriers kEpilogueBarrier + c: consumer c's warps between writing its output tile and
// the TMA store that reads it.
constexpr int kEpilogueBarrier = kTurnBarrier + kConsumers;
static_assert(kEpilogueBarrier + kConsumers <= 16, "sm_90 has 16 named barriers");

}  // namespace fj::fa3
