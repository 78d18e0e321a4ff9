// Shared-memory layout and register split of the fa3_sm90 family, included by the kernel and by
// the host (which needs the byte count to launch and both to prune tilings without a GPU): one
// definition.
//
// Every tile is stored as TMA writes it with the 128-byte swizzle: "atoms" of 64 head-dim
// elements (128 bytes) by the tile's rows, one atom after another along the head dim; a head
// dim that is not a multiple of 64 leaves its last atom partly zero-filled by the copy engine.
// wgmma reads Q and K K-major and V N-major straight from these tiles. The output leaves
// through a tile of the same form (one per consumer) and a TMA store, where it fits (below).
#pragma once

namespace fj_layout {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define FJ_LAYOUT_FN __host__ __device__ constexpr
#else
#define FJ_LAYOUT_FN constexpr
#endif

constexpr int kAtomElems = 64;       // 16-bit elements in one 128-byte swizzled row
constexpr int kWarpgroupRows = 64;   // rows of one wgmma (m64)
constexpr int kWarpgroupThreads = 128;
constexpr int kSwizzleAlign = 1024;  // a 128-byte swizzle repeats every 8 rows: tiles start aligned to it

struct Fa3Layout {
  int atoms_qk, atoms_v;  // head dims / 64, rounded up
  int q_bytes;            // the CTA's query rows
  int k_bytes, v_bytes;   // one stage's K and V tiles
  int o_bytes;            // the consumers' output tiles; 0: O is stored from registers
  int q_offset, k_offset, v_offset, o_offset;  // bytes from the (1024-aligned) start
  int smem_bytes;         // including the alignment slack of the dynamic shared memory start
};

// Registers: one consumer warpgroup runs two CTAs per SM where their tiles fit (each one's
// softmax hides under the other's GEMMs), more consumers one CTA. The producer warpgroup only
// needs loop counters and addresses; the consumers share what is left of the register file.
constexpr int kSmemPerSm = 228 * 1024;  // sm_90: shared memory of one SM
constexpr int kSmemPerCtaExtra = 2048;  // the runtime's 1 KiB per CTA and the kernel's static barriers
constexpr int kRegisterFile = 65536;
constexpr int kProducerRegs = 24;      // setmaxnreg's minimum
constexpr int kMaxConsumerRegs = 240;  // a thread addresses at most 255; setmaxnreg counts in 8s

FJ_LAYOUT_FN int fa3_ctas_per_sm(int warpgroups, int smem_bytes) {
  return warpgroups == 1 && 2 * (smem_bytes + kSmemPerCtaExtra) <= kSmemPerSm ? 2 : 1;
}
FJ_LAYOUT_FN int fa3_consumer_regs(int warpgroups, int smem_bytes) {
  const int free_regs =
      (kRegisterFile / fa3_ctas_per_sm(warpgroups, smem_bytes) / kWarpgroupThreads - kProducerRegs) / warpgroups / 8 * 8;
  return free_regs < kMaxConsumerRegs ? free_regs : kMaxConsumerRegs;
}

constexpr int kSmemPerCtaMax = 227 * 1024;  // sm_90: dynamic shared memory one CTA may opt into

// `stage_o`: the output may leave through a TMA store (not with varlen, whose sequences share
// the tensor's rows, so a clipped box would write into the next sequence). It then does where
// its tiles fit beside the rings without costing a CTA per SM.
FJ_LAYOUT_FN Fa3Layout fa3_layout(int head_dim_qk, int head_dim_v, int warpgroups, int block_n, int stages,
                                  bool stage_o) {
  Fa3Layout l{};
  l.atoms_qk = (head_dim_qk + kAtomElems - 1) / kAtomElems;
  l.atoms_v = (head_dim_v + kAtomElems - 1) / kAtomElems;
  l.q_bytes = warpgroups * kWarpgroupRows * l.atoms_qk * kAtomElems * 2;
  l.k_bytes = block_n * l.atoms_qk * kAtomElems * 2;
  l.v_bytes = block_n * l.atoms_v * kAtomElems * 2;
  l.q_offset = 0;
  l.k_offset = l.q_bytes;
  l.v_offset = l.k_offset + stages * l.k_bytes;
  l.o_offset = l.v_offset + stages * l.v_bytes;
  l.smem_bytes = l.o_offset + kSwizzleAlign;
  const int o_bytes = warpgroups * kWarpgroupRows * l.atoms_v * kAtomElems * 2;
  if (stage_o && l.smem_bytes + o_bytes <= kSmemPerCtaMax &&
      fa3_ctas_per_sm(warpgroups, l.smem_bytes + o_bytes) == fa3_ctas_per_sm(warpgroups, l.smem_bytes)) {
    l.o_bytes = o_bytes;
    l.smem_bytes += o_bytes;
  }
  return l;
}

#undef FJ_LAYOUT_FN

}  // namespace fj_layout
