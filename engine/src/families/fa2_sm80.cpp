// Host side of the fa2_sm80 family (templates/fa2_sm80/): knobs, tile rules, defaults and the
// launch plan (one kernel: a CTA per BLOCK_M query rows of one head of one sequence).
#include <algorithm>

#include "attention_params.hpp"
#include "kernel_family.hpp"
#include "templates/fa2_sm80/layout.cuh"

namespace flashjit {
namespace {

// The speed-only knobs, declared once: names, tuning-result JSON and kernel constants.
enum Fa2Knob { kBlockM, kBlockN, kWarps, kStages };
const KnobTable kKnobs{"fa2_sm80",
                       {{"block_m", "m", "kBlockM", "query rows per CTA: more reuse of each K/V tile, fewer CTAs"},
                        {"block_n", "n", "kBlockN", "keys per K/V tile: longer mma runs, more registers for scores"},
                        {"warps", "w", "kWarps", "warps per CTA, splitting its query rows"},
                        {"stages", "s", "kStages", "K/V tiles in flight: hides load latency, costs shared memory"}}};

constexpr int kMmaRows = 16;    // rows of one mma tile: each warp owns a multiple of it
constexpr int kMaxWarps = 8;    // 256 threads keep 255 registers a thread available
constexpr int kPriority = 100;  // the portable fallback: every faster family goes first
// The least shared memory: one warp's 16 rows, 16-key tiles, the two stages the pipeline needs.
const Tiling kSmallest(kKnobs, {kMmaRows, 16, 1, 2});

class Fa2Sm80 final : public KernelFamilyBase {
 public:
  Fa2Sm80() : KernelFamilyBase(kKnobs, "fa2_sm80/forward.cu", kPriority) {}

  const char* refusal(const Arch& arch, const Semantics& s, const ProblemShape*) const override {
    if (arch.major < 8) return kNeedsSm80;
    return smem_refusal(*this, arch, s);
  }

  Status check_tiling(const Semantics&, const Tiling& t) const override {
    FJ_TRY(check_table(t));
    if (t[kWarps] < 1 || t[kWarps] > kMaxWarps) return broken(t, "warps must be in [1, 8]");
    if (t[kBlockM] < kMmaRows || t[kBlockM] % (kMmaRows * t[kWarps]))
      return broken(t, "BLOCK_M must be a multiple of 16 x warps");
    if (t[kBlockM] > 256) return broken(t, "BLOCK_M must be at most 256");
    if (t[kBlockN] < 16 || t[kBlockN] > 256 || t[kBlockN] % 16) return broken(t, "BLOCK_N must be a multiple of 16 in [16, 256]");
    if (t[kStages] < 2 || t[kStages] > 4) return broken(t, "stages must be in [2, 4]");
    return {};
  }

  static int smem_bytes(const Semantics& s, const Tiling& t) {
    return fj_layout::fa2_layout(int(dtype_size(s.dtype)), s.head_dim_qk, s.head_dim_v, t[kBlockM], t[kBlockN],
                                 t[kStages])
        .smem_bytes;
  }

  int min_smem_bytes(const Semantics& s) const override { return smem_bytes(s, kSmallest); }

  // Defaults from timing on the H100 (bench/); sm_8x parts with 99 KB get the smaller tiles.
  Tiling default_tiling(const Arch& arch, const Semantics& s, const ProblemShape*) const override {
    const int d = std::max(s.head_dim_qk, s.head_dim_v);
    Tiling t;
    if (s.dtype == DType::f32) {
      t = Tiling(kKnobs, {64, d <= 128 ? 32 : 16, 4, 2});
    } else if (d <= 64) {
      // H200, D=64, S=4096: 339 TFLOP/s non-causal and 306 causal, against 270 / 247 for 128x64.
      t = Tiling(kKnobs, {128, 128, 4, 2});
    } else if (d <= 128) {
      // H200, D=128, S=4096: the best of 34 candidates both causal (286) and not (327).
      t = Tiling(kKnobs, {128, 64, 4, 2});
    } else {
      t = Tiling(kKnobs, {128, 64, 8, 2});
    }
    // Shrink until it fits the arch: halve BLOCK_N, then BLOCK_M and the warps with it (each
    // keeps its 16 rows), down to kSmallest, which refusal() found to fit (fp32 at D = 193-256
    // on sm_86 and sm_89: 32 rows on 2 warps).
    const int limit = arch_smem_limit(arch);
    while (smem_bytes(s, t) > limit && t[kBlockN] > kSmallest[kBlockN]) t[kBlockN] /= 2;
    while (smem_bytes(s, t) > limit && t[kBlockM] > kSmallest[kBlockM]) {
      t[kBlockM] /= 2;
      t[kWarps] = std::min(t[kWarps], t[kBlockM] / kMmaRows);
    }
    return t;
  }

  std::vector<Tiling> candidate_tilings(const Arch& arch, const Semantics& s) const override {
    std::vector<Tiling> out;
    // BLOCK_N 48 and 96 and BLOCK_M 192 fill the register file between the power-of-two sizes
    // (D=128 128x48 and D=64 192x64 compile without spills at 4 warps).
    for (int bm : {64, 128, 192})
      for (int bn : {32, 48, 64, 96, 128})
        for (int w : {4, 8})
          for (int st : {2, 3}) {
            const Tiling t(kKnobs, {bm, bn, w, st});
            if (check_tiling(s, t).ok() && smem_bytes(s, t) <= arch_smem_limit(arch)) out.push_back(t);
          }
    return out;
  }

  TileShape tile_shape(const Tiling& t) const override { return {t[kBlockM], t[kBlockN]}; }

  std::vector<EntryPoint> entry_points(const KernelVariant& v) const override {
    return {{"flashjit_fa2_fwd", smem_bytes(v.semantics, v.tiling)}};
  }

  Status plan(const AttentionProblem& p, const KernelVariant& v, const DeviceContextInfo&, WorkspaceSource&,
              LaunchPlan& out) const override {
    const Tiling& t = v.tiling;
    KernelLaunch& k = out.add();
    k.entry = 0;
    k.grid = {unsigned((p.shape.seqlen_q + t[kBlockM] - 1) / t[kBlockM]), unsigned(p.shape.heads_q),
              unsigned(p.shape.batch)};
    k.block = {unsigned(t[kWarps] * 32), 1, 1};
    k.smem_bytes = unsigned(smem_bytes(v.semantics, t));
    fill_attention_params(p, k.params.emplace<FjAttentionParams>());
    return {};
  }
};

}  // namespace

const KernelFamily& fa2_sm80_family() {
  static const Fa2Sm80 family;
  return family;
}

}  // namespace flashjit
