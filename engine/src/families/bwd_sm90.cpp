// Host side of the bwd_sm90 family (templates/bwd_sm90/): the backward pass on Hopper's wgmma,
// under construction (docs/design/hopper_backward.md, steps 1-2, 5-6). It serves 16-bit
// attention with no mask or a causal one, GQA included, at head dims 64 and 128, ahead of
// bwd_sm80 (faster on every cell measured: bench/NOTES.md entry 39); bwd_sm80 takes the rest.
// bwd_launches.hpp has the three launches; preprocess and convert are bwd_sm80's, at 4 warps.
#include "bwd_launches.hpp"
#include "kernel_family.hpp"
#include "templates/bwd_sm80/layout.cuh"
#include "templates/bwd_sm90/layout.cuh"

namespace flashjit {
namespace {

enum Bwd90Knob { kBlockM, kBlockN, kMmaWarpgroups };
const KnobTable kKnobs{"bwd_sm90",
                       {{"block_m", "m", "kBlockM", "query rows per Q block (the N of S^T = K.Q^T's wgmma)"},
                        {"block_n", "n", "kBlockN", "keys per CTA: 64 per MMA warpgroup (the M of every dK/dV wgmma)"},
                        {"mma_warpgroups", "g", "kMmaWarpgroups", "warpgroups issuing the wgmmas"}}};

constexpr int kPriority = 90;         // before bwd_sm80, which serves everything this one refuses
constexpr int kAuxWarps = 4;          // bwd_sm80's preprocess and convert as templates/bwd_sm90/config.cuh sets them
constexpr int kWgKeys = 64;           // keys a warpgroup owns (the M of its wgmmas)
// The shapes so far: one warpgroup of 64 keys (step 1), two sharing each Q block's loads (step 2),
// and at head dim 64 two on Q blocks of 128 rows (S^T's and dP^T's wgmmas twice as wide for the
// same K and V reads from shared memory).
const Tiling kOne(kKnobs, {64, 64, 1});
const Tiling kTwo(kKnobs, {64, 128, 2});
const Tiling kTwoWide(kKnobs, {128, 128, 2});
constexpr int kWideBlockMHeadDim = 64;  // 128-row Q blocks only here: their S^T and dP^T fit the registers
// One warpgroup holds dK and dV of 64 keys and, at head dim 128, dQ's two column chunks in turn.
// It spilled there while the MMA warps issued the copies, and was the slower tiling before that;
// with the producer warpgroup it compiles without spills (252 registers) but has not run on a GPU.
constexpr int kOneWarpgroupMaxHeadDim = 64;

fj_layout::Bwd90Layout layout_of(const Semantics& s, const Tiling& t) {
  return fj_layout::bwd90_layout(s.head_dim_qk, s.head_dim_v, t[kBlockM], t[kBlockN]);
}

// bwd_sm80's layout at the shape its preprocess and convert run with here (for convert's tile).
fj_layout::BwdLayout aux_layout_of(const Semantics& s, const Tiling& t) {
  return fj_layout::bwd_layout(int(dtype_size(s.dtype)), s.head_dim_qk, s.head_dim_v, t[kBlockM], t[kBlockN], kAuxWarps, 1);
}

// s with only what this family serves kept: it serves s where the two are equal.
Semantics served_part(const Semantics& s) {
  Semantics plain;
  plain.dtype = s.dtype;
  plain.head_dim_qk = s.head_dim_qk;
  plain.head_dim_v = s.head_dim_v;
  plain.write_lse = s.write_lse;
  plain.vec = s.vec;
  plain.mask = s.mask;
  plain.gqa = s.gqa;
  return plain;
}

class BwdSm90 final : public KernelFamilyBase {
 public:
  BwdSm90() : KernelFamilyBase(kKnobs, "bwd_sm90/family.cu", kPriority) {}

  Pass pass() const override { return Pass::backward; }
  bool serves_every_shape() const override { return true; }  // refusal() never reads the shape

  const char* refusal(const Arch& arch, const Semantics& s, const ProblemShape*) const override {
    if (arch.major != 9 || arch.suffix != 'a') return "needs sm_90a (wgmma)";
    if (s.dtype == DType::f32) return "fp32 stays on bwd_sm80";
    if (s.head_dim_qk != s.head_dim_v || (s.head_dim_qk != 64 && s.head_dim_qk != 128))
      return "head dims 64 and 128 (q, k and v alike) so far; the others stay on bwd_sm80";
    if (s.vec != 8) return "16-byte rows with a contiguous head dim (vec 8)";
    if (s != served_part(s))
      return "no varlen, kv_lens, window, softcap, ALiBi, sinks or deterministic mode yet: those stay on bwd_sm80";
    return smem_refusal(*this, arch, s);
  }

  Status check_tiling(const Semantics& s, const Tiling& t) const override {
    FJ_TRY(check_table(t));
    if (t[kMmaWarpgroups] < 1 || t[kMmaWarpgroups] > 2) return broken(t, "mma_warpgroups must be 1 or 2");
    if (t[kBlockM] != 64 &&
        !(t[kBlockM] == 128 && t[kMmaWarpgroups] == 2 && s.head_dim_qk == kWideBlockMHeadDim && s.head_dim_v == kWideBlockMHeadDim))
      return broken(t, "block_m must be 64 (the N of S^T's wgmma, one Q block), or 128 with 2 MMA warpgroups at head dim 64");
    if (t[kBlockN] != kWgKeys * t[kMmaWarpgroups]) return broken(t, "block_n must be 64 keys per MMA warpgroup");
    if (t[kMmaWarpgroups] == 1 && s.head_dim_qk > kOneWarpgroupMaxHeadDim)
      return broken(t, "one MMA warpgroup serves head dim 64 only (at 128 it was the slower tiling)");
    return {};
  }

  int min_smem_bytes(const Semantics& s) const override { return layout_of(s, kOne).smem_bytes; }
  // The first shape check_tiling allows: two warpgroups (each Q block's loads and dQ's reductions
  // serve 128 keys instead of 64), on Q blocks of 128 rows where allowed (+2-4% at head dim 64 on
  // an H100: bench/NOTES.md entry 40).
  Tiling default_tiling(const Arch&, const Semantics& s, const ProblemShape*) const override {
    return allowed_shapes(s).front();
  }
  std::vector<Tiling> candidate_tilings(const Arch& arch, const Semantics& s) const override {
    if (refusal(arch, s, nullptr)) return {};
    return allowed_shapes(s);
  }
  TileShape tile_shape(const Tiling& t) const override { return {t[kBlockM], t[kBlockN]}; }

  std::vector<EntryPoint> entry_points(const KernelVariant& v) const override {
    return {{"flashjit_bwd_preprocess", 0},
            {"flashjit_bwd_main", layout_of(v.semantics, v.tiling).smem_bytes},
            {"flashjit_bwd_convert", aux_layout_of(v.semantics, v.tiling).convert_smem_bytes}};
  }

  Status plan(const AttentionProblem& p, const KernelVariant& v, const DeviceContextInfo&, WorkspaceSource& workspace,
              LaunchPlan& out) const override {
    const Tiling& t = v.tiling;
    return plan_backward_launches(p, v, workspace,
                                  {t[kBlockM], t[kBlockN], unsigned(kAuxWarps * 32),
                                   unsigned(fj_layout::bwd90_threads(t[kMmaWarpgroups])),
                                   layout_of(v.semantics, t).smem_bytes,
                                   aux_layout_of(v.semantics, t).convert_smem_bytes},
                                  out);
  }

 private:
  // The shapes above that check_tiling allows for s, fastest first (kTwo serves every s).
  std::vector<Tiling> allowed_shapes(const Semantics& s) const {
    std::vector<Tiling> out;
    for (const Tiling& t : {kTwoWide, kTwo, kOne})
      if (check_tiling(s, t).ok()) out.push_back(t);
    return out;
  }
};

}  // namespace

const KernelFamily& bwd_sm90_family() {
  static const BwdSm90 family;
  return family;
}

}  // namespace flashjit
