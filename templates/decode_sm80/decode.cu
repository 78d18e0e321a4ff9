// decode_sm80: attention for a few query tokens per sequence against a long key/value cache
// (decode, speculative decoding), bound by reading K and V once. Three choices make it so:
//   - GQA packing: a CTA's rows are (query token, query head) pairs of one key/value head, so
//     every K/V tile is read once for the whole group, not once per query head;
//   - the warps of a CTA split each key tile between them instead of splitting rows (a decode
//     CTA has as few as 1 row), and merge their partial results at the end;
//   - split-KV: the key range is cut into `splits` parts run by different CTAs, so a small batch
//     still fills the GPU; the last part of a row block to finish merges them in a fixed order
//     (an atomic ticket picks it), so the call stays one launch.
#include "common/attention_params.cuh"
#include "common/paged_kv.cuh"
#include "common/sequence.cuh"
#include "common/tile_io.cuh"
#include "common/sm80_mainloop.cuh"
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
    const int row = row0 + tid, token = row / p.group, head = kv_head * p.group + row % p.group;
    float top = neg_inf();
    for (int s = 0; s < splits; ++s) top = fmaxf(top, w[s]);
    const float sink = kSinks ? p.sinks[head] * kLog2e : neg_inf();
    const float top2 = fmaxf(top, sink);
    float den = kSinks ? exp2_approx(sink - top2) : 0.f;
    for (int s = 0; s < splits; ++s) {
      w[s] = w[s] == neg_inf() ? 0.f : exp2_approx(w[s] - top2);
      den += w[s];
    }
    const float inv = den > 0.f ? 1.f / den : 0.f;
    for (int s = 0; s < splits; ++s) w[s] *= inv;
    if constexpr (kWriteLse)
      p.lse[seq.batch * p.lse_stride[0] + head * p.lse_stride[1] + (seq.q_start + token) * p.lse_stride[2]] =
          den > 0.f ? (top2 + log2f(den)) * kLn2 : neg_inf();
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
    const int row = row0 + r;
    Elem* out = static_cast<Elem*>(p.o) + seq.batch * p.o_stride[0] + (seq.q_start + row / p.group) * p.o_stride[1] +
                (kv_head * p.group + row % p.group) * p.o_stride[2] + d * p.o_stride[3];
    store_elem(out, acc);
  }
}

}  // namespace fj::dec

extern "C" __global__ void __launch_bounds__(fj::dec::kThreads)
flashjit_decode_fwd(const __grid_constant__ FjDecodeParams dp) {
  using namespace fj;
  using namespace fj::dec;
  const FjAttentionParams& p = dp.attn;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Elem* sQ = reinterpret_cast<Elem*>(smem_raw);
  const KvRing ring{sQ + kLayout.q_elems};

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int split = blockIdx.x;
  const int kv_head = blockIdx.y % p.heads_kv, row_block = blockIdx.y / p.heads_kv;
  const int b = blockIdx.z;
  const Sequence seq = sequence_of<kVarlen, kKvLens, kPaged>(p, b);
  const int group = p.group;
  const int rows_total = seq.len_q * group;
  const int row0 = row_block * kRows;
  if (row0 >= rows_total) return;  // partials of rows that do not exist are never read
  const int rows = min(kRows, rows_total - row0);

  // The keys any of the CTA's tokens sees, in whole tiles, and this split's share of them.
  const int right = kWindow ? p.window_right : 0;
  int key_lo, key_hi;
  key_range<kCausal, kWindow>(seq, row0 / group, (row0 + rows - 1) / group - row0 / group + 1, p.window_left, right,
                              key_lo, key_hi);
  const int first_tile = key_lo / kTileKeys;
  const int all_tiles = key_hi > key_lo ? (key_hi + kTileKeys - 1) / kTileKeys - first_tile : 0;
  const int per_split = (all_tiles + dp.splits - 1) / dp.splits;
  const int my_first = first_tile + split * per_split;
  const int n_tiles = max(0, min(per_split, all_tiles - split * per_split));

  zero_columns<Elem, kRows, kHeadDimQK, kDQK, kStrideQK, kThreads>(sQ, tid);
  for (int s = 0; s < kStages; ++s) {
    zero_columns<Elem, kTileKeys, kHeadDimQK, kDQK, kStrideQK, kThreads>(ring.base + s * kStageElems, tid);
    zero_columns<Elem, kTileKeys, kHeadDimV, kDV, kStrideV, kThreads>(
        ring.base + s * kStageElems + kTileKeys * kStrideQK, tid);
  }
  // The CTA's query rows: the group's heads for each token, gathered row by row.
  load_rows_async<Elem, kRows, kHeadDimQK, kStrideQK, kVec, kThreads>(
      sQ,
      [&](int r) {
        const int row = row0 + r;
        return static_cast<const Elem*>(p.q) + seq.batch * p.q_stride[0] + (seq.q_start + row / group) * p.q_stride[1] +
               (kv_head * group + row % group) * p.q_stride[2];
      },
      p.q_stride[3], rows, tid);
  cp_async_commit();

  const Elem* gK = kPaged ? nullptr : key_row<Elem>(p.k, p.k_stride, seq, kv_head, 0);
  const Elem* gV = kPaged ? nullptr : key_row<Elem>(p.v, p.v_stride, seq, kv_head, 0);
  // Paged: the pages of the next tile to copy, fetched a tile ahead (K and V rows share pages but
  // may be split differently between threads when their head dims differ).
  TilePages<kTileKeys, kHeadDimQK / kVec, kThreads> k_pages;
  TilePages<kTileKeys, kHeadDimV / kVec, kThreads> v_pages;
  // Equal head dims split K and V rows alike between threads: one list serves both.
  constexpr bool kSharedPages = kHeadDimQK == kHeadDimV;
  auto fetch_pages = [&](int t) {
    if constexpr (kPaged) {
      k_pages.fetch(p, b, (my_first + t) * kTileKeys, tid);
      if constexpr (!kSharedPages) v_pages.fetch(p, b, (my_first + t) * kTileKeys, tid);
    }
  };
  auto load_kv = [&](int t) {
    const KvRing::Slot kv = ring.slot(t);
    Elem* sK = kv.k;
    const int n0 = (my_first + t) * kTileKeys;
    const int valid = seq.len_k - n0;
    if constexpr (kPaged) {
      load_paged_tile_async<Elem, kTileKeys, kHeadDimQK, kStrideQK, kVec, kThreads>(sK, p.k, p.k_stride, kv_head,
                                                                                      k_pages, valid, tid);
      load_paged_tile_async<Elem, kTileKeys, kHeadDimV, kStrideV, kVec, kThreads>(
          kv.v, p.v, p.v_stride, kv_head, pages_for_v<kSharedPages>(k_pages, v_pages), valid,
          tid);
    } else {
      load_tile_async<Elem, kTileKeys, kHeadDimQK, kStrideQK, kVec, kThreads>(
          sK, gK + n0 * p.k_stride[1], p.k_stride[1], p.k_stride[3], valid, tid);
      load_tile_async<Elem, kTileKeys, kHeadDimV, kStrideV, kVec, kThreads>(
          kv.v, gV + n0 * p.v_stride[1], p.v_stride[1], p.v_stride[3], valid, tid);
    }
  };
  ring.prologue(n_tiles, [&](int s) {
    fetch_pages(s);
    load_kv(s);
  });
  if (kStages - 1 < n_tiles) fetch_pages(kStages - 1);

  const RowMap rm = map_rows(row0, rows_total, group, kv_head, lane);
  float slope[kRowTiles][2];
  alibi_slopes(slope, rm, p, b);
  const float score_scale = kScoresInLog2 ? 1.f : p.scale_log2;

  float o[kRowTiles][kNTilesO][4];
  zero_tile(o);
  Softmax sm;
  sm.init();
  unsigned qreg[kQInRegisters ? kDQK / 16 : 1][kRowTiles][4];

  for (int t = 0; t < n_tiles; ++t) {
    ring.wait();
    if constexpr (kQInRegisters) {
      if (t == 0) sm80::load_q_regs<Gemm>(qreg, sQ, 0, lane);
    }
    ring.issue_ahead(t, n_tiles, [&](int ahead) {
      load_kv(ahead);
      if (ahead + 1 < n_tiles) fetch_pages(ahead + 1);  // used by the next iteration's copies
    });

    // This warp's slice of the tile: keys [warp * kWarpKeys, (warp + 1) * kWarpKeys).
    const KvRing::Slot kv = ring.slice(t, warp * kWarpKeys);
    const Elem* sK = kv.k;
    const Elem* sV = kv.v;
    sm80::attend<Gemm, kNTilesS, k16Bit, kQInRegisters>(
        o, sm, qreg, sQ, sK, sV, 0, lane, score_scale, [&](float (&s)[kRowTiles][kNTilesS][4]) {
          scores(s, rm, slope, (my_first + t) * kTileKeys + warp * kWarpKeys + 2 * (lane & 3), seq, p, right);
        });
  }

  // Merge the warps: each row's max (log2 units) and sum per warp, then the outputs rescaled to
  // the largest max and added. The stages are free once every warp is past its last tile.
  ring.drain();
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

  if (dp.splits == 1) {
    // Final rows: normalize (with sinks, against the larger of the row's max and the sink).
    for (int i = tid; i < rows * kHeadDimV; i += kThreads) {
      const int r = i / kHeadDimV, d = i % kHeadDimV;
      const int row = row0 + r, token = row / group, head = kv_head * group + row % group;
      const float top = m_buf[r], total = l_buf[r];
      float inv;
      if constexpr (kSinks) {
        const float sink = p.sinks[head] * kLog2e, top2 = fmaxf(top, sink);
        const float a = top == neg_inf() ? 0.f : exp2_approx(top - top2);
        const float den = total * a + exp2_approx(sink - top2);
        inv = den > 0.f ? a / den : 0.f;
      } else {
        inv = total > 0.f ? 1.f / total : 0.f;
      }
      Elem* out = static_cast<Elem*>(p.o) + seq.batch * p.o_stride[0] + (seq.q_start + token) * p.o_stride[1] +
                  head * p.o_stride[2] + d * p.o_stride[3];
      store_elem(out, o_buf[r * kMergeStride + d] * inv);
    }
    if constexpr (kWriteLse) {
      if (tid < rows) {
        const int row = row0 + tid, token = row / group, head = kv_head * group + row % group;
        const float top = m_buf[tid], total = l_buf[tid];
        float lse;
        if constexpr (kSinks) {
          const float sink = p.sinks[head] * kLog2e, top2 = fmaxf(top, sink);
          const float den = (top == neg_inf() ? 0.f : total * exp2_approx(top - top2)) + exp2_approx(sink - top2);
          lse = (top2 + log2f(den)) * kLn2;
        } else {
          lse = total > 0.f ? (top + log2f(total)) * kLn2 : neg_inf();
        }
        p.lse[seq.batch * p.lse_stride[0] + head * p.lse_stride[1] + (seq.q_start + token) * p.lse_stride[2]] = lse;
      }
    }
  } else {
    // This split's rows, normalized within the split, and their log-sum-exp (log2 units).
    const long long split_rows = (long long)p.batch * p.heads_q * p.seqlen_q;
    for (int i = tid; i < rows * kHeadDimV; i += kThreads) {
      const int r = i / kHeadDimV, d = i % kHeadDimV;
      const int row = row0 + r, token = row / group, head = kv_head * group + row % group;
      const long long at = split * split_rows + ((long long)b * p.heads_q + head) * p.seqlen_q + token;
      const float total = l_buf[r];
      dp.partial_o[at * kHeadDimV + d] = total > 0.f ? o_buf[r * kMergeStride + d] / total : 0.f;
    }
    if (tid < rows) {
      const int row = row0 + tid, token = row / group, head = kv_head * group + row % group;
      const long long at = split * split_rows + ((long long)b * p.heads_q + head) * p.seqlen_q + token;
      dp.partial_lse[at] = l_buf[tid] > 0.f ? m_buf[tid] + log2f(l_buf[tid]) : neg_inf();
    }
    // The last split of this row block to finish merges all of them: no second launch.
    __shared__ unsigned ticket;
    __threadfence();  // this CTA's partials are visible before its ticket is taken
    __syncthreads();
    unsigned* my_ticket = dp.tickets + ((long long)b * p.heads_kv + kv_head) * dp.row_blocks + row_block;
    if (tid == 0) ticket = atomicAdd(my_ticket, 1u);
    __syncthreads();
    if (ticket != unsigned(dp.splits - 1)) return;
    __threadfence();  // every other split's partials are visible to the reads below
    merge_splits(dp, seq, b, kv_head, row0, rows, reinterpret_cast<float*>(smem_raw), tid);
    if (tid == 0) *my_ticket = 0u;  // ready for the next call (and a graph's next replay)
  }
}
