// decode_sm80's merges of partial results: the warps of a CTA (each saw a slice of every key
// tile) into one result per row, then either the final rows (one split) or this split's
// normalized partials, which the last split of a row block to finish merges in split order.
#pragma once

#include "common/attention_params.cuh"
#include "common/online_softmax.cuh"
#include "common/sequence.cuh"
#include "decode_sm80/config.cuh"
#include "decode_sm80/params.cuh"
#include "decode_sm80/rows.cuh"

namespace fj::dec {

FJ_DEVICE void store_elem(Elem* dst, float x) {
  if constexpr (k16Bit) {
    const unsigned two = Gemm::pack16(x, 0.f);
    *reinterpret_cast<unsigned short*>(dst) = static_cast<unsigned short>(two & 0xffffu);
  } else {
    *dst = x;
  }
}

// The CTA's rows after the warp merge, in the freed K/V stages: row r's max (log2 units), sum of
// exp2 relative to it, and unnormalized output (row stride kMergeStride).
struct MergedRows {
  float* m;  // [kWarps][kRows]; after the merge, warp 0's slots hold the rows'
  float* l;  // [kWarps][kRows]
  float* o;  // [kWarps][kRows][kMergeStride]
};

// Merge the warps: each row's max (log2 units) and sum per warp, then the outputs rescaled to
// the largest max and added. Call once the stages are free (every warp past its last tile).
FJ_DEVICE MergedRows merge_warps(const float (&o)[kRowTiles][kNTilesO][4], const Softmax& sm, float score_scale,
                                 unsigned char* smem_raw, int tid, int warp, int lane) {
  float* m_buf = reinterpret_cast<float*>(smem_raw);  // [kWarps][kRows]
  float* l_buf = m_buf + kWarps * kRows;               // [kWarps][kRows]
  float* o_buf = l_buf + kWarps * kRows;               // [kWarps][kRows][kMergeStride]
  const Frag f{lane};
#pragma unroll
  for (int mt = 0; mt < kRowTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = mt * 16 + h * 8 + f.g();
      const float sum = quad_sum(sm.row_sum[mt][h]);
      if (f.t() == 0) {
        m_buf[warp * kRows + r] = sm.row_max[mt][h] == neg_inf() ? neg_inf() : sm.row_max[mt][h] * score_scale;
        l_buf[warp * kRows + r] = sum;
      }
    }
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < kRowTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = mt * 16 + h * 8 + f.g();
      float top = neg_inf();
      for (int w = 0; w < kWarps; ++w) top = fmaxf(top, m_buf[w * kRows + r]);
      const float mine = m_buf[warp * kRows + r];
      const float a = mine == neg_inf() ? 0.f : exp2_approx(mine - top);
      float* dst = o_buf + (warp * kRows + r) * kMergeStride + 2 * f.t();
#pragma unroll
      for (int nt = 0; nt < kNTilesO; ++nt) {
        dst[nt * 8] = o[mt][nt][2 * h] * a;
        dst[nt * 8 + 1] = o[mt][nt][2 * h + 1] * a;
      }
    }
  __syncthreads();
  // Row totals into warp 0's slots, one thread per row.
  if (tid < kRows) {
    float top = neg_inf();
    for (int w = 0; w < kWarps; ++w) top = fmaxf(top, m_buf[w * kRows + tid]);
    float total = 0.f;
    for (int w = 0; w < kWarps; ++w) {
      const float m = m_buf[w * kRows + tid];
      if (m != neg_inf()) total += l_buf[w * kRows + tid] * exp2_approx(m - top);
    }
    m_buf[tid] = top;
    l_buf[tid] = total;
  }
  for (int i = tid; i < kRows * kDV; i += kThreads) {
    const int r = i / kDV, d = i % kDV;
    float acc = 0.f;
    for (int w = 0; w < kWarps; ++w) acc += o_buf[(w * kRows + r) * kMergeStride + d];
    o_buf[r * kMergeStride + d] = acc;
  }
  __syncthreads();
  return {m_buf, l_buf, o_buf};
}

// One split: the final rows, normalized with sinks (against the larger of the row's max and the
// sink), and their LSE.
FJ_DEVICE void store_rows(const FjAttentionParams& p, const Sequence& seq, const MergedRows& mg, int row0, int rows,
                          int kv_head, int tid) {
  const int group = p.group;
  for (int i = tid; i < rows * kHeadDimV; i += kThreads) {
    const int r = i / kHeadDimV, d = i % kHeadDimV;
    const PackedRow pr = packed_row(row0 + r, group, kv_head);
    const float top = mg.m[r], total = mg.l[r];
    float inv;
    if constexpr (kSinks) {
      const float sink = p.sinks[pr.head] * kLog2e, top2 = fmaxf(top, sink);
      const float a = top == neg_inf() ? 0.f : exp2_approx(top - top2);
      const float den = total * a + exp2_approx(sink - top2);
      inv = den > 0.f ? a / den : 0.f;
    } else {
      inv = total > 0.f ? 1.f / total : 0.f;
    }
    Elem* out = static_cast<Elem*>(p.o) + seq.batch * p.o_stride[0] + (seq.q_start + pr.token) * p.o_stride[1] +
                pr.head * p.o_stride[2] + d * p.o_stride[3];
    store_elem(out, mg.o[r * kMergeStride + d] * inv);
  }
  if constexpr (kWriteLse) {
    if (tid < rows) {
      const PackedRow pr = packed_row(row0 + tid, group, kv_head);
      const float top = mg.m[tid], total = mg.l[tid];
      float lse;
      if constexpr (kSinks) {
        const float sink = p.sinks[pr.head] * kLog2e, top2 = fmaxf(top, sink);
        const float den = (top == neg_inf() ? 0.f : total * exp2_approx(top - top2)) + exp2_approx(sink - top2);
        lse = (top2 + log2f(den)) * kLn2;
      } else {
        lse = total > 0.f ? (top + log2f(total)) * kLn2 : neg_inf();
      }
      store_lse(p, seq, pr.head, pr.token, lse);
    }
  }
}

// Several splits: this split's rows, normalized within the split, and their log-sum-exp (log2
// units), at [split][batch][heads_q][seqlen_q].
FJ_DEVICE void store_partials(const FjDecodeParams& dp, const MergedRows& mg, int split, int b, int row0, int rows,
                              int kv_head, int tid) {
  const FjAttentionParams& p = dp.attn;
  const int group = p.group;
  const long long split_rows = (long long)p.batch * p.heads_q * p.seqlen_q;
  for (int i = tid; i < rows * kHeadDimV; i += kThreads) {
    const int r = i / kHeadDimV, d = i % kHeadDimV;
    const PackedRow pr = packed_row(row0 + r, group, kv_head);
    const long long at = split * split_rows + ((long long)b * p.heads_q + pr.head) * p.seqlen_q + pr.token;
    const float total = mg.l[r];
    dp.partial_o[at * kHeadDimV + d] = total > 0.f ? mg.o[r * kMergeStride + d] / total : 0.f;
  }
  if (tid < rows) {
    const PackedRow pr = packed_row(row0 + tid, group, kv_head);
    const long long at = split * split_rows + ((long long)b * p.heads_q + pr.head) * p.seqlen_q + pr.token;
    dp.partial_lse[at] = mg.l[tid] > 0.f ? mg.m[tid] + log2f(mg.l[tid]) : neg_inf();
  }
}

// Merges the splits of a row block's rows in split order (deterministic), with the whole CTA: it
// is the kernel's tail (every other CTA is done), so its loads must not wait on each other. The
// LSEs go to shared memory, each row's weights are computed once, then every thread sums its
// output elements over the splits with independent loads. Reads bypass L1: other CTAs wrote them.
FJ_DEVICE void merge_splits(const FjDecodeParams& dp, const Sequence& seq, int b, int kv_head, int row0, int rows,
                            float* smem, int tid) {
  const FjAttentionParams& p = dp.attn;
  const int splits = dp.splits;
  const long long split_rows = (long long)p.batch * p.heads_q * p.seqlen_q;
  auto at = [&](int r) {
    const int row = row0 + r;
    return ((long long)b * p.heads_q + kv_head * p.group + row % p.group) * p.seqlen_q + row / p.group;
  };
  float* weight = smem;  // [rows][splits]: each split's share of the row, sinks included
  for (int i = tid; i < rows * splits; i += kThreads)
    weight[i] = __ldcg(dp.partial_lse + (i % splits) * split_rows + at(i / splits));
  __syncthreads();
  if (tid < rows) {
    float* w = weight + tid * splits;
    const PackedRow pr = packed_row(row0 + tid, p.group, kv_head);
    float top = neg_inf();
    for (int s = 0; s < splits; ++s) top = fmaxf(top, w[s]);
    const float sink = kSinks ? p.sinks[pr.head] * kLog2e : neg_inf();
    const float top2 = fmaxf(top, sink);
    float den = kSinks ? exp2_approx(sink - top2) : 0.f;
    for (int s = 0; s < splits; ++s) {
      w[s] = w[s] == neg_inf() ? 0.f : exp2_approx(w[s] - top2);
      den += w[s];
    }
    const float inv = den > 0.f ? 1.f / den : 0.f;
    for (int s = 0; s < splits; ++s) w[s] *= inv;
    if constexpr (kWriteLse) store_lse(p, seq, pr.head, pr.token, den > 0.f ? (top2 + log2f(den)) * kLn2 : neg_inf());
  }
  __syncthreads();
  constexpr int kUnroll = 8;  // independent loads in flight per thread
  for (int i = tid; i < rows * kHeadDimV; i += kThreads) {
    const int r = i / kHeadDimV, d = i % kHeadDimV;
    const float* w = weight + r * splits;
    const float* src = dp.partial_o + at(r) * kHeadDimV + d;
    const long long step = split_rows * kHeadDimV;
    float acc = 0.f;
    int s = 0;
    for (; s + kUnroll <= splits; s += kUnroll) {
      float x[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) x[u] = __ldcg(src + (s + u) * step);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) acc += w[s + u] * x[u];
    }
    for (; s < splits; ++s) acc += w[s] * __ldcg(src + s * step);
    const PackedRow pr = packed_row(row0 + r, p.group, kv_head);
    Elem* out = static_cast<Elem*>(p.o) + seq.batch * p.o_stride[0] + (seq.q_start + pr.token) * p.o_stride[1] +
                pr.head * p.o_stride[2] + d * p.o_stride[3];
    store_elem(out, acc);
  }
}

}  // namespace fj::dec
