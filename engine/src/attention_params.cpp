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
  p.scale_log2 = float(double(pr.scale) * kLog2e);
  if (pr.semantics.softcap) {
    p.softcap_scale = float(double(pr.scale) / double(pr.softcap));
    p.softcap_log2 = float(double(pr.softcap) * kLog2e);
  }
  p.alibi_unit = float(pr.semantics.softcap ? kLog2e : 1.0 / double(pr.scale));
}

}  // namespace flashjit
