// Host side of the decode_sm80 family (templates/decode_sm80/): knobs, tile rules, the split
// count, and the launch plan: one kernel; with split keys it takes a workspace for the partial
// results and one ticket per row block (the last split to finish merges).
#include <algorithm>
#include <cmath>

#include "attention_params.hpp"
#include "kernel_family.hpp"
#include "templates/decode_sm80/layout.cuh"
#include "templates/decode_sm80/params.cuh"

namespace flashjit {
namespace {

// The speed-only knobs, declared once. `splits` is plan-only: it shapes the grid, not the code.
enum DecodeKnob { kRowTiles, kWarps, kWarpKeys, kStages, kSplits };
const KnobTable kKnobs{"decode_sm80",
                       {{"row_tiles", "r", "kRowTiles", "16-row tiles of (token, query head) rows per CTA"},
                        {"warps", "w", "kWarps", "warps per CTA, each taking a slice of every key tile"},
                        {"warp_keys", "k", "kWarpKeys", "keys of each tile per warp: longer mma runs, more registers"},
                        {"stages", "s", "kStages", "K/V tiles in flight: bytes in flight per SM"},
                        {"splits", "p", nullptr, "key ranges per row block run by different CTAs; 0: chosen per call"}}};

constexpr int kPriority = 50;         // before fa2_sm80: decode shapes are this family's
constexpr int kMaxQueries = 16;       // per sequence: decode and speculative decoding
constexpr int kMaxSplits = fj_layout::kMaxDecodeSplits;
constexpr int kMinTilesPerSplit = 2;  // a split must at least fill its copy pipeline once
constexpr int kMaxThreadsPerSm = 2048;  // every arch from sm_80 to sm_90

int elem_bytes(const Semantics& s) { return int(dtype_size(s.dtype)); }

// (token, query head) rows per CTA: row_tiles mma tiles of 16 rows.
int cta_rows(const Tiling& t) { return 16 * t[kRowTiles]; }

fj_layout::DecodeLayout layout(const Semantics& s, const Tiling& t) {
  return fj_layout::decode_layout(elem_bytes(s), s.head_dim_qk, s.head_dim_v, cta_rows(t), t[kWarps], t[kWarpKeys],
                                  t[kStages]);
}

// The least shared memory: one 16-row tile, 2 warps of 16 keys, the two stages the pipeline needs.
const Tiling kSmallest(kKnobs, {1, 2, 16, 2, 0});

class DecodeSm80 final : public KernelFamilyBase {
 public:
  DecodeSm80() : KernelFamilyBase(kKnobs, "decode_sm80/decode.cu", kPriority) {}

  // fp32 head dims above 160 do not fit sm_86's and sm_89's 99 KiB even in kSmallest: fa2_sm80
  // runs those decode shapes there.
  const char* refusal(const Arch& arch, const Semantics& s, const ProblemShape* shape) const override {
    if (arch.major < 8) return kNeedsSm80;
    if (shape && shape->seqlen_q > kMaxQueries) return "more than 16 queries per sequence: a prefill shape";
    return smem_refusal(*this, arch, s);
  }

  Status check_tiling(const Semantics&, const Tiling& t) const override {
    FJ_TRY(check_table(t));
    if (t[kRowTiles] < 1 || t[kRowTiles] > 2) return broken(t, "row_tiles must be 1 or 2 (16 or 32 rows)");
    if (t[kWarps] != 2 && t[kWarps] != 4 && t[kWarps] != 8) return broken(t, "warps must be 2, 4 or 8");
    if (t[kWarpKeys] != 16 && t[kWarpKeys] != 32) return broken(t, "warp_keys must be 16 or 32");
    if (t[kStages] < 2 || t[kStages] > 6) return broken(t, "stages must be in [2, 6]");
    if (t[kSplits] < 0 || t[kSplits] > kMaxSplits) return broken(t, "splits must be 0 (chosen per call) or in [1, 128]");
    return {};
  }

  // Defaults: 128-key tiles on 8 warps, two stages, one CTA an SM (~140 KB at D = 128). Tuned on
  // the H100, bf16, D = 128, against 64-key tiles on 4 warps with three stages (two CTAs an SM):
  // 16% faster at (1, 32:8, 32K), 9% at (16, 32:8, 4K), 1% at (64, 32:32, 2K). Larger head dims
  // shrink to 4 warps, then 2, to fit (kSmallest fits: refusal() checked).
  Tiling default_tiling(const Arch& arch, const Semantics& s, const ProblemShape*) const override {
    Tiling t(kKnobs, {1, 8, 16, 2, 0});
    while (layout(s, t).smem_bytes > arch_smem_limit(arch) && t[kStages] > kSmallest[kStages]) --t[kStages];
    while (layout(s, t).smem_bytes > arch_smem_limit(arch) && t[kWarps] > kSmallest[kWarps]) t[kWarps] /= 2;
    return t;
  }

  int min_smem_bytes(const Semantics& s) const override { return layout(s, kSmallest).smem_bytes; }

  std::vector<Tiling> candidate_tilings(const Arch& arch, const Semantics& s) const override {
    std::vector<Tiling> out;
    for (int rows : {1, 2})
      for (int w : {4, 8})
        for (int wk : {16, 32})
          for (int st : {2, 3, 4}) {
            const Tiling t(kKnobs, {rows, w, wk, st, 0});
            if (layout(s, t).smem_bytes <= arch_smem_limit(arch)) out.push_back(t);
          }
    // Fixed split counts of the default code: the same compiled kernel, other grids.
    const Tiling def = default_tiling(arch, s, nullptr);
    for (int splits : {1, 2, 4, 8, 16, 32, 64}) {
      Tiling t = def;
      t[kSplits] = splits;
      out.push_back(t);
    }
    return out;
  }

  // Each warp takes warp_keys keys of every K/V tile.
  TileShape tile_shape(const Tiling& t) const override { return {cta_rows(t), t[kWarps] * t[kWarpKeys]}; }

  std::vector<EntryPoint> entry_points(const KernelVariant& v) const override {
    return {{"flashjit_decode_fwd", layout(v.semantics, v.tiling).smem_bytes}};
  }

  // The tickets first (the zeroed prefix), then every split's partial LSEs and rows:
  // [tickets | lse | o], each part 256-byte aligned.
  struct SplitLayout {
    std::size_t tickets_bytes, lse_offset, o_offset, bytes;
  };
  // Splits x sequences x heads x queries rows of up to kMaxHeadDim floats, within validation's
  // bounds: far below 2^63 bytes, so the sizes below need no checks.
  static_assert(std::int64_t(kMaxSplits) * kMaxBatch * kMaxHeads * kMaxQueries <=
                    (std::int64_t(1) << 62) / (kMaxHeadDim * sizeof(float)),
                "decode workspace sizes must fit int64");
  static SplitLayout workspace_layout(const AttentionProblem& p, const KernelVariant& v, int splits) {
    constexpr std::size_t kAlign = 256;
    auto up = [](std::size_t x) { return (x + kAlign - 1) / kAlign * kAlign; };
    const std::size_t rows = std::size_t(splits) * std::size_t(p.shape.batch * p.shape.heads_q * p.shape.seqlen_q);
    SplitLayout w{};
    w.tickets_bytes = up(std::size_t(p.shape.batch * p.shape.heads_kv * row_blocks(p, v.tiling)) * sizeof(unsigned));
    w.lse_offset = w.tickets_bytes;
    w.o_offset = up(w.lse_offset + rows * sizeof(float));
    w.bytes = w.o_offset + rows * std::size_t(v.semantics.head_dim_v) * sizeof(float);
    return w;
  }

  static std::int64_t row_blocks(const AttentionProblem& p, const Tiling& t) {
    const std::int64_t group = p.shape.heads_kv > 0 ? p.shape.heads_q / p.shape.heads_kv : 1;
    return (p.shape.seqlen_q * group + cta_rows(t) - 1) / cta_rows(t);
  }

  Status plan(const AttentionProblem& p, const KernelVariant& v, const DeviceContextInfo& d, WorkspaceSource& workspace,
              LaunchPlan& out) const override {
    const Tiling& t = v.tiling;
    const int splits = split_count(p, v, d);
    const std::int64_t blocks = row_blocks(p, t);
    KernelLaunch& main = out.add();
    main.entry = 0;
    main.grid = {unsigned(splits), unsigned(p.shape.heads_kv * blocks), unsigned(p.shape.batch)};
    main.block = {unsigned(t[kWarps] * 32), 1, 1};
    main.smem_bytes = unsigned(layout(v.semantics, t).smem_bytes);
    FjDecodeParams& dp = main.params.emplace<FjDecodeParams>();
    fill_attention_params(p, dp.attn);
    dp.splits = splits;
    dp.row_blocks = int(blocks);
    if (splits > 1) {
      const SplitLayout w = workspace_layout(p, v, splits);
      auto buffer = workspace.get(w.bytes, w.tickets_bytes);
      if (!buffer.ok()) return std::move(buffer).error().with("variant", v.name());
      if (const CUdeviceptr base = buffer.value()) {
        dp.tickets = reinterpret_cast<unsigned*>(base);
        dp.partial_lse = reinterpret_cast<float*>(base + w.lse_offset);
        dp.partial_o = reinterpret_cast<float*>(base + w.o_offset);
      }
    }
    return {};
  }

  // The split count: the tiling's, or the one a small cost model says finishes first. Time is
  // counted in key tiles one CTA streams: the waves of CTAs the GPU's slots run (slots: SMs x the
  // CTAs that fit one), each wave as long as one split's tiles plus the fixed cost of a CTA (its
  // query rows, the pipeline's fill and drain, the write-out), plus the merge the last split of a
  // row block does over every split's partial rows. A batch of 1 with 8 key/value heads and 32K
  // keys splits ~32 ways on 132 SMs; 128 sequences not at all.
  static int split_count(const AttentionProblem& p, const KernelVariant& v, const DeviceContextInfo& d) {
    const Tiling& t = v.tiling;
    if (t[kSplits] > 0) return t[kSplits];
    constexpr double kCtaFixedTiles = 2.0;    // a CTA's fixed work, in tiles (measured: ~2 of a 32-tile CTA)
    constexpr double kMergeTilesPerSplit = 0.05;  // reading one split's partial rows, in tiles
    const fj_layout::DecodeLayout l = layout(v.semantics, t);
    const std::int64_t base = std::max<std::int64_t>(1, p.shape.batch * p.shape.heads_kv * row_blocks(p, t));
    const int per_sm = std::max(1, std::min(d.smem_per_sm > 0 ? d.smem_per_sm / (l.smem_bytes + 1024) : 1,
                                            kMaxThreadsPerSm / (t[kWarps] * 32)));
    const std::int64_t slots = std::int64_t(std::max(1, d.sm_count)) * per_sm;
    const std::int64_t tiles = std::max<std::int64_t>(1, (p.shape.seqlen_k + l.tile_keys - 1) / l.tile_keys);
    const int most = int(std::clamp<std::int64_t>(tiles / kMinTilesPerSplit, 1, kMaxSplits));
    // Within one count of waves more splits only shorten each split: the largest count per wave
    // count is the one to weigh, a handful of candidates on the dispatch path.
    auto cost = [&](std::int64_t s) {
      const double waves = double((base * s + slots - 1) / slots);
      return waves * (double((tiles + s - 1) / s) + kCtaFixedTiles) + (s > 1 ? kMergeTilesPerSplit * double(s) : 0.0);
    };
    std::int64_t best = 1;
    double best_cost = cost(1);
    for (std::int64_t waves = 1;; ++waves) {
      const std::int64_t s = std::min<std::int64_t>(most, waves * slots / base);
      if (s > best && cost(s) < best_cost) best = s, best_cost = cost(s);
      if (s >= most) break;
    }
    return int(best);
  }
};

}  // namespace

const KernelFamily& decode_sm80_family() {
  static const DecodeSm80 family;
  return family;
}

}  // namespace flashjit
