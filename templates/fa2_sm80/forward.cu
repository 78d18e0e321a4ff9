// fa2_sm80: FlashAttention-2 style forward for sm_80 and newer (mma.sync tensor cores,
// ldmatrix, cp.async multi-stage pipeline). One CTA owns kBlockM query rows of one head of one
// sequence; its warps split the rows and stream key/value tiles of kBlockN keys through a ring
// of kStages shared buffers, keeping the output and the softmax statistics in registers. Key
// tiles a causal mask or a sliding window hides from every row of the CTA are never loaded.
#include "common/attention_params.cuh"
#include "common/paged_kv.cuh"
#include "common/sequence.cuh"
#include "common/tile_io.cuh"
#include "common/tile_verbs.cuh"
#include "fa2_sm80/gemm.cuh"
#include "fa2_sm80/softmax.cuh"

namespace fj::fa2 {

FJ_DEVICE const Elem* elem_ptr(const void* base, const long long (&st)[4], int b, int s, int h) {
  return static_cast<const Elem*>(base) + b * st[0] + s * st[1] + h * st[2];
}

// Normalizes and stores the CTA's rows, and their LSE (row_total: sinks join the denominator).
FJ_DEVICE void write_output(const FjAttentionParams& p, float (&o)[kMTiles][kNTilesO][4], SoftmaxState& sm,
                            float score_scale, Elem* smem, const Sequence& seq, int m0, int warp_row0, int head,
                            int tid, int lane) {
  const Frag f{lane};
  const float sink_log2 = sink_log2_of(p.sinks, head, kSinks);
  // Everyone is done with the key/value buffers before the output tile reuses them.
  cp_async_wait<0>();
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const RowTotal total = row_total<kSinks>(quad_sum(sm.row_sum[mt][h]), sm.row_max[mt][h], score_scale, sink_log2);
      const int row = warp_row0 + mt * 16 + h * 8 + f.g();
#pragma unroll
      for (int nt = 0; nt < kNTilesO; ++nt) {
        const float x0 = o[mt][nt][2 * h] * total.inv, x1 = o[mt][nt][2 * h + 1] * total.inv;
        Elem* dst = smem + row * kStrideO + nt * 8 + 2 * f.t();
        if constexpr (k16Bit) {
          *reinterpret_cast<unsigned*>(dst) = Gemm::pack16(x0, x1);
        } else {
          dst[0] = x0;
          dst[1] = x1;
        }
      }
      if constexpr (kWriteLse) {
        const int grow = m0 + row;
        if (f.t() == 0 && grow < seq.len_q) store_lse(p, seq, head, grow, total.lse);
      }
    }
  }
  __syncthreads();
  Elem* out = static_cast<Elem*>(p.o) + seq.batch * p.o_stride[0] + (seq.q_start + m0) * p.o_stride[1] +
              head * p.o_stride[2];
  store_tile<Elem, kBlockM, kHeadDimV, kStrideO, kVec, kThreads>(
      out, p.o_stride[1], p.o_stride[3], smem, min(kBlockM, seq.len_q - m0), tid);
}

}  // namespace fj::fa2

extern "C" __global__ void __launch_bounds__(fj::fa2::kThreads)
flashjit_fa2_fwd(const __grid_constant__ FjAttentionParams p) {
  using namespace fj;
  using namespace fj::fa2;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Elem* sQ = reinterpret_cast<Elem*>(smem_raw);
  const KvRing ring{sQ + kBlockM * kStrideQK};

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // Causal: the last query blocks have the most keys; start them first.
  const int m_block = kCausal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int head = blockIdx.y;
  const Sequence seq = sequence_of(p, blockIdx.z);
  const int m0 = m_block * kBlockM;
  if (kVarlen && m0 >= seq.len_q) return;  // the grid covers the longest sequence
  const int kv_head = kGqa ? head / p.group : head;
  const int warp_row0 = warp * kRowsPerWarp;

  int key_lo, key_hi;
  key_range<kCausal, kWindow>(seq, m0, kBlockM, p.window_left, p.window_right, key_lo, key_hi);
  const int first_tile = key_lo / kBlockN;
  const int n_tiles = key_hi > key_lo ? (key_hi + kBlockN - 1) / kBlockN - first_tile : 0;

  const Elem* gQ = elem_ptr(p.q, p.q_stride, seq.batch, seq.q_start + m0, head);
  const Elem* gK = kPaged ? nullptr : elem_ptr(p.k, p.k_stride, seq.batch, seq.k_start, kv_head);
  const Elem* gV = kPaged ? nullptr : elem_ptr(p.v, p.v_stride, seq.batch, seq.k_start, kv_head);

  zero_columns<Elem, kBlockM, kHeadDimQK, kDQK, kStrideQK, kThreads>(sQ, tid);
  // The head dims' padding columns, which the mma steps read but no copy writes. (Inline: as a
  // function it reorders the prologue's SASS.)
  for (int s = 0; s < kStages; ++s) {
    zero_columns<Elem, kBlockN, kHeadDimQK, kDQK, kStrideQK, kThreads>(ring.base + s * KvRing::kStageElems, tid);
    zero_columns<Elem, kBlockN, kHeadDimV, kDV, kStrideV, kThreads>(
        ring.base + s * KvRing::kStageElems + kBlockN * kStrideQK, tid);
  }

  // Tile t of this CTA's range: key tile first_tile + t, in ring slot t % kStages.
  auto load_kv = [&](int t) {
    const KvRing::Slot kv = ring.slot(t);
    Elem* sK = kv.k;
    const int n0 = (first_tile + t) * kBlockN;
    const int rows = seq.len_k - n0;
    if constexpr (kPaged) {
      // Pages looked up as each row is copied: this family's warps have no registers to spare
      // for a list fetched ahead (decode_sm80 has, and does).
      const int b = blockIdx.z;
      load_rows_async<Elem, kBlockN, kHeadDimQK, kStrideQK, kVec, kThreads>(
          sK, [&](int r) { return paged_row<Elem>(p, p.k, p.k_stride, b, kv_head, seq.k_start + n0 + r); },
          p.k_stride[3], rows, tid);
      load_rows_async<Elem, kBlockN, kHeadDimV, kStrideV, kVec, kThreads>(
          kv.v, [&](int r) { return paged_row<Elem>(p, p.v, p.v_stride, b, kv_head, seq.k_start + n0 + r); },
          p.v_stride[3], rows, tid);
    } else {
      load_tile_async<Elem, kBlockN, kHeadDimQK, kStrideQK, kVec, kThreads>(
          sK, gK + n0 * p.k_stride[1], p.k_stride[1], p.k_stride[3], rows, tid);
      load_tile_async<Elem, kBlockN, kHeadDimV, kStrideV, kVec, kThreads>(
          kv.v, gV + n0 * p.v_stride[1], p.v_stride[1], p.v_stride[3], rows, tid);
    }
  };

  load_tile_async<Elem, kBlockM, kHeadDimQK, kStrideQK, kVec, kThreads>(
      sQ, gQ, p.q_stride[1], p.q_stride[3], seq.len_q - m0, tid);
  cp_async_commit();
  ring.prologue(n_tiles, load_kv);

  float o[kMTiles][kNTilesO][4];
  zero_tile(o);
  SoftmaxState sm;
  sm.init();

  unsigned qreg[kQInRegisters ? kDQK / 16 : 1][kMTiles][4];
  const int row_base = m0 + warp_row0 + (lane >> 2);
  const float score_scale = kScoresInLog2 ? 1.f : p.scale_log2;
  const float alibi_slope = alibi_slope_of(p, blockIdx.z, head);
  // Bounds of the tiles every row of the CTA sees whole: others need the mask.
  const int right = kWindow ? p.window_right : 0;
  const TileEdges edges = TileEdges::of(seq, m0, m0 + kBlockM - 1, p.window_left, right);

  for (int t = 0; t < n_tiles; ++t) {
    ring.wait();
    if constexpr (kQInRegisters) {
      if (t == 0) sm80::load_q_regs<Gemm>(qreg, sQ, warp_row0, lane);
    }
    ring.issue_ahead(t, n_tiles, load_kv);
    const KvRing::Slot kv = ring.slot(t);
    sm80::attend<Gemm, kNTilesS, k16Bit, kQInRegisters>(
        o, sm, qreg, sQ, kv.k, kv.v, warp_row0, lane, score_scale, [&](float (&s)[kMTiles][kNTilesS][4]) {
          const int n0 = (first_tile + t) * kBlockN;
          if constexpr (transforms_scores())
            transform_scores(s, row_base, n0 + 2 * (lane & 3), seq.offset(), p, alibi_slope);
          edges.mask(s, n0, row_base, n0 + 2 * (lane & 3), seq, p.window_left, right);
        });
  }

  write_output(p, o, sm, score_scale, sQ, seq, m0, warp_row0, head, tid, lane);
}
