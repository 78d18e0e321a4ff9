// bwd_sm80 main kernel: FlashAttention-2's backward on sm_80 tensor cores (mma.sync, ldmatrix,
// cp.async). One CTA per (BLOCK_N keys, KV head, batch) keeps its K and V tiles in shared memory
// and dK, dV in registers, and walks the q-heads of its GQA/MQA group (outer loop: dK and dV of
// the KV head are summed over the whole group in registers, so K/V are never expanded) and, per
// q-head, the Q blocks that see any of its keys. For each Q block (BLOCK_M rows of Q and dO,
// their LSE and D):
//   key phase (each warp: its BLOCK_N / warps keys against all BLOCK_M rows, transposed, so
//   every product is one of common/warp_gemm_sm80.cuh's; see bwd_sm80/gemm.cuh):
//     S^T = K Q^T;  dP^T = V dO^T;  the forward's softcap and ALiBi on S^T, then its mask;
//     P^T = exp2(S^T * scale_log2 - LSE * log2 e)  (masked entries 0);
//     dS^T = P^T * (dP^T - D) * softcap'  (bwd_sm80/score_grad.cuh);  dV += P^T dO;  dK += dS^T Q
//   query phase (each warp: its BLOCK_M / warps rows against all BLOCK_N keys):
//     dS goes through shared memory (fp32), dQ_part = dS K, staged through shared memory and
//     added row by row to the fp32 dQ accumulator with atomics (scaled by the softmax scale).
// At the end dK (times the scale) and dV are staged through the K and V tiles and stored.
//
// Not yet covered (docs/design/backward.md has the plan for each):
//   - varlen, kv_lens, paged K/V, sinks (d_sinks);
//   - head dims past 128 (dK + dV of 16 keys alone fill a thread's registers at 256: needs the
//     head dim split across warps);
//   - fp32 inputs (tf32 / exact-fp32 fragments) - 16-bit only;
//   - deterministic mode (dQ atomics land in any order);
//   - speed: Q/dO are not double-buffered (each Q block's loads are waited for) and the mask is
//     a per-element check on edge tiles.
#include "bwd_sm80/elem.cuh"
#include "bwd_sm80/gemm.cuh"
#include "bwd_sm80/score_grad.cuh"
#include "bwd_sm80/tile_walk.cuh"
#include "common/row_total.cuh"
#include "common/sequence.cuh"
#include "common/tile_io.cuh"
#include "common/tile_verbs.cuh"

namespace fj::bwd {

// Writes a register tile (m16n8 C layout; rows row0 + mt*16 + g (+8), columns col0 + 2t (+1) of
// every n8 tile) times x into a shared tile of row stride kStride, as pairs: 16-bit (Elem) or
// fp32 (float2).
template <int kStride, typename T, int kMTiles, int kNTiles>
FJ_DEVICE void stage_tile(T* smem, const float (&acc)[kMTiles][kNTiles][4], int row0, int col0, int lane,
                          float x = 1.f) {
  const Frag f{lane};
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        T* dst = smem + (row0 + mt * 16 + h * 8 + f.g()) * kStride + col0 + nt * 8 + 2 * f.t();
        const float a = acc[mt][nt][2 * h] * x, b = acc[mt][nt][2 * h + 1] * x;
        if constexpr (sizeof(T) == sizeof(float))
          *reinterpret_cast<float2*>(dst) = make_float2(a, b);
        else
          *reinterpret_cast<unsigned*>(dst) = GemmS::pack16(a, b);
      }
}

// A Q block's tile of Q or dO (kBlockM rows), once a step of the main loop: load_tile_async's
// unrolled copy where each thread keeps one column (no per-access offsets), else the rolled one
// (common/tile_io.cuh says why).
template <int kCols, int kSmemStride>
FJ_DEVICE void load_q_block(Elem* smem, const Elem* gmem, long long row_stride, long long col_stride, int rows_valid,
                            int tid) {
  if constexpr (kThreads % (kCols / kVec) == 0)
    load_tile_async<Elem, kBlockM, kCols, kSmemStride, kVec, kThreads>(smem, gmem, row_stride, col_stride, rows_valid, tid);
  else
    load_tile_async_rolled<Elem, kBlockM, kCols, kSmemStride, kVec, kThreads>(smem, gmem, row_stride, col_stride,
                                                                              rows_valid, tid);
}

// acc *= x over a whole register tile.
template <int kMTiles, int kNTiles>
FJ_DEVICE void scale_tile(float (&acc)[kMTiles][kNTiles][4], float x) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] *= x;
}

}  // namespace fj::bwd

extern "C" __global__ void __launch_bounds__(fj::bwd::kThreads)
flashjit_bwd_main(const __grid_constant__ FjBackwardParams p) {
  using namespace fj;
  using namespace fj::bwd;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Elem* sK = reinterpret_cast<Elem*>(smem_raw + kLayout.k);
  Elem* sV = reinterpret_cast<Elem*>(smem_raw + kLayout.v);
  Elem* sQ = reinterpret_cast<Elem*>(smem_raw + kLayout.q);
  Elem* sdO = reinterpret_cast<Elem*>(smem_raw + kLayout.dout);
  float* sDs = reinterpret_cast<float*>(smem_raw + kLayout.ds);
  float* sLse = reinterpret_cast<float*>(smem_raw + kLayout.lse);
  float* sD = reinterpret_cast<float*>(smem_raw + kLayout.dpsum);

  const FjAttentionParams& f = p.fwd;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const Frag fr{lane};
  const int n0 = blockIdx.x * kBlockN;
  const int kv_head = blockIdx.y;
  const int group = kGqa ? f.group : 1;  // q-heads kv_head * group ... + group - 1 read this K/V
  const Sequence seq = sequence_of(f, blockIdx.z);
  const int left = f.window_left, right = window_right_of(f);
  const float score_scale = kScoresInLog2 ? 1.f : f.scale_log2;
  const int key_row0 = warp * kKeyRowsPerWarp;  // this warp's keys in the key phase, within the block
  const int q_row0 = warp % kQRowWarps * kQRowsPerWarp;  // this warp's rows in the query phase, within a Q block
  const int q_col0 = warp / kQRowWarps * kQColsPerWarp;  // and its first column of dQ

  int q_lo, q_hi;
  query_range(seq, n0, left, right, q_lo, q_hi);
  if (n0 >= seq.len_k) q_hi = q_lo;  // keys past the sequence's end (varlen, kv_lens): their zeros only
  // The workspace holds seqlen_q_rounded rows a (sequence, head): a varlen sequence longer than
  // max_seqlen_q (prefix sums the host did not check) is cut there, as its forward was.
  q_hi = min(q_hi, p.seqlen_q_rounded);
  if (q_hi < q_lo) q_hi = q_lo;
  const int first_m = q_lo / kBlockM;
  const int end_m = (q_hi + kBlockM - 1) / kBlockM;

  // The head dims' padding columns, which the mma steps read but no copy writes; the copies
  // never touch them, so once is enough for K and V. Q's and dO's are zeroed every Q block: the
  // dQ staging of the step before wrote over them.
  zero_columns<Elem, kBlockN, kHeadDimQK, kDQK, kStrideQK, kThreads>(sK, tid);
  zero_columns<Elem, kBlockN, kHeadDimV, kDV, kStrideV, kThreads>(sV, tid);

  // K and V of this block stay for the whole CTA; keys past the sequence's end become zeros.
  load_tile_async<Elem, kBlockN, kHeadDimQK, kStrideQK, kVec, kThreads>(
      sK, key_row<Elem>(f.k, f.k_stride, seq, kv_head, n0), f.k_stride[1], f.k_stride[3], seq.len_k - n0, tid);
  load_tile_async<Elem, kBlockN, kHeadDimV, kStrideV, kVec, kThreads>(
      sV, key_row<Elem>(f.v, f.v_stride, seq, kv_head, n0), f.v_stride[1], f.v_stride[3], seq.len_k - n0, tid);
  cp_async_commit();

  float dk[kKeyTiles][kNTilesQK][4];
  float dv[kKeyTiles][kNTilesV][4];
  zero_tile(dk);
  zero_tile(dv);

  // One walk over (q-head of the group, Q block), q-heads outer: every q-head meets the same
  // Q blocks (the mask does not depend on the head). Counters, not step / m_blocks: the
  // division's registers cost ptxas a spill at D = 128 with every feature on.
  const int steps = group * (end_m - first_m);
  int head = kv_head * group, m_block = first_m;
  for (int step = 0; step < steps; ++step) {
    const int m0 = m_block * kBlockM;
    const long long ws_head = (static_cast<long long>(blockIdx.z) * f.heads_q + head) * p.seqlen_q_rounded;
    const int rows_q = seq.len_q - m0;
    zero_columns<Elem, kBlockM, kHeadDimQK, kDQK, kStrideQK, kThreads>(sQ, tid);
    zero_columns<Elem, kBlockM, kHeadDimV, kDV, kStrideV, kThreads>(sdO, tid);
    load_q_block<kHeadDimQK, kStrideQK>(
        sQ, row_at(static_cast<const Elem*>(f.q), f.q_stride, seq.batch, seq.q_start + m0, head), f.q_stride[1],
        f.q_stride[3], rows_q, tid);
    load_q_block<kHeadDimV, kStrideV>(
        sdO, row_at(static_cast<const Elem*>(p.dout), p.dout_stride, seq.batch, seq.q_start + m0, head),
        p.dout_stride[1], p.dout_stride[3], rows_q, tid);
    cp_async_commit();
    for (int r = tid; r < kBlockM; r += kThreads) {
      const int row = m0 + r;
      const float lse = row < seq.len_q
                            ? f.lse[seq.batch * f.lse_stride[0] + head * f.lse_stride[1] + (seq.q_start + row) * f.lse_stride[2]]
                            : pos_inf();
      // A row that saw no key (LSE -inf), or no row at all: +inf makes every P of it 0.
      sLse[r] = (lse == neg_inf() ? pos_inf() : lse) * kLog2e;
      sD[r] = p.dpsum[ws_head + row];  // preprocess wrote 0 past the sequence
    }
    cp_async_wait<0>();
    __syncthreads();

    // ---- key phase: S^T, dP^T, then P^T and dS^T element by element, then dV and dK for
    // this warp's keys.
    float st[kKeyTiles][kNTilesM][4];
    zero_tile(st);
    GemmS::gemm_qk16<false>(st, nullptr, sK, sQ, key_row0, lane);
    float dpt[kKeyTiles][kNTilesM][4];
    zero_tile(dpt);
    GemmDP::gemm_qk16<false>(dpt, nullptr, sV, sdO, key_row0, lane);
    {
      // Read here, not with the head: live across the products above, it costs ptxas a spill
      // at D = 128 with window, softcap and ALiBi together.
      const float alibi_slope = alibi_slope_of(f, blockIdx.z, head);
      const bool masked = tile_needs_mask(n0, m0, seq, left, right);
#pragma unroll
      for (int kt = 0; kt < kKeyTiles; ++kt)
#pragma unroll
        for (int nt = 0; nt < kNTilesM; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int key = n0 + key_row0 + kt * 16 + fr.g() + (i / 2) * 8;
            const int r = nt * 8 + 2 * fr.t() + (i & 1);  // query row within the Q block
            float x = st[kt][nt][i];
            const float factor = transform_with_grad(x, m0 + r, key, seq.offset(), f, alibi_slope);
            if (masked && key_hidden(key, m0 + r, seq, left, right)) x = neg_inf();
            const float prob = exp2_approx(fmaf(x, score_scale, -sLse[r]));
            st[kt][nt][i] = prob;
            dpt[kt][nt][i] = prob * (dpt[kt][nt][i] - sD[r]) * factor;
          }
    }
    GemmS::gemm_pv16(dv, st, sdO, lane);   // P^T rounds to 16 bits here, as FA2's P does
    GemmDP::gemm_pv16(dk, dpt, sQ, lane);  // now dS^T

    // dS (fp32) to shared as [query row][key] for the query phase.
#pragma unroll
    for (int kt = 0; kt < kKeyTiles; ++kt)
#pragma unroll
      for (int nt = 0; nt < kNTilesM; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          sDs[(nt * 8 + 2 * fr.t() + (i & 1)) * kStrideDs + key_row0 + kt * 16 + fr.g() + (i / 2) * 8] = dpt[kt][nt][i];
    __syncthreads();

    // ---- query phase: dQ_part = dS K for this warp's rows, added to the accumulator.
    // dQ_part (times the scale) goes to the accumulator staged through the Q and dO tiles (no warp
    // reads them past the dS barrier above; their head-dim padding is zeroed again next step) so
    // that each atomic instruction of a warp covers 32 consecutive floats of one row: one L2
    // request where the C layout's scattered pairs took eight (ncu, D = 128: those held L2 82%
    // busy and the kernel at half FlashAttention-2's speed). The product runs in column parts,
    // each staged before the next, and reads dS from shared memory one k16 step at a time: a part
    // of dQ and 16 keys of dS are live at once, not all of both (D = 128 spilled otherwise).
    float* sDq = reinterpret_cast<float*>(smem_raw + kLayout.q);  // over sQ and sdO, both read by now
#pragma unroll
    for (int part = 0; part < kDqParts; ++part) {
      constexpr int kPartCols = kQColsPerWarp / kDqParts;
      const int col0 = q_col0 + part * kPartCols;
      float dq[kQTiles][kNTilesQKWarp / kDqParts][4];
      zero_tile(dq);
#pragma unroll
      for (int kk = 0; kk < kNTilesN / 2; ++kk) {
        // dS for keys kk*16 .. +15 as an m16k16 A operand: a float2 a lane and row, so a warp's
        // load is two conflict-free wavefronts.
        float ds[kQTiles][2][4];
#pragma unroll
        for (int qt = 0; qt < kQTiles; ++qt)
#pragma unroll
          for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const float2 pair = *reinterpret_cast<const float2*>(
                  sDs + (q_row0 + qt * 16 + fr.g() + h * 8) * kStrideDs + (2 * kk + nt) * 8 + 2 * fr.t());
              ds[qt][nt][2 * h] = pair.x;
              ds[qt][nt][2 * h + 1] = pair.y;
            }
        GemmDQ::gemm_pv16(dq, ds, sK + kk * 16 * kStrideQK + col0, lane);
      }
      stage_tile<kStrideDq>(sDq, dq, q_row0, col0, lane, p.scale);
    }
    __syncwarp();
    {
      const int rows = min(kQRowsPerWarp, rows_q - q_row0);
      const int cols = min(kQColsPerWarp, kHeadDimQK - q_col0) - lane;  // this lane's columns: 0, 32, .. below
      float* dst = p.dq_accum + (ws_head + m0 + q_row0) * kDQK + q_col0 + lane;
      const float* src = sDq + q_row0 * kStrideDq + q_col0 + lane;
#pragma unroll 1
      for (int r = 0; r < rows; ++r, dst += kDQK, src += kStrideDq)
#pragma unroll 1
        for (int c = 0; c < cols; c += 32) atomicAdd(dst + c, src[c]);
    }
    __syncthreads();  // the next Q block overwrites sQ, sdO (sDq), sDs, sLse and sD
    if (++m_block == end_m) m_block = first_m, ++head;
  }

  // ---- epilogue: dK (times the scale) and dV through the K and V tiles, then stored. Keys no
  // query row sees still get their zeros written, and so do the rows past kv_lens up to the
  // sequence's capacity (cap_k): none of the next sequence's (varlen) rows.
  cp_async_wait<0>();  // with no Q block, the K/V copies may still be in flight
  __syncthreads();
  scale_tile(dk, p.scale);
  stage_tile<kStrideQK>(sK, dk, key_row0, 0, lane);
  stage_tile<kStrideV>(sV, dv, key_row0, 0, lane);
  __syncthreads();
  // cap_k read again here rather than kept from the start: live across the loop, it cost ptxas
  // spills at D = 128 with every feature on.
  const int rows_k = min(kBlockN, sequence_of(f, blockIdx.z).cap_k - n0);
  if (rows_k <= 0) return;
  store_tile<Elem, kBlockN, kHeadDimQK, kStrideQK, kVec, kThreads>(
      row_at(static_cast<Elem*>(p.dk), p.dk_stride, seq.batch, seq.k_start + n0, kv_head), p.dk_stride[1],
      p.dk_stride[3], sK, rows_k, tid);
  store_tile<Elem, kBlockN, kHeadDimV, kStrideV, kVec, kThreads>(
      row_at(static_cast<Elem*>(p.dv), p.dv_stride, seq.batch, seq.k_start + n0, kv_head), p.dv_stride[1],
      p.dv_stride[3], sV, rows_k, tid);
}
