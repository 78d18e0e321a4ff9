// Host side of the fa3_sm90 family (templates/fa3_sm90/): knobs, tile rules and the launch plan,
// which encodes one TMA tensor map per input. Work in progress: the family serves a subset of
// the semantics (refusal() names the rest, which fa2_sm80 serves) and ranks before fa2_sm80.
#include <algorithm>
#include <cstring>

#include "attention_params.hpp"
#include "kernel_family.hpp"
#include "templates/fa3_sm90/layout.cuh"
#include "templates/fa3_sm90/params.cuh"
#include "tma_map.hpp"

namespace flashjit {
namespace {

// The kernel's tensor map type holds the driver's bytes; TMA needs 64-byte alignment (cuda.h
// declares 128 for the host type, the kernel parameter space keeps 64).
static_assert(sizeof(FjTensorMap) == sizeof(CUtensorMap) && alignof(FjTensorMap) == 64,
              "the kernel's tensor map type must hold a CUtensorMap, 64-byte aligned");

enum Fa3Knob { kWarpgroups, kBlockN, kStages };
const KnobTable kKnobs{"fa3_sm90",
                       {{"warpgroups", "g", "kWarpgroups", "warpgroups of 64 query rows each: BLOCK_M = 64 x this"},
                        {"block_n", "n", "kBlockN", "keys per K/V tile: the N of S = Q.K^T's wgmma"},
                        {"stages", "s", "kStages", "K/V tiles in flight through TMA"}}};

constexpr int kPriority = 75;  // after decode_sm80 (decode shapes), before fa2_sm80: faster on every measured cell
constexpr int kAtom = fj_layout::kAtomElems;

fj_layout::Fa3Layout layout(const Semantics& s, const Tiling& t) {
  return fj_layout::fa3_layout(s.head_dim_qk, t[kWarpgroups], t[kBlockN], t[kStages]);
}

// A [B, S, H, D] input as a TMA view whose boxes are 64 head-dim elements by `rows` rows of one head.
TmaView box_view(const char* name, const TensorView& t, int rows) {
  TmaView v = tma_view(name, t.data, t.shape, t.stride, 4, int(dtype_size(t.dtype)));
  v.box[0] = std::uint32_t(kAtom);
  v.box[1] = 1;
  v.box[2] = std::uint32_t(rows);
  v.box[3] = 1;
  v.swizzle = TmaSwizzle::b128;
  return v;
}

class Fa3Sm90 final : public KernelFamily {
 public:
  const char* name() const override { return kKnobs.family; }
  const KnobTable& knobs() const override { return kKnobs; }
  const char* entry_template() const override { return "fa3_sm90/forward.cu"; }
  int priority() const override { return kPriority; }

  const char* refusal(const Arch& arch, const Semantics& s, const ProblemShape* shape) const override {
    if (arch.major != 9 || arch.suffix != 'a') return "needs sm_90a (wgmma, TMA)";
    if (s.dtype == DType::f32) return "fp32 stays on fa2_sm80";
    if (s.head_dim_qk != s.head_dim_v) return "Dqk != Dv is not on fa3_sm90 yet";
    if (s.head_dim_qk % kAtom != 0) return "head dims other than 64, 128, 192, 256 are not on fa3_sm90 yet";
    if (s.vec != 8) return "TMA needs every tensor's address and strides 16-byte aligned and a contiguous head dim";
    if (shape && shape->seqlen_k == 0) return "no keys (seqlen_k = 0): a TMA view needs at least one row";
    if (s.varlen || s.window || s.softcap || s.alibi || s.sinks || s.kv_lens || s.paged)
      return "varlen, window, softcap, ALiBi, sinks, kv_lens and paged are not on fa3_sm90 yet";
    return nullptr;
  }

  Status check_tiling(const Semantics& s, const Tiling& t) const override {
    auto bad = [&](const std::string& rule) { return Error(Code::invalid_argument, "tiling " + t.name() + ": " + rule); };
    if (t.table != &kKnobs) return bad("is not a fa3_sm90 tiling");
    if (t[kWarpgroups] < 1 || t[kWarpgroups] > 2) return bad("warpgroups must be 1 or 2");
    if (t[kBlockN] != 64 && t[kBlockN] != 128) return bad("BLOCK_N must be 64 or 128");
    if (t[kStages] < 2 || t[kStages] > 4) return bad("stages must be in [2, 4]");
    // Registers a consumer thread holds: O (D / 2), S (BLOCK_N / 2) and P (BLOCK_N / 4).
    if (s.head_dim_qk / 2 + t[kBlockN] / 2 + t[kBlockN] / 4 > 200) return bad("O, S and P exceed 200 registers");
    return {};
  }

  // The fastest tiling of the H100 sweep (bench/results/fa3_sm90_h100_2026-11-22.md) per head dim:
  // at D = 64 one warpgroup per CTA lets two CTAs share an SM, which overlaps their softmax and GEMMs.
  Tiling default_tiling(const Arch&, const Semantics& s) const override {
    if (s.head_dim_qk <= 64) return Tiling(kKnobs, {1, 128, 2});
    return Tiling(kKnobs, {2, s.head_dim_qk <= 128 ? 128 : 64, 2});
  }

  std::vector<Tiling> candidate_tilings(const Arch& arch, const Semantics& s) const override {
    std::vector<Tiling> out;
    for (int g : {1, 2})
      for (int n : {64, 128})
        for (int st : {2, 3, 4}) {
          const Tiling t(kKnobs, {g, n, st});
          if (check_tiling(s, t).ok() && layout(s, t).smem_bytes <= arch_smem_limit(arch)) out.push_back(t);
        }
    return out;
  }

  std::vector<EntryPoint> entry_points(const KernelVariant& v) const override {
    return {{"flashjit_fa3_fwd", layout(v.semantics, v.tiling).smem_bytes}};
  }

  // Encodes the tensor maps (host-side driver calls, no GPU work; memoized per thread, so a
  // loop over the same buffers pays for them once).
  Status plan(const AttentionProblem& p, const KernelVariant& v, const DeviceContextInfo&, CUdeviceptr,
              LaunchPlan& out) const override {
    const Tiling& t = v.tiling;
    const int block_m = fj_layout::kWarpgroupRows * t[kWarpgroups];
    KernelLaunch& main = out.add();
    main.entry = 0;
    main.grid = {unsigned((p.shape.seqlen_q + block_m - 1) / block_m), unsigned(p.shape.heads_q),
                 unsigned(p.shape.batch)};
    main.block = {unsigned(128 * (t[kWarpgroups] + 1)), 1, 1};  // a producer warpgroup and the consumers
    main.smem_bytes = unsigned(layout(v.semantics, t).smem_bytes);
    FjFa3Params& fp = main.params.emplace<FjFa3Params>();
    fill_attention_params(p, fp.attn);
    const AttentionArgs& a = *p.args;
    const struct {
      TmaView view;
      FjTensorMap* map;
    } maps[] = {{box_view("q", a.q, fj_layout::kWarpgroupRows), &fp.q_map},
                {box_view("k", a.k, t[kBlockN]), &fp.k_map},
                {box_view("v", a.v, t[kBlockN]), &fp.v_map}};
    for (const auto& m : maps) {
      auto encoded = encode_tma_map_cached(m.view);
      if (!encoded.ok()) return std::move(encoded).error();
      std::memcpy(m.map, &encoded.value(), sizeof(FjTensorMap));
    }
    return {};
  }
};

}  // namespace

const KernelFamily& fa3_sm90_family() {
  static const Fa3Sm90 family;
  return family;
}

}  // namespace flashjit
