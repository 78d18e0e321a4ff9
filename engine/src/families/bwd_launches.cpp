#include "bwd_launches.hpp"

#include <cstdint>

#include "attention_params.hpp"
#include "templates/bwd_sm80/layout.cuh"
#include "templates/bwd_sm80/params.cuh"

namespace flashjit {
namespace {

// Workspace parts, each kWorkspaceAlignment-aligned: the fp32 dQ accumulator [batch, heads_q,
// seqlen_q_rounded, padded head dim], then D [batch, heads_q, seqlen_q_rounded] (each Q block's
// rows in config.cuh's row_stat_slot order), then each row's LSE as the main kernel's exponent
// takes it (laid out as D), then with sinks their terms, then in deterministic mode an int turn
// flag a Q block (dq_order.cuh). Rows are rounded up to BLOCK_M so every Q block's rows exist;
// with varlen, batch counts sequences and seqlen_q is max_seqlen_q, so each sequence has rows of
// its own. Nothing needs to start zeroed:
// preprocess writes every word the other kernels read. Sizes are uint64: dq is an output of at
// most 2^62 bytes (tensor_layout.hpp), so these stay below 2^64.
struct BwdWorkspace {
  std::uint64_t dpsum_offset = 0, lse_log2_offset = 0, dsinks_offset = 0, dq_turn_offset = 0, bytes = 0;
};
BwdWorkspace workspace_layout(const ProblemShape& shape, const Semantics& s, int block_m) {
  auto up = [](std::uint64_t x) { return (x + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment; };
  const int dqk = fj_layout::bwd_padded_head_dim(s.head_dim_qk, s.head_dim_v);  // the kernels' kDQK
  const std::uint64_t rows = std::uint64_t(shape.batch) * std::uint64_t(shape.heads_q) *
                             std::uint64_t((shape.seqlen_q + block_m - 1) / block_m * block_m);
  BwdWorkspace w;
  w.dpsum_offset = up(rows * std::uint64_t(dqk) * sizeof(float));
  w.lse_log2_offset = w.dpsum_offset + up(rows * sizeof(float));
  w.dsinks_offset = w.lse_log2_offset + up(rows * sizeof(float));
  // With sinks, one term of dL/dsinks a (batch, Q block, head): rows / block_m of them.
  w.dq_turn_offset = w.dsinks_offset + (s.sinks ? up(rows / std::uint64_t(block_m) * sizeof(float)) : 0);
  w.bytes = w.dq_turn_offset + (s.deterministic ? up(rows / std::uint64_t(block_m) * sizeof(std::int32_t)) : 0);
  return w;
}

}  // namespace

Status plan_backward_launches(const AttentionProblem& p, const KernelVariant& v, WorkspaceSource& workspace,
                              const BackwardLaunchShape& shape, LaunchPlan& out) {
  if (!p.backward) return Error(Code::internal, std::string(v.family) + " plans backward calls only");
  const BackwardArgs& b = *p.backward;
  const unsigned m_blocks = unsigned((p.shape.seqlen_q + shape.block_m - 1) / shape.block_m);
  const unsigned n_blocks = unsigned((p.shape.seqlen_k + shape.block_n - 1) / shape.block_n);
  float* dq_accum = nullptr;
  float* dpsum = nullptr;
  float* lse_log2 = nullptr;
  float* dsinks_part = nullptr;
  std::int32_t* dq_turn = nullptr;
  if (m_blocks > 0) {  // with no query rows only the main kernel runs: it writes dK = dV = 0
    const BwdWorkspace w = workspace_layout(p.shape, v.semantics, shape.block_m);
    auto buffer = workspace.get(w.bytes, 0);
    if (!buffer.ok()) return std::move(buffer).error().with("variant", v.name());
    if (const CUdeviceptr base = buffer.value()) {
      dq_accum = reinterpret_cast<float*>(base);
      dpsum = reinterpret_cast<float*>(base + w.dpsum_offset);
      lse_log2 = reinterpret_cast<float*>(base + w.lse_log2_offset);
      if (v.semantics.sinks) dsinks_part = reinterpret_cast<float*>(base + w.dsinks_offset);
      if (v.semantics.deterministic) dq_turn = reinterpret_cast<std::int32_t*>(base + w.dq_turn_offset);
    }
  }
  auto add = [&](int entry, unsigned blocks, std::int64_t heads, unsigned threads, int smem) {
    KernelLaunch& k = out.add();
    k.entry = entry;
    k.grid = {blocks, unsigned(heads), unsigned(p.shape.batch)};
    k.block = {threads, 1, 1};
    k.smem_bytes = unsigned(smem);
    FjBackwardParams& bp = k.params.emplace<FjBackwardParams>();
    fill_attention_params(p, bp.fwd);
    bp.dout = b.dout.data;
    bp.dq = const_cast<void*>(b.dq.data);
    bp.dk = const_cast<void*>(b.dk.data);
    bp.dv = const_cast<void*>(b.dv.data);
    bp.dq_accum = dq_accum;
    bp.dpsum = dpsum;
    bp.lse_log2 = lse_log2;
    bp.dsinks = b.dsinks;
    bp.dsinks_part = dsinks_part;
    bp.dq_turn = dq_turn;
    for (int i = 0; i < 4; ++i) {
      bp.dout_stride[i] = b.dout.stride[i];
      bp.dq_stride[i] = b.dq.stride[i];
      bp.dk_stride[i] = b.dk.stride[i];
      bp.dv_stride[i] = b.dv.stride[i];
    }
    bp.seqlen_q_rounded = int(m_blocks) * shape.block_m;
    bp.scale = p.scale;
  };
  // Entries in the families' entry_points() order; with no keys, convert writes dq = 0 from the
  // zeroed accumulator. preprocess and convert work per q-head; main per KV head.
  if (m_blocks > 0) add(0, m_blocks, p.shape.heads_q, shape.aux_threads, 0);
  if (n_blocks > 0) add(1, n_blocks, p.shape.heads_kv, shape.main_threads, shape.main_smem);
  if (m_blocks > 0) add(2, m_blocks, p.shape.heads_q, shape.aux_threads, shape.convert_smem);
  return {};
}

}  // namespace flashjit
