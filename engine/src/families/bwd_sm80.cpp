// Host side of the bwd_sm80 family (templates/bwd_sm80/): the backward pass on sm_80 tensor
// cores. Knobs, tile rules, what the first cut refuses, its workspace, and the launch plan:
// three kernels of one module on one stream —
//   preprocess: a CTA per (BLOCK_M query rows, head, batch): D = rowsum(dO * O), dQ accumulator zeroed;
//   main:       a CTA per (BLOCK_N keys, KV head, batch), looping over the q-heads of its GQA group:
//               dK, dV written, dQ added with atomics;
//   convert:    a CTA per (BLOCK_M query rows, head, batch): the dQ accumulator to dq.
#include <algorithm>
#include <cstdint>

#include "attention_params.hpp"
#include "kernel_family.hpp"
#include "templates/bwd_sm80/layout.cuh"
#include "templates/bwd_sm80/params.cuh"

namespace flashjit {
namespace {

// The speed-only knobs, declared once: names, tuning-result JSON and kernel constants.
enum BwdKnob { kBlockM, kBlockN, kWarps };
const KnobTable kKnobs{"bwd_sm80",
                       {{"block_m", "m", "kBlockM", "query rows per Q block: longer dK/dV products, more score registers"},
                        {"block_n", "n", "kBlockN", "keys per CTA: more reuse of each Q block, more dK/dV registers, fewer CTAs"},
                        {"warps", "w", "kWarps", "warps per CTA, splitting its keys (key phase) and the Q block's rows (query phase)"}}};

constexpr int kMmaRows = 16;    // rows of one mma tile: each warp owns a multiple of it in both phases
constexpr int kMaxWarps = 8;    // 256 threads keep 255 registers a thread available
constexpr int kMaxBlock = 128;  // BLOCK_M or BLOCK_N past this leaves no register room for dK and dV
constexpr int kPriority = 100;  // the only backward family so far
// fp32 accumulators a thread holds in the key phase (S^T, dP^T, dK, dV) that candidates may
// reach: D = 128 at 64x64 on 4 warps holds 192 and compile_bwd_check.py sees no spills there.
constexpr int kMaxAccumulators = 192;
// The widest head dim: past it dK + dV of one warp's 16 keys (2 * D / 8 * 4 fp32 registers a
// thread, 256 at D = 256) leave no room for S^T and dP^T; wider needs the head dim split across
// warps (docs/design/backward.md).
constexpr int kMaxHeadDim = 128;
// S^T and dP^T registers a thread may hold (2 * key tiles * BLOCK_M / 8 * 4) with a window,
// softcap or ALiBi: the element-wise pass that applies them and forms P^T and dS^T spills at 128
// with all of them on (BLOCK_M = 128 at D = 40 and 64; BLOCK_N = 128 on 4 warps at D = 1;
// sm_80 and sm_90a, compile_bwd_check.py) though the accumulator count fits.
constexpr int kMaxScoreRegistersWithEdits = 64;
// The least shared memory: one warp's 16 keys and 16 rows.
const Tiling kSmallest(kKnobs, {kMmaRows, kMmaRows, 1});
// 64x64 on 4 warps: the design's first-cut default (every warp 16 keys and 16 rows), where the
// wide tiling does not fit or split.
const Tiling kDefault(kKnobs, {64, 64, 4});
// 128 keys on 8 warps against Q blocks of 64 rows (FlashAttention-2's shape at D = 128): each
// warp's key-phase registers are the first cut's, while each Q and dO block loaded, each LSE
// read and each dQ atomic serve twice the keys. The query phase splits dQ's columns in two.
const Tiling kWide(kKnobs, {64, 128, 8});
// The padded head dim (D 97-112) at which ptxas spills the main kernel at 64x64 on 4 warps (12-24
// bytes with no feature, sm_80, compile_bwd_check.py) though D = 128 does not: it gets 32x32 on 2
// warps, which fits with every feature on (250 registers), and no other candidate.
constexpr int kSpillingHeadDim = 112;
const Tiling kNarrow(kKnobs, {32, 32, 2});
bool spills_at_default(const Semantics& s) {
  return fj_layout::bwd_round_up(s.head_dim_qk, fj_layout::kBwdHeadDimAlign) == kSpillingHeadDim;
}

int accumulators(const Semantics& s, const Tiling& t) {
  const int key_tiles = t[kBlockN] / t[kWarps] / kMmaRows;
  constexpr int kPerN8Tile = 4;  // an m16n8 fp32 tile is 4 registers a thread
  const fj_layout::BwdLayout l = fj_layout::bwd_layout(s.head_dim_qk, s.head_dim_v, t[kBlockM], t[kBlockN]);
  return key_tiles * kPerN8Tile * ((l.dqk + l.dv) / 8 + 2 * t[kBlockM] / 8);  // padded head dims: what the mma tiles hold
}

// The S^T and dP^T tiles of the key phase, in fp32 registers a thread.
int score_registers(const Tiling& t) {
  constexpr int kPerN8Tile = 4;
  return 2 * (t[kBlockN] / t[kWarps] / kMmaRows) * (t[kBlockM] / 8) * kPerN8Tile;
}

int smem_bytes(const Semantics& s, const Tiling& t) {
  return fj_layout::bwd_layout(s.head_dim_qk, s.head_dim_v, t[kBlockM], t[kBlockN]).smem_bytes;
}

// Workspace parts, each kWorkspaceAlignment-aligned: the fp32 dQ accumulator [batch, heads_q,
// seqlen_q_rounded, padded head dim], then D [batch, heads_q, seqlen_q_rounded]. Rows are
// rounded up to BLOCK_M so every Q block's rows exist; with varlen, batch counts sequences and
// seqlen_q is max_seqlen_q, so each sequence has rows of its own. Nothing needs to start zeroed:
// preprocess writes every word the other kernels read. Sizes are uint64: dq is an output of at
// most 2^62 bytes (tensor_layout.hpp), so these stay below 2^64.
struct BwdWorkspace {
  std::uint64_t dpsum_offset = 0, dsinks_offset = 0, bytes = 0;
};
BwdWorkspace workspace_layout(const ProblemShape& shape, const Semantics& s, int block_m) {
  auto up = [](std::uint64_t x) { return (x + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment; };
  const int dqk = fj_layout::bwd_round_up(s.head_dim_qk, fj_layout::kBwdHeadDimAlign);  // the kernels' kDQK
  const std::uint64_t rows = std::uint64_t(shape.batch) * std::uint64_t(shape.heads_q) *
                             std::uint64_t((shape.seqlen_q + block_m - 1) / block_m * block_m);
  BwdWorkspace w;
  w.dpsum_offset = up(rows * std::uint64_t(dqk) * sizeof(float));
  w.dsinks_offset = w.dpsum_offset + up(rows * sizeof(float));
  // With sinks, one term of dL/dsinks a (batch, Q block, head): rows / block_m of them.
  w.bytes = w.dsinks_offset + (s.sinks ? up(rows / std::uint64_t(block_m) * sizeof(float)) : 0);
  return w;
}

class BwdSm80 final : public KernelFamilyBase {
 public:
  BwdSm80() : KernelFamilyBase(kKnobs, "bwd_sm80/family.cu", kPriority) {}

  Pass pass() const override { return Pass::backward; }

  // Each reason names the argument that asks for what the first cut lacks.
  const char* refusal(const Arch& arch, const Semantics& s, const ProblemShape*) const override {
    if (arch.major < 8) return kNeedsSm80;
    if (s.dtype != DType::f16 && s.dtype != DType::bf16)
      return "q.dtype: the backward takes f16 or bf16 so far (fp32 needs its tf32 fragment path)";
    if (s.head_dim_qk != s.head_dim_v || s.head_dim_qk < 1 || s.head_dim_qk > kMaxHeadDim)
      return "q.shape[3] and v.shape[3] (head_dim): the backward takes 1 to 128, the same for q, k and v, so far";
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
    if (t[kBlockN] < kMmaRows || t[kBlockN] > kMaxBlock || t[kBlockN] % (kMmaRows * t[kWarps]))
      return broken(t, "BLOCK_N must be a multiple of 16 x warps, at most 128 (each warp takes 16-key tiles)");
    if (t[kBlockM] < kMmaRows || t[kBlockM] > kMaxBlock || t[kBlockM] % kMmaRows)
      return broken(t, "BLOCK_M must be a multiple of 16, at most 128 (warps take 16-row tiles of dQ)");
    // The query phase's warps: one per 16-row tile group, or, with more warps than 16-row tiles,
    // column groups of dQ, each a whole number of pairs of n8 tiles (templates/bwd_sm80/config.cuh).
    const int row_warps = std::min(t[kWarps], t[kBlockM] / kMmaRows);
    if (t[kBlockM] / kMmaRows >= t[kWarps] ? t[kBlockM] % (kMmaRows * t[kWarps]) != 0 : t[kWarps] % row_warps != 0)
      return broken(t, "BLOCK_M / 16 and warps must divide one another (warps split the Q block's 16-row tiles, or its "
                       "tiles and dQ's columns)");
    const int col_warps = t[kWarps] / row_warps;
    const int dqk_tiles = fj_layout::bwd_round_up(s.head_dim_qk, fj_layout::kBwdHeadDimAlign) / 8;
    if (dqk_tiles % (2 * col_warps) != 0)
      return broken(t, std::to_string(col_warps) + " column groups of warps do not split head dim " +
                           std::to_string(s.head_dim_qk) + "'s dQ into pairs of 8-column tiles");
    return {};
  }

  int min_smem_bytes(const Semantics& s) const override { return smem_bytes(s, kSmallest); }

  // The wide tiling where it splits the head dim and fits (D = 128: 135.5 KB: sm_80, sm_90;
  // not sm_86's 99 KB), else the first cut's (87.5 KB at D = 128), else the smallest.
  Tiling default_tiling(const Arch& arch, const Semantics& s, const ProblemShape*) const override {
    if (spills_at_default(s)) return kNarrow;
    if (fits(arch, s, kWide)) return kWide;
    return smem_bytes(s, kDefault) <= arch_smem_limit(arch) ? kDefault : kSmallest;
  }

  std::vector<Tiling> candidate_tilings(const Arch& arch, const Semantics& s) const override {
    std::vector<Tiling> out;
    if (spills_at_default(s)) return {kNarrow};
    for (int bm : {64, 128})
      for (int bn : {64, 128})
        for (int w : {4, 8}) {
          const Tiling t(kKnobs, {bm, bn, w});
          if (fits(arch, s, t)) out.push_back(t);
        }
    return out;
  }

  TileShape tile_shape(const Tiling& t) const override { return {t[kBlockM], t[kBlockN]}; }

 private:
  // A tiling that is valid for `s`, fits the arch's shared memory and the register rules.
  bool fits(const Arch& arch, const Semantics& s, const Tiling& t) const {
    const bool score_edits = s.window || s.softcap || s.alibi;
    return check_tiling(s, t).ok() && smem_bytes(s, t) <= arch_smem_limit(arch) &&
           accumulators(s, t) <= kMaxAccumulators && !(score_edits && score_registers(t) > kMaxScoreRegistersWithEdits);
  }

 public:

  std::vector<EntryPoint> entry_points(const KernelVariant& v) const override {
    return {{"flashjit_bwd_preprocess", 0}, {"flashjit_bwd_main", smem_bytes(v.semantics, v.tiling)}, {"flashjit_bwd_convert", 0}};
  }

  Status plan(const AttentionProblem& p, const KernelVariant& v, const DeviceContextInfo&, WorkspaceSource& workspace,
              LaunchPlan& out) const override {
    if (!p.backward) return Error(Code::internal, "bwd_sm80 plans backward calls only");
    const Tiling& t = v.tiling;
    const BackwardArgs& b = *p.backward;
    const unsigned m_blocks = unsigned((p.shape.seqlen_q + t[kBlockM] - 1) / t[kBlockM]);
    const unsigned n_blocks = unsigned((p.shape.seqlen_k + t[kBlockN] - 1) / t[kBlockN]);
    float* dq_accum = nullptr;
    float* dpsum = nullptr;
    float* dsinks_part = nullptr;
    if (m_blocks > 0) {  // with no query rows only the main kernel runs: it writes dK = dV = 0
      const BwdWorkspace w = workspace_layout(p.shape, v.semantics, t[kBlockM]);
      auto buffer = workspace.get(w.bytes, 0);
      if (!buffer.ok()) return std::move(buffer).error().with("variant", v.name());
      if (const CUdeviceptr base = buffer.value()) {
        dq_accum = reinterpret_cast<float*>(base);
        dpsum = reinterpret_cast<float*>(base + w.dpsum_offset);
        if (v.semantics.sinks) dsinks_part = reinterpret_cast<float*>(base + w.dsinks_offset);
      }
    }
    auto add = [&](int entry, unsigned blocks, std::int64_t heads, int smem) {
      KernelLaunch& k = out.add();
      k.entry = entry;
      k.grid = {blocks, unsigned(heads), unsigned(p.shape.batch)};
      k.block = {unsigned(t[kWarps] * 32), 1, 1};
      k.smem_bytes = unsigned(smem);
      FjBackwardParams& bp = k.params.emplace<FjBackwardParams>();
      fill_attention_params(p, bp.fwd);
      bp.dout = b.dout.data;
      bp.dq = const_cast<void*>(b.dq.data);
      bp.dk = const_cast<void*>(b.dk.data);
      bp.dv = const_cast<void*>(b.dv.data);
      bp.dq_accum = dq_accum;
      bp.dpsum = dpsum;
      bp.dsinks = b.dsinks;
      bp.dsinks_part = dsinks_part;
      for (int i = 0; i < 4; ++i) {
        bp.dout_stride[i] = b.dout.stride[i];
        bp.dq_stride[i] = b.dq.stride[i];
        bp.dk_stride[i] = b.dk.stride[i];
        bp.dv_stride[i] = b.dv.stride[i];
      }
      bp.seqlen_q_rounded = int(m_blocks) * t[kBlockM];
      bp.scale = p.scale;
    };
    // Entries in entry_points()' order; with no keys, convert writes dq = 0 from the zeroed accumulator.
    // preprocess and convert work per q-head; main per KV head (it walks the group's q-heads).
    if (m_blocks > 0) add(0, m_blocks, p.shape.heads_q, 0);
    if (n_blocks > 0) add(1, n_blocks, p.shape.heads_kv, smem_bytes(v.semantics, t));
    if (m_blocks > 0) add(2, m_blocks, p.shape.heads_q, 0);
    return {};
  }
};

}  // namespace

const KernelFamily& bwd_sm80_family() {
  static const BwdSm80 family;
  return family;
}

}  // namespace flashjit
