// Host side of the fa3_sm90 family (templates/fa3_sm90/): knobs, tile rules and the launch plan,
// which encodes one TMA tensor map per input. It ranks before fa2_sm80, which serves what
// refusal() names.
#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

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

enum Fa3Knob { kWarpgroups, kBlockN, kStages, kPersistent, kCluster };
const KnobTable kKnobs{"fa3_sm90",
                       {{"warpgroups", "g", "kWarpgroups", "consumer warpgroups of 64 query rows each: BLOCK_M = 64 x this"},
                        {"block_n", "n", "kBlockN", "keys per K/V tile (a multiple of 16): the N of S = Q.K^T's wgmma"},
                        {"stages", "s", "kStages", "K/V tiles in flight through TMA"},
                        {"persistent", "p", nullptr,
                         "1: one CTA per SM slot walking many tiles (the next tile's loads overlap the last "
                         "one's output), 0: one CTA per tile"},
                        {"cluster", "c", "kCluster",
                         "2: pairs of CTAs (adjacent query blocks of one head) read each K/V tile from L2 once, "
                         "TMA multicasting each one's half to both; 1: every CTA reads its own"}}};

constexpr int kPriority = 75;  // after decode_sm80 (decode shapes), before fa2_sm80: faster on every measured cell
constexpr int kAtom = fj_layout::kAtomElems;
constexpr int kMaxWarpgroups = 3;   // 4 warpgroups with the producer: 512 threads, 160 registers a consumer
constexpr int kMaxBox = 256;        // TMA boxes hold at most 256 rows
constexpr int kRegsReserved = 44;  // a consumer's addresses, tile walk, loop state and softmax statistics besides O, S, P
constexpr int kRegsReservedLone = 56;  // a lone consumer warpgroup: at 44, D = 256 N = 80 (188 held of 240) spilled 12 bytes
constexpr int kPageRowsMultiple = 8;  // a paged box's rows: the 128-byte swizzle repeats every 8 rows
constexpr std::int64_t kShortSeq = 1024;  // a power of two: the default may only follow size buckets
// Keys up to here (a power of two, as above): D = 128 non-causal takes 128-key tiles, not 176,
// which would leave 4K keys a partial 24th tile (3% of the work masked).
constexpr std::int64_t kMidKeys = 4096;
// Keys up to here (a power of two, as above): D = 128 non-causal walks a persistent grid, whose
// producer loads the next tile under the last one's output, where a CTA's walk is short (under
// ncu's locked clocks, bf16: 4K 0.97 against 1.00-1.01 ms, 8K 1.89-1.91 against 1.92-1.93; 16K
// 3.69-3.71 against 3.68-3.72, no gain: bench/results/fa3_sm90_seventh_h100_2026-11-23.md).
constexpr std::int64_t kPersistentKeys = 8192;
// The candidates the tuner times: FlashAttention-3's choices on the H100 (N = 80 at D = 256,
// 112 at 192, 128-176 at 128, 128-192 at 64) and their neighbours.
constexpr int kCandidateBlockN[] = {64, 80, 96, 112, 128, 144, 176, 192};

// The least shared memory: one consumer warpgroup, 16-key tiles, two stages.
const Tiling kSmallest(kKnobs, {1, 16, 2, 0, 1});

fj_layout::Fa3Layout layout(const Semantics& s, const Tiling& t) {
  return fj_layout::fa3_layout(s.head_dim_qk, s.head_dim_v, t[kWarpgroups], t[kBlockN], t[kStages], !s.varlen);
}

// Heads whose tiles a persistent grid of `slots` CTAs interleaves (templates/fa3_sm90/tile_walk.cuh):
// as many as keep their K and V within half of L2 (Q, O and other lines take the rest), and more
// where one round of tiles would span over 1/kRoundSpan of a head's query blocks (under the
// causal mask, the tiles of one round then weigh nearly the same), up to all of L2. Where every
// tile weighs the same (no mask, window or per-sequence lengths) there is nothing to balance:
// one head at a time, as the one-tile-per-CTA grid, so the CTAs at work share the fewest K/V
// lines (D = 128 8K under ncu's locked clocks: L2 traffic 9.0 GB with 9-head sections).
constexpr std::int64_t kRoundSpan = 4;
int section_heads(const AttentionProblem& p, const DeviceContextInfo& device, std::int64_t slots, std::int64_t m_blocks) {
  const Semantics& s = p.semantics;
  if (s.mask != Mask::causal && !s.window && !s.varlen && !s.kv_lens && !s.kv_starts) return 1;
  const std::int64_t group = std::max<std::int64_t>(1, p.shape.heads_q / std::max<std::int64_t>(1, p.shape.heads_kv));
  const std::int64_t kv_bytes_per_head = std::max<std::int64_t>(
      1, p.shape.seqlen_k * (p.semantics.head_dim_qk + p.semantics.head_dim_v) * std::int64_t(dtype_size(p.semantics.dtype)) / group);
  const std::int64_t in_l2 = std::int64_t(device.l2_bytes) / kv_bytes_per_head;
  const std::int64_t balanced = std::min((kRoundSpan * slots + m_blocks - 1) / m_blocks, in_l2);
  return int(std::clamp<std::int64_t>(std::max(balanced, in_l2 / 2), 1, p.shape.heads_q * p.shape.batch));
}

int round_up16(int x) { return (x + 15) / 16 * 16; }

// Whether every query block of a head sees the same key tiles, loaded whole from a contiguous
// tensor: then adjacent blocks may share each tile's load (the cluster knob).
bool shares_keys(const Semantics& s) { return s.mask != Mask::causal && !s.window && !s.varlen && !s.paged; }

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

class Fa3Sm90 final : public KernelFamilyBase {
 public:
  Fa3Sm90() : KernelFamilyBase(kKnobs, "fa3_sm90/forward.cu", kPriority) {}

  const char* refusal(const Arch& arch, const Semantics& s, const ProblemShape* shape) const override {
    if (arch.major != 9 || arch.suffix != 'a') return "needs sm_90a (wgmma, TMA)";
    if (s.dtype == DType::f32) return "fp32 stays on fa2_sm80";
    if (s.vec != 8 || s.head_dim_qk % 8 != 0 || s.head_dim_v % 8 != 0)
      return "TMA needs every tensor's address and strides 16-byte aligned and a contiguous head dim";
    if (s.paged && s.kv_starts)
      return "paged caches with per-sequence key starts (kv_starts): key tiles would straddle the TMA page boxes";
    if (s.paged && shape && shape->page_size % kPageRowsMultiple != 0)
      return "paged caches whose page size is not a multiple of 8 keys: TMA boxes must start on the swizzle's 8-row repeat";
    if (shape && (shape->seqlen_q == 0 || shape->seqlen_k == 0))
      return "an empty problem (no queries or no keys): a TMA view needs at least one row";
    return smem_refusal(*this, arch, s);
  }

  int min_smem_bytes(const Semantics& s) const override { return layout(s, kSmallest).smem_bytes; }

  Status check_tiling(const Semantics& s, const Tiling& t) const override {
    FJ_TRY(check_table(t));
    if (t[kWarpgroups] < 1 || t[kWarpgroups] > kMaxWarpgroups) return broken(t, "warpgroups must be in [1, 3]");
    if (t[kBlockN] < 16 || t[kBlockN] > kMaxBox || t[kBlockN] % 16 != 0)
      return broken(t, "BLOCK_N must be a multiple of 16 in [16, 256]");
    if (t[kStages] < 2 || t[kStages] > 4) return broken(t, "stages must be in [2, 4]");
    if (t[kPersistent] != 0 && t[kPersistent] != 1) return broken(t, "persistent must be 0 or 1");
    if (t[kCluster] != 1 && t[kCluster] != 2) return broken(t, "cluster must be 1 or 2");
    if (t[kCluster] == 2 && !shares_keys(s))
      return broken(t, "cluster 2 needs every query block to see the same keys: no causal mask, window, varlen or paged K/V");
    if (t[kCluster] == 2 && t[kPersistent] == 1)
      return broken(t, "cluster 2 takes one tile per CTA pair: persistent must be 0");
    // Registers a consumer thread holds: O (Dv / 2), S (BLOCK_N / 2) and P (BLOCK_N / 4), with
    // head dims padded to wgmma's 16; what is left of the consumer's share holds the rest.
    const int held = round_up16(s.head_dim_v) / 2 + t[kBlockN] / 2 + t[kBlockN] / 4;
    const int regs = fj_layout::fa3_consumer_regs(t[kWarpgroups], layout(s, t).smem_bytes);
    const int reserved = t[kWarpgroups] == 1 ? kRegsReservedLone : kRegsReserved;
    if (held > regs - reserved)
      return broken(t, "O, S and P take " + std::to_string(held) + " registers of a consumer's " + std::to_string(regs) +
                 " (at most " + std::to_string(regs - reserved) + ")");
    return {};
  }

  // The fastest tilings of the H100 sweeps (bench/results/fa3_sm90_h100_2026-11-22b.md and
  // fa3_sm90_persistent_h100_2026-11-22.md), per head dim: three consumers at D = 64 (the
  // softmax is a larger share of the work there, and two others' GEMMs hide it), two above;
  // BLOCK_N as large as the registers allow: 80 at D = 256 (+17% over 64), 176 at D = 128
  // (+2-4% over 112 at 16K, the mean of two passes in reverse order) where the keys are many;
  // up to 4K keys 128 (+2-5% over 176 at 4K: fa3_sm90_qregs_h100_2026-11-23.md). Causal
  // D = 128 keeps 128, within 2% of the best at 16K, with less of its work masked on the
  // diagonal at short sequences. Short sequences (queries in the 1K bucket and below): D <= 64
  // takes one consumer, two CTAs an SM (192-row blocks leave a partial last block and more
  // masked work on the diagonal: +7% non-causal, +19% causal at 1K); D = 128 takes 128 keys
  // (112 leaves 1K keys a partial tenth tile: +8%); under the causal mask both walk a
  // persistent grid, whose CTAs' next tile loads under the last one's output (+2-7% at 1K; at
  // longer ones a static walk balances the diagonal worse than the hardware's block scheduler).
  // D = 128 non-causal walks one too up to 8K keys (kPersistentKeys), where every tile weighs the same.
  // Past 8K queries, where every query block sees the same keys, CTA pairs share each K/V load
  // (cluster 2): half the L2 reads is energy the 700 W cap gives back as clock (sustained on the
  // H100: +1.5-2.0% at 16K for D = 64, 128 and 256; pairs lose to the persistent grid at 4K
  // and match it at 8K; bench/results/fa3_sm90_eighth_h100_2026-11-23.md). Fewer query blocks
  // would pad an odd count with a whole block (a pair's second CTA walks the keys for nothing).
  Tiling default_tiling(const Arch&, const Semantics& s, const ProblemShape* shape) const override {
    const int d = std::max(s.head_dim_qk, s.head_dim_v);
    const bool causal = s.mask == Mask::causal, short_seq = shape && shape->seqlen_q <= kShortSeq;
    const bool few_keys = shape && shape->seqlen_k <= kMidKeys;
    const int persistent = short_seq && causal && d <= 128 ? 1 : 0;
    const int pairs = shares_keys(s) && !(shape && shape->seqlen_q <= kPersistentKeys) ? 2 : 1;
    if (d <= 64) return short_seq ? Tiling(kKnobs, {1, 128, 2, persistent, 1}) : Tiling(kKnobs, {3, 112, 2, 0, pairs});
    if (d <= 128) {
      const bool wide = !(causal || short_seq || few_keys);
      const bool short_walk = !causal && !short_seq && shape && shape->seqlen_k <= kPersistentKeys;
      if (short_walk) return Tiling(kKnobs, {2, wide ? 176 : 128, 2, 1, 1});
      return Tiling(kKnobs, {2, wide ? 176 : 128, 2, persistent, pairs});  // persistent: causal, so no pairs
    }
    return Tiling(kKnobs, {2, d <= 192 ? 112 : 80, 2, 0, pairs});
  }

  // The rules above change past kShortSeq, kMidKeys and kPersistentKeys, for queries and keys
  // apart: a length from each range they bound (its upper end, and one past the last), in every
  // combination, meets every tiling they return.
  std::vector<Tiling> default_tilings(const Arch& arch, const Semantics& s) const override {
    std::vector<Tiling> out{default_tiling(arch, s, nullptr)};
    const std::int64_t lengths[] = {kShortSeq, kMidKeys, kPersistentKeys, 2 * kPersistentKeys};
    for (std::int64_t seq_q : lengths)
      for (std::int64_t seq_k : lengths) {
        const ProblemShape shape{1, seq_q, seq_k, 1, 1};
        if (Tiling t = default_tiling(arch, s, &shape); std::find(out.begin(), out.end(), t) == out.end())
          out.push_back(t);
      }
    return out;
  }

  std::vector<Tiling> candidate_tilings(const Arch& arch, const Semantics& s) const override {
    std::vector<Tiling> out;
    for (int g = 1; g <= kMaxWarpgroups; ++g)
      for (int n : kCandidateBlockN)
        for (int st : {2, 3}) {
          const Tiling t(kKnobs, {g, n, st, 0, 1});
          if (!check_tiling(s, t).ok() || layout(s, t).smem_bytes > arch_smem_limit(arch)) continue;
          out.push_back(t);
          Tiling persistent = t;
          persistent[kPersistent] = 1;
          out.push_back(persistent);  // the same compiled kernel: the plan alone sizes the grid
          Tiling pair = t;
          pair[kCluster] = 2;
          if (check_tiling(s, pair).ok()) out.push_back(pair);
        }
    return out;
  }

  TileShape tile_shape(const Tiling& t) const override {
    return {fj_layout::kWarpgroupRows * t[kWarpgroups], t[kBlockN]};
  }

  std::vector<EntryPoint> entry_points(const KernelVariant& v) const override {
    return {{"flashjit_fa3_fwd", layout(v.semantics, v.tiling).smem_bytes}};
  }

  // Encodes the tensor maps (host-side driver calls, no GPU work; memoized per thread, so a
  // loop over the same buffers pays for them once).
  Status plan(const AttentionProblem& p, const KernelVariant& v, const DeviceContextInfo& device, WorkspaceSource&,
              LaunchPlan& out) const override {
    const Tiling& t = v.tiling;
    const int block_m = fj_layout::kWarpgroupRows * t[kWarpgroups];
    const fj_layout::Fa3Layout l = layout(v.semantics, t);
    KernelLaunch& main = out.add();
    main.entry = 0;
    // The kernel numbers tiles across the grid (fa3_sm90/tile_walk.cuh): one CTA per tile, or
    // as many as run at once, each walking every grid-size-th tile.
    // A cluster's CTAs are adjacent query blocks of one head: an odd count gains one block of
    // padding (the kernel walks its keys and stores nothing).
    const std::int64_t cluster = t[kCluster];
    const std::int64_t m_blocks = (p.shape.seqlen_q + block_m * cluster - 1) / (block_m * cluster) * cluster;
    // Query blocks (at most 2^30), heads and sequences within validation's bounds: fits int64.
    static_assert(kMaxSeqLen <= std::numeric_limits<std::int64_t>::max() / kMaxHeads / kMaxBatch,
                  "a tile count must fit int64");
    const std::int64_t tiles = m_blocks * p.shape.heads_q * p.shape.batch;
    if (tiles > std::numeric_limits<int>::max())
      return Error(Code::unsupported, "fa3_sm90: " + std::to_string(tiles) +
                                          " query blocks x heads x sequences do not fit the kernel's int tile numbers");
    const std::int64_t slots = std::int64_t(device.sm_count) * fj_layout::fa3_ctas_per_sm(t[kWarpgroups], l.smem_bytes);
    const bool persistent = t[kPersistent] == 1 && slots > 0 && slots < tiles;
    if (persistent)
      main.grid = {unsigned(slots), 1, 1};
    else
      main.grid = {unsigned(m_blocks), unsigned(p.shape.heads_q), unsigned(p.shape.batch)};
    main.block = {unsigned(128 * (t[kWarpgroups] + 1)), 1, 1};  // a producer warpgroup and the consumers
    main.cluster = {unsigned(cluster), 1, 1};
    main.smem_bytes = unsigned(l.smem_bytes);
    FjFa3Params& fp = main.params.emplace<FjFa3Params>();
    fill_attention_params(p, fp.attn);
    const AttentionArgs& a = *p.args;
    // A paged pool's boxes hold the keys the page size and BLOCK_N have in common, so none
    // crosses a page (refusal() ensured a multiple of 8).
    // In a cluster, each CTA loads 1 / cluster of every K/V tile's keys.
    int kv_rows = t[kBlockN] / int(cluster);
    if (v.semantics.paged) {
      kv_rows = std::gcd(t[kBlockN], fp.attn.page_size);
      if (kv_rows % kPageRowsMultiple != 0)
        return Error(Code::unsupported, "fa3_sm90: page size " + std::to_string(fp.attn.page_size) +
                                            " is not a multiple of 8 keys");
    }
    fp.kv_box_rows = kv_rows;
    fp.section_heads = persistent ? section_heads(p, device, slots, m_blocks) : 1;
    // Each view is built only when its map is encoded (O's not at all when it leaves from
    // registers), and each map lands in the params straight from the memo.
    FJ_TRY(encode_tma_map_cached(box_view("q", a.q, fj_layout::kWarpgroupRows), &fp.q_map));
    FJ_TRY(encode_tma_map_cached(box_view("k", a.k, kv_rows), &fp.k_map));
    FJ_TRY(encode_tma_map_cached(box_view("v", a.v, kv_rows), &fp.v_map));
    if (l.o_bytes != 0) FJ_TRY(encode_tma_map_cached(box_view("o", a.o, fj_layout::kWarpgroupRows), &fp.o_map));
    return {};
  }
};

}  // namespace

const KernelFamily& fa3_sm90_family() {
  static const Fa3Sm90 family;
  return family;
}

}  // namespace flashjit
