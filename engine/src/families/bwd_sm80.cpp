// Host side of the bwd_sm80 family (templates/bwd_sm80/): the backward pass on sm_80 tensor
// cores. Knobs, tile rules, what the family refuses, and its launch shape (bwd_launches.hpp has
// the three launches and their workspace); its main kernel runs a CTA per (BLOCK_N keys, KV head,
// batch), looping over the q-heads of its GQA group: dK, dV written, dQ added with atomics
// (deterministic: in a fixed order of K/V blocks, templates/bwd_sm80/dq_order.cuh).
#include <algorithm>

#include "bwd_launches.hpp"
#include "kernel_family.hpp"
#include "templates/bwd_sm80/layout.cuh"

namespace flashjit {
namespace {

// The speed-only knobs, declared once: names, tuning-result JSON and kernel constants. How each
// product splits over the warps follows from them (templates/bwd_sm80/layout.cuh's rule).
enum BwdKnob { kBlockM, kBlockN, kWarps, kStages };
const KnobTable kKnobs{"bwd_sm80",
                       {{"block_m", "m", "kBlockM", "query rows per Q block: longer dK/dV products, more score registers"},
                        {"block_n", "n", "kBlockN", "keys per CTA: more reuse of each Q block, more dK/dV registers, fewer CTAs"},
                        {"warps", "w", "kWarps", "warps per CTA; each product splits them into its own 2-D grid of warp tiles"},
                        {"stages", "q", "kStages",  // "q", not "s": names must not read as fa2_sm80 tilings (parse_tiling)
                         "Q/dO buffers: 2 copies the next Q block under this one's products"}}};

constexpr int kMmaSide = fj_layout::kBwdMmaSide;  // every warp tile side: whole 16-row / 16-column mma steps
constexpr int kMaxWarps = 8;     // 256 threads keep 255 registers a thread available
constexpr int kMaxBlock = 128;   // BLOCK_M or BLOCK_N past this leaves no register room for the tiles
constexpr int kMaxStages = 2;    // the next Q block in flight under this one: deeper buys nothing per step
// Candidate BLOCK_M and BLOCK_N: 64 and 128 up to head dim 128; for wide head dims
// (fj_layout::bwd_wide) 32 and 64. 32 x 32 on 4 warps is the one shape that fits sm_86/89's 99 KB
// at D = 256 (71 KB); 64 x 64 is FlashAttention-2's tile at every wide head dim, and larger
// blocks spill at the 192-accumulator peak with every feature on (128 x 64 at D = 192 on sm_80:
// 24/48 B; 32 x 128 at Dqk = 192, Dv = 128: 24-148 B; compile_bwd_check.py).
const std::vector<int> kBlocks{64, 128};
const std::vector<int> kWideBlocks{32, 64};
// fp32 (exact or tf32) at every head dim: every tile holds fp32, P and dS included, so a tile's
// shared memory doubles; 64 x 64 at D = 64 takes 145 KB with two stages, 32 x 32 at D = 256 142
// KB with one (sm_80's 163 KB), and no 128 fits with two.
const std::vector<int> kFp32Blocks{32, 64};
// fp32's defaults, the first that fits and splits: the largest blocks first, two stages before
// one; 64 x 64 on 4 warps where 8 cannot split the head dim (an odd count of 16-column steps),
// 32 x 64 and 32 x 32 where 64 x 64 does not fit (D = 128 on sm_80, the wide ones).
const int kFp32Preferred[][3] = {{64, 64, 8}, {64, 64, 4}, {32, 64, 8}, {32, 32, 4}};
constexpr int kPriority = 100;   // after bwd_sm90 (sm_90a, the semantics it serves): every backward call
constexpr int kThreadsPerWarp = 32;
// fp32 accumulators a thread holds at the main kernel's peak: dK and dV (for the whole loop)
// plus S and dP (phase 1) or dQ's tile (phase 2), whichever is larger (dQ is, past D = 2 *
// BLOCK_N). 64x128 on 8 warps at D = 128, 128x128 on 8 warps at D = 64 and 64x64 on 8 warps at
// D = 256 (FlashAttention-2's shapes) hold 192.
constexpr int kMaxAccumulators = 192;
// S and dP registers a thread may hold (2 * BLOCK_M * BLOCK_N / threads) with a window, softcap,
// ALiBi, varlen or kv_lens: the element-wise pass forms P and dS with both tiles and dK, dV live,
// and their per-element work or per-sequence bounds need the room. 128x128 on 8 warps at D = 64
// (128 of them) spills 8-88 bytes with varlen or kv_lens alone (compile_bwd_check.py, sm_90a).
constexpr int kMaxScoreRegistersWithEdits = 64;
// fp32: the phase's tile (S and dP, or dQ) at most this many fp32 registers a thread. Its
// fragments are twice 16-bit's (exact: four times), and 64 x 32 on 4 warps at padded head dims
// 160-192 (80-96 of them) spilled 8-304 B with every feature on (compile_bwd_check.py).
constexpr int kMaxPhaseRegistersFp32 = 64;
// The least shared memory: one warp, 16 rows and 16 keys, one stage.
const Tiling kSmallest(kKnobs, {kMmaSide, kMmaSide, 1, 1});

fj_layout::BwdLayout layout_of(const Semantics& s, const Tiling& t) {
  return fj_layout::bwd_layout(int(dtype_size(s.dtype)), s.head_dim_qk, s.head_dim_v, t[kBlockM], t[kBlockN], t[kWarps],
                               t[kStages]);
}

int threads(const Tiling& t) { return t[kWarps] * kThreadsPerWarp; }

// The phase's tile (S and dP, or dQ, whichever is larger), in fp32 registers a thread.
int phase_registers(const Semantics& s, const Tiling& t) {
  const fj_layout::BwdLayout l = layout_of(s, t);  // padded head dims: what the mma tiles hold
  return std::max(2 * t[kBlockM] * t[kBlockN], t[kBlockM] * l.dqk) / threads(t);
}

int accumulators(const Semantics& s, const Tiling& t) {
  const fj_layout::BwdLayout l = layout_of(s, t);
  return t[kBlockN] * (l.dqk + l.dv) / threads(t) + phase_registers(s, t);
}

// The S and dP tiles of phase 1, in fp32 registers a thread.
int score_registers(const Tiling& t) { return 2 * t[kBlockM] * t[kBlockN] / threads(t); }

// Exact fp32 where its defaults take fresh k8 steps (gemm_fp32.cuh): head dims up to 128 that 8
// warps can split (an even count of 16-column steps each). There every tiling must keep them: a
// faster one without (4 warps) drifts 100x further from float64 at 16K keys (bench/NOTES.md
// entry 34), and tuning may change speed, never accuracy. Odd widths and wide pairs have no
// tiling with fresh steps.
bool exact_keeps_fresh_steps(const Semantics& s) {
  if (s.dtype != DType::f32 || s.fp32_math != Fp32Math::exact || fj_layout::bwd_wide(s.head_dim_qk, s.head_dim_v))
    return false;
  const fj_layout::BwdLayout l = layout_of(s, kSmallest);
  return l.dqk / kMmaSide % 2 == 0 && l.dv / kMmaSide % 2 == 0;
}

int smem_bytes(const Semantics& s, const Tiling& t) { return layout_of(s, t).smem_bytes; }

class BwdSm80 final : public KernelFamilyBase {
 public:
  BwdSm80() : KernelFamilyBase(kKnobs, "bwd_sm80/family.cu", kPriority) {}

  Pass pass() const override { return Pass::backward; }

  // Each reason names the argument that asks for what the first cut lacks.
  const char* refusal(const Arch& arch, const Semantics& s, const ProblemShape*) const override {
    if (arch.major < 8) return kNeedsSm80;
    // Head dims: every pair the forward takes (1 to 256 each, checked before any family sees them).
    if (s.kv_starts) return "kv_starts: the backward does not take per-sequence key starts (cache_leftpad)";
    if (s.paged) return "paged: the backward does not read page pools (no training through a KV cache)";
#define FJ_BWD_SCALAR(type, field, rule, constant, tag, typical, backward, params, why) \
  if (s.field && !(backward)) return #field ": the backward does not apply it yet";
    FLASHJIT_SCALAR_ROWS(FJ_BWD_SCALAR)
#undef FJ_BWD_SCALAR
    return smem_refusal(*this, arch, s);
  }

  Status check_tiling(const Semantics& s, const Tiling& t) const override {
    FJ_TRY(check_table(t));
    if (t[kWarps] < 1 || t[kWarps] > kMaxWarps) return broken(t, "warps must be in [1, 8]");
    if (t[kStages] < 1 || t[kStages] > kMaxStages) return broken(t, "stages must be 1 or 2 (Q/dO buffers)");
    for (int knob : {kBlockM, kBlockN})
      if (t[knob] < kMmaSide || t[knob] > kMaxBlock || t[knob] % kMmaSide)
        return broken(t, std::string(knob == kBlockM ? "BLOCK_M" : "BLOCK_N") +
                             " must be a multiple of 16, at most 128 (warp tiles are whole 16 x 16 mma steps)");
    // Each product splits the warps into a 2-D grid of warp tiles whose sides are multiples of 16
    // (templates/bwd_sm80/layout.cuh picks the split; config.cuh asserts the same).
    const fj_layout::BwdLayout l = layout_of(s, t);
    const char* product = !l.sdp_warps_m ? "BLOCK_M x BLOCK_N (S and dP)"
                          : !l.dkv_warps_n ? "BLOCK_N x the head dim (dK and dV)"
                          : !l.dq_warps_m ? "BLOCK_M x the head dim (dQ)"
                                          : nullptr;
    if (product)
      return broken(t, std::to_string(t[kWarps]) + " warps cannot split " + product + " at head dim " +
                           std::to_string(s.head_dim_qk) +
                           (s.head_dim_v == s.head_dim_qk ? "" : " (q, k) and " + std::to_string(s.head_dim_v) + " (v)") +
                           " into warp tiles of whole 16 x 16 mma steps");
    return {};
  }

  int min_smem_bytes(const Semantics& s) const override { return smem_bytes(s, kSmallest); }

  // FlashAttention-2's shapes where they fit and split the head dim: 128x128 on 8 warps for
  // padded head dims up to 64, 64x128 on 8 warps above (163 KB at D = 128 with two stages: sm_80
  // and sm_90, with the swizzled tiles of layout.cuh), else 64x64 on 4 warps (sm_86/89's 99 KB).
  // Wide head dims (past 128: 160, 192, 256, Dqk = 192 with Dv = 128) take 64x64 on 8 warps (211
  // KB at D = 256 with two stages: sm_90; 146.5 KB with one: sm_80; 98.5 KB at 192/128 with one:
  // sm_86), else for 99 KB 64x32 on 8 warps (FA2's sm_86 shape at 256, with V in registers; here
  // it fits 192), 64x32 on 4 warps (D = 160: 8 warps cannot split 32 keys x 160), 32x32 on 4
  // warps (D = 256: 69 KB). fp32 walks kFp32Preferred: D = 64 takes 64x64 on 8 warps with two
  // stages (145 KB), D = 128 64x64 with one on sm_90 (172 KB) and 32x64 with two on sm_80 (154
  // KB), D = 256 32x64 on 8 warps on sm_90 (216 KB) and 32x32 on 4 on sm_80 (142 KB), one stage
  // each.
  // Two stages before one (the next Q block's copies under this one's products), else the first
  // candidate that fits, else the smallest.
  Tiling default_tiling(const Arch& arch, const Semantics& s, const ProblemShape*) const override {
    std::vector<Tiling> preferred;
    auto prefer = [&](int bm, int bn, int w) {
      for (int stages : {2, 1}) preferred.push_back(Tiling(kKnobs, {bm, bn, w, stages}));
    };
    if (s.dtype == DType::f32) {
      for (const auto& t : kFp32Preferred) prefer(t[0], t[1], t[2]);
    } else if (fj_layout::bwd_wide(s.head_dim_qk, s.head_dim_v)) {
      prefer(64, 64, 8);
      prefer(64, 32, 8);
      prefer(64, 32, 4);
      prefer(32, 32, 4);
    } else {
      const bool narrow = fj_layout::bwd_round_up(std::max(s.head_dim_qk, s.head_dim_v), fj_layout::kBwdHeadDimAlign) <= 64;
      for (int stages : {2, 1}) {
        if (narrow) preferred.push_back(Tiling(kKnobs, {128, 128, 8, stages}));
        preferred.push_back(Tiling(kKnobs, {64, 128, 8, stages}));
      }
      prefer(64, 64, 4);
    }
    for (const Tiling& t : preferred)
      if (fits(arch, s, t)) return t;
    const std::vector<Tiling> any = candidate_tilings(arch, s);
    return any.empty() ? kSmallest : any.front();
  }

  std::vector<Tiling> candidate_tilings(const Arch& arch, const Semantics& s) const override {
    const std::vector<int>& blocks = s.dtype == DType::f32                            ? kFp32Blocks
                                     : fj_layout::bwd_wide(s.head_dim_qk, s.head_dim_v) ? kWideBlocks
                                                                                        : kBlocks;
    std::vector<Tiling> out;
    for (int bm : blocks)
      for (int bn : blocks)
        for (int w : {4, 8})
          for (int stages : {1, 2}) {
            const Tiling t(kKnobs, {bm, bn, w, stages});
            if (fits(arch, s, t)) out.push_back(t);
          }
    return out;
  }

  TileShape tile_shape(const Tiling& t) const override { return {t[kBlockM], t[kBlockN]}; }

 private:
  // A tiling that is valid for `s`, fits the arch's shared memory and the register rules.
  bool fits(const Arch& arch, const Semantics& s, const Tiling& t) const {
    const bool score_edits = s.window || s.softcap || s.alibi || s.varlen || s.kv_lens;
    return check_tiling(s, t).ok() && smem_bytes(s, t) <= arch_smem_limit(arch) &&
           accumulators(s, t) <= kMaxAccumulators && !(score_edits && score_registers(t) > kMaxScoreRegistersWithEdits) &&
           !(s.dtype == DType::f32 && phase_registers(s, t) > kMaxPhaseRegistersFp32) &&
           !(exact_keeps_fresh_steps(s) && accumulators(s, t) > fj_layout::kBwdFp32FreshStepAccumulators);
  }

 public:

  std::vector<EntryPoint> entry_points(const KernelVariant& v) const override {
    const fj_layout::BwdLayout l = layout_of(v.semantics, v.tiling);
    return {{"flashjit_bwd_preprocess", 0}, {"flashjit_bwd_main", l.smem_bytes}, {"flashjit_bwd_convert", l.convert_smem_bytes}};
  }

  Status plan(const AttentionProblem& p, const KernelVariant& v, const DeviceContextInfo&, WorkspaceSource& workspace,
              LaunchPlan& out) const override {
    const Tiling& t = v.tiling;
    const fj_layout::BwdLayout l = layout_of(v.semantics, t);
    const unsigned threads = unsigned(t[kWarps] * kThreadsPerWarp);
    return plan_backward_launches(p, v, workspace, {t[kBlockM], t[kBlockN], threads, threads, l.smem_bytes, l.convert_smem_bytes},
                                  out);
  }
};

}  // namespace

const KernelFamily& bwd_sm80_family() {
  static const BwdSm80 family;
  return family;
}

}  // namespace flashjit
