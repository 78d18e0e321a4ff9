#include "attention_params.hpp"

namespace flashjit {

namespace {
constexpr double kLog2e = 1.4426950408889634;  // softmax runs on exp2: e^x = 2^(x log2 e)
}

void fill_attention_params(const AttentionProblem& pr, FjAttentionParams& p) {
  const AttentionArgs& a = *pr.args;
  p.q = a.q.data;
  p.k = a.k.data;
  p.v = a.v.data;
  p.o = const_cast<void*>(a.o.data);
  p.lse = a.lse ? a.lse->data : nullptr;
  for (int i = 0; i < 4; ++i) {
    p.q_stride[i] = a.q.stride[i];
    p.k_stride[i] = a.k.stride[i];
    p.v_stride[i] = a.v.stride[i];
    p.o_stride[i] = a.o.stride[i];
  }
  if (a.lse)
    for (int i = 0; i < 3; ++i) p.lse_stride[i] = a.lse->stride[i];
  if (a.varlen) {
    p.cu_seqlens_q = a.varlen->cu_seqlens_q;
    p.cu_seqlens_k = a.varlen->cu_seqlens_k;
  }
  if (a.alibi) {
    p.alibi_slopes = a.alibi->slopes;
    p.alibi_batch_stride = a.alibi->batch_stride;
  }
#define FJ_FILL_DEVICE_ARRAY(elem, field, extent, constant, tag, why) p.field = a.field;
  FLASHJIT_DEVICE_ARRAY_ROWS(FJ_FILL_DEVICE_ARRAY)
#undef FJ_FILL_DEVICE_ARRAY
  if (a.paged) {
    p.block_table = a.paged->block_table;
    p.table_stride = a.paged->table_stride;
    p.max_pages = int(a.paged->max_pages);
    p.page_size = int(a.k.shape[1]);
    p.num_pages = int(a.k.shape[0]);
  }
  const ProblemShape& s = pr.shape;
  p.batch = int(s.batch);
  p.seqlen_q = int(s.seqlen_q);
  p.seqlen_k = int(s.seqlen_k);
  p.total_q = int(a.q.shape[1]);
  p.total_k = int(a.k.shape[1]);
  p.heads_q = int(s.heads_q);
  p.heads_kv = int(s.heads_kv);
  p.group = s.heads_kv > 0 ? int(s.heads_q / s.heads_kv) : 1;
  p.window_left = pr.window_left;
  p.window_right = pr.window_right;
  const double scale = double(pr.scale), log2e = kLog2e;
  p.scale_log2 = float(scale * log2e);
  // The per-call scalars' members (flashjit/scalars.h), each filled from its row's expression in
  // `value`, `scale` and `log2e`; not written where the semantic is off.
#define FLASHJIT_SCALAR_PARAM(type, member, fill, why)                                          \
  static_assert(sizeof(p.member) == 4, "a scalar's params member sits among the 4-byte fields"); \
  p.member = type(fill);
#define FJ_FILL_SCALAR(type, field, rule, constant, tag, typical, backward, params, why) \
  if (pr.semantics.field) {                                                               \
    [[maybe_unused]] const double value = double(pr.field);                               \
    FLASHJIT_SCALAR_EXPAND params                                                         \
  }
  FLASHJIT_SCALAR_ROWS(FJ_FILL_SCALAR)
#undef FJ_FILL_SCALAR
#undef FLASHJIT_SCALAR_PARAM
  p.alibi_unit = float(pr.semantics.softcap ? log2e : 1.0 / scale);
}

}  // namespace flashjit
