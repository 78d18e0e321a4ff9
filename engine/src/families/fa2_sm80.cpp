// Host side of the fa2_sm80 family (templates/fa2_sm80/): tile rules and defaults.
#include <algorithm>

#include "kernel_family.hpp"
#include "templates/fa2_sm80/layout.cuh"

namespace flashjit {
namespace {

constexpr int kMmaRows = 16;  // rows of one mma tile: each warp owns a multiple of it
constexpr int kMaxWarps = 8;  // 256 threads keep 255 registers a thread available

class Fa2Sm80 final : public KernelFamily {
 public:
  const char* name() const override { return "fa2_sm80"; }
  const char* entry_template() const override { return "fa2_sm80/forward.cu"; }

  bool supports(const Arch& arch, const Semantics& s) const override {
    return arch.major >= 8 && s.check().ok();
  }

  Status check_tiling(const Semantics&, const Tiling& t) const override {
    auto bad = [&](const std::string& rule) {
      return Error(Code::invalid_argument, "tiling " + t.name() + ": " + rule);
    };
    if (t.warps < 1 || t.warps > kMaxWarps) return bad("warps must be in [1, 8]");
    if (t.block_m < kMmaRows || t.block_m % (kMmaRows * t.warps))
      return bad("BLOCK_M must be a multiple of 16 x warps");
    if (t.block_m > 256) return bad("BLOCK_M must be at most 256");
    if (t.block_n < 16 || t.block_n > 256 || t.block_n % 16) return bad("BLOCK_N must be a multiple of 16 in [16, 256]");
    if (t.stages < 2 || t.stages > 4) return bad("stages must be in [2, 4]");
    return {};
  }

  int smem_bytes(const Semantics& s, const Tiling& t) const override {
    return fj_layout::fa2_layout(int(dtype_size(s.dtype)), s.head_dim_qk, s.head_dim_v, t.block_m,
                                 t.block_n, t.stages)
        .smem_bytes;
  }

  // Defaults from timing on the H100 (bench/); sm_8x parts with 99 KB get the smaller tiles.
  Tiling default_tiling(const Arch& arch, const Semantics& s) const override {
    const int d = std::max(s.head_dim_qk, s.head_dim_v);
    Tiling t;
    if (s.dtype == DType::f32) {
      t = {64, d <= 128 ? 32 : 16, 4, 2};
    } else if (d <= 64) {
      // H200, D=64, S=4096: 339 TFLOP/s non-causal and 306 causal, against 270 / 247 for 128x64.
      t = {128, 128, 4, 2};
    } else if (d <= 128) {
      // H200, D=128, S=4096: the best of 34 candidates both causal (286) and not (327).
      t = {128, 64, 4, 2};
    } else {
      t = {128, 64, 8, 2};
    }
    // Shrink until it fits the arch: halve BLOCK_N, then BLOCK_M.
    while (smem_bytes(s, t) > arch_smem_limit(arch) && t.block_n > 16) t.block_n /= 2;
    while (smem_bytes(s, t) > arch_smem_limit(arch) && t.block_m > 16 * t.warps) t.block_m /= 2;
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
            const Tiling t{bm, bn, w, st};
            if (check_tiling(s, t).ok() && smem_bytes(s, t) <= arch_smem_limit(arch)) out.push_back(t);
          }
    return out;
  }

  LaunchGrid grid(const ProblemShape& p, const Semantics& s, const Tiling& t) const override {
    LaunchGrid g;
    g.x = unsigned((p.seqlen_q + t.block_m - 1) / t.block_m);
    g.y = unsigned(p.heads_q);
    g.z = unsigned(p.batch);
    g.threads = unsigned(t.warps * 32);
    g.smem_bytes = unsigned(smem_bytes(s, t));
    return g;
  }
};

}  // namespace

const KernelFamily& fa2_sm80_family() {
  static const Fa2Sm80 family;
  return family;
}

}  // namespace flashjit
