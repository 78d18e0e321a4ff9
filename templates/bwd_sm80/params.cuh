// What the three backward kernels read, shared verbatim by the host and NVRTC: the forward's
// parameters (q, k, v, o, its LSE as an input, strides, lengths, the masks' run-time values)
// and the gradients' tensors and workspace. Plain C types, 8-byte fields first.
#pragma once

#include "common/attention_params.cuh"

struct FjBackwardParams {
  FjAttentionParams fwd;  // fwd.lse is read (the forward's natural-log LSE), never written
  const void* dout;       // [batch, seq_q, heads_q, head_dim_v]
  void* dq;               // [batch, seq_q, heads_q, head_dim_qk]
  void* dk;               // [batch, seq_k, heads_kv, head_dim_qk]
  void* dv;               // [batch, seq_k, heads_kv, head_dim_v]
  float* dq_accum;        // workspace: [batch, heads_q, seqlen_q_rounded, kDQK] fp32, zeroed by preprocess
  float* dpsum;           // workspace: D = rowsum(dO * O), [batch, heads_q, seqlen_q_rounded], each
                          // Q block's rows in config.cuh's row_stat_slot order
  float* lse_log2;        // workspace: each row's LSE as P's exponent takes it (score_grad.cuh's
                          // exponent_lse), laid out as dpsum; written by preprocess
  float* dsinks;          // sinks: dL/dsinks fp32 [heads_q], written by convert; null: not asked for
  float* dsinks_part;     // sinks: workspace [batch, seqlen_q_rounded / kBlockM, heads_q], one term a Q block
  int* dq_turn;           // deterministic: workspace [batch, heads_q, seqlen_q_rounded / kBlockM] (dq_order.cuh)
  long long dout_stride[4];
  long long dq_stride[4];
  long long dk_stride[4];
  long long dv_stride[4];
  int seqlen_q_rounded;  // seqlen_q rounded up to kBlockM: every Q block's rows exist in the workspace
  float scale;           // the softmax scale (natural units): dQ = scale * dS.K, dK = scale * dS^T.Q
};
