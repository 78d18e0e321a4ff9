// Kernel arguments of the forward attention families. Shared verbatim by the host (engine) and
// the device (NVRTC): plain C types only, 8-byte fields first so both sides lay it out alike.
#pragma once

struct FjFwdParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;  // may be null when the variant writes no log-sum-exp

  // Element strides of the logical [batch, seq, head, dim] views.
  long long q_stride[4];
  long long k_stride[4];
  long long v_stride[4];
  long long o_stride[4];
  long long lse_stride[3];  // [batch, head_q, seq_q]

  int batch;
  int seqlen_q;
  int seqlen_k;
  int heads_q;
  int heads_kv;
  int group;          // heads_q / heads_kv: query heads sharing one key/value head
  int causal_offset;  // seqlen_k - seqlen_q: aligns the causal diagonal to the bottom right
  float scale_log2;   // softmax scale * log2(e): softmax runs on exp2
};
