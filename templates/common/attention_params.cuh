// What every forward attention kernel reads: tensors, strides and the run-time values of the
// semantics (the compile-time ones are rendered constants). A family's own params struct is
// this one or wraps it with what only that family needs (split counts, TMA descriptors).
// Shared verbatim by the host and NVRTC: plain C types, 8-byte fields first so both sides lay
// it out alike.
#pragma once

#include "flashjit/device_arrays.h"
#include "flashjit/scalars.h"

struct FjAttentionParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;                 // null unless the variant writes the log-sum-exp
  const int* cu_seqlens_q;    // varlen: [batch + 1] prefix sums of the packed rows
  const int* cu_seqlens_k;
  const float* alibi_slopes;  // alibi: [batch?, heads_q]
#define FJ_PARAMS_DEVICE_ARRAY(elem, field, extent, constant, tag, why) const elem* field;
  FLASHJIT_DEVICE_ARRAY_ROWS(FJ_PARAMS_DEVICE_ARRAY)  // sinks [heads_q], kv_lens, kv_starts [batch]
#undef FJ_PARAMS_DEVICE_ARRAY
  const int* block_table;     // paged: [batch, table_stride] the page of each page_size keys

  // Element strides of the logical [batch, seq, head, dim] views (varlen: batch is 1; paged k
  // and v: [page, slot in page, head, dim]).
  long long q_stride[4];
  long long k_stride[4];
  long long v_stride[4];
  long long o_stride[4];
  long long lse_stride[3];  // [batch, head_q, seq_q]
  long long alibi_batch_stride;
  long long table_stride;  // paged: elements between sequences' rows of the block table

  int batch;     // sequences
  int seqlen_q;  // per sequence; varlen: the max, which sizes the grid
  int seqlen_k;
  int total_q;   // rows of the q/o tensors and k/v tensors: varlen clamps its prefix sums to
  int total_k;   // them, so bad prefix sums can never reach outside the tensors
  int page_size;  // paged: keys per page (k and v are [pages, page_size, heads_kv, dim])
  int max_pages;  // paged: pages a sequence's table row holds
  int num_pages;  // paged: pages in the pools: table entries are clamped below it
  int heads_q;
  int heads_kv;
  int group;         // heads_q / heads_kv: query heads sharing one key/value head
  int window_left;   // window: keys before the diagonal a row sees, clamped to the lengths
  int window_right;  // keys after it (0 with causal), clamped likewise
  float scale_log2;  // softmax scale * log2(e): softmax runs on exp2
  // The per-call scalars' members (flashjit/scalars.h): softcap_scale (scale / cap, applied
  // before tanh), softcap_log2 (cap * log2(e): scores leave the softcap in log2 units).
#define FLASHJIT_SCALAR_PARAM(type, member, fill, why) type member;
#define FJ_PARAMS_SCALAR(type, field, rule, constant, tag, typical, backward, params, why) FLASHJIT_SCALAR_EXPAND params
  FLASHJIT_SCALAR_ROWS(FJ_PARAMS_SCALAR)
#undef FJ_PARAMS_SCALAR
#undef FLASHJIT_SCALAR_PARAM
  float alibi_unit;     // alibi: slope to score units (log2(e) after a softcap, else 1 / scale)
};
