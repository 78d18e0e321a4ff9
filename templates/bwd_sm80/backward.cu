// bwd_sm80 main kernel: FlashAttention-2's backward on sm_80 tensor cores (mma.sync, ldmatrix,
// cp.async). One CTA per (BLOCK_N keys, head, batch) keeps its K and V tiles in shared memory
// and dK, dV in registers, and walks the Q blocks that see any of its keys. For each Q block
// (BLOCK_M rows of Q and dO, their LSE and D):
//   key phase (each warp: its BLOCK_N / warps keys against all BLOCK_M rows, transposed, so
//   every product is one of common/warp_gemm_sm80.cuh's; see bwd_sm80/gemm.cuh):
//     S^T = K Q^T;  P^T = exp2(S^T * scale_log2 - LSE * log2 e)  (masked entries 0)
//     dP^T = V dO^T;  dV += P^T dO;  dS^T = P^T * (dP^T - D);  dK += dS^T Q
//   query phase (each warp: its BLOCK_M / warps rows against all BLOCK_N keys):
//     dS goes through shared memory (fp32), dQ_part = dS K, and every element is added to the
//     fp32 dQ accumulator with an atomic (scaled by the softmax scale).
// At the end dK (times the scale) and dV are staged through the K and V tiles and stored.
//
// Not yet covered (first cut; docs/design/backward.md has the plan for each):
//   - GQA/MQA (the loop over the q-heads of a KV head's group), varlen, kv_lens, paged K/V;
//   - sliding window, softcap (tanh derivative), ALiBi, sinks (d_sinks);
//   - fp32 inputs (tf32 / exact-fp32 fragments) - 16-bit only;
//   - deterministic mode (dQ atomics land in any order);
//   - speed: Q/dO are not double-buffered (each Q block's loads are waited for), the mask is a
//     per-element check on edge tiles, and dQ atomics go straight from registers (FA2 stages
//     them through shared memory for coalescing).
#include "bwd_sm80/elem.cuh"
#include "bwd_sm80/gemm.cuh"
#include "bwd_sm80/tile_walk.cuh"
#include "common/row_total.cuh"
#include "common/sequence.cuh"
#include "common/tile_io.cuh"
#include "common/tile_verbs.cuh"

namespace fj::bwd {

// Writes a register tile (m16n8 C layout; rows row0 + mt*16 + g (+8), columns 2t (+1) of every
// n8 tile) into a 16-bit shared tile of row stride kStride, as pairs.
template <int kStride, int kMTiles, int kNTiles>
FJ_DEVICE void stage_tile16(Elem* smem, const float (&acc)[kMTiles][kNTiles][4], int row0, int lane) {
  const Frag f{lane};
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        Elem* dst = smem + (row0 + mt * 16 + h * 8 + f.g()) * kStride + nt * 8 + 2 * f.t();
        *reinterpret_cast<unsigned*>(dst) = GemmS::pack16(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
      }
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
  const int head = blockIdx.y;
  const int kv_head = head;  // no GQA in the first cut
  const Sequence seq = sequence_of<kVarlen, kKvLens, kPaged>(f, blockIdx.z);
  const long long ws_head = (static_cast<long long>(blockIdx.z) * f.heads_q + head) * p.seqlen_q_rounded;
  const int key_row0 = warp * kKeyRowsPerWarp;  // this warp's keys in the key phase, within the block
  const int q_row0 = warp * kQRowsPerWarp;      // this warp's rows in the query phase, within a Q block

  int q_lo, q_hi;
  query_range(seq, n0, q_lo, q_hi);
  const int first_m = q_lo / kBlockM;
  const int end_m = (q_hi + kBlockM - 1) / kBlockM;

  // The head dims' padding columns, which the mma steps read but no copy writes; the copies
  // below never touch them, so once is enough.
  zero_columns<Elem, kBlockN, kHeadDimQK, kDQK, kStrideQK, kThreads>(sK, tid);
  zero_columns<Elem, kBlockN, kHeadDimV, kDV, kStrideV, kThreads>(sV, tid);
  zero_columns<Elem, kBlockM, kHeadDimQK, kDQK, kStrideQK, kThreads>(sQ, tid);
  zero_columns<Elem, kBlockM, kHeadDimV, kDV, kStrideV, kThreads>(sdO, tid);

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

  for (int m_block = first_m; m_block < end_m; ++m_block) {
    const int m0 = m_block * kBlockM;
    const int rows_q = seq.len_q - m0;
    load_tile_async<Elem, kBlockM, kHeadDimQK, kStrideQK, kVec, kThreads>(
        sQ, row_at(static_cast<const Elem*>(f.q), f.q_stride, seq.batch, seq.q_start + m0, head), f.q_stride[1],
        f.q_stride[3], rows_q, tid);
    load_tile_async<Elem, kBlockM, kHeadDimV, kStrideV, kVec, kThreads>(
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

    // ---- key phase: S^T, P^T, dP^T, dV, dS^T, dK for this warp's keys.
    float st[kKeyTiles][kNTilesM][4];
    zero_tile(st);
    GemmS::gemm_qk16<false>(st, nullptr, sK, sQ, key_row0, lane);
    if (tile_needs_mask(n0, m0, seq)) mask_transposed(st, n0 + key_row0, m0, seq, lane);
#pragma unroll
    for (int kt = 0; kt < kKeyTiles; ++kt)
#pragma unroll
      for (int nt = 0; nt < kNTilesM; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          st[kt][nt][i] = exp2_approx(fmaf(st[kt][nt][i], f.scale_log2, -sLse[nt * 8 + 2 * fr.t() + (i & 1)]));

    float dpt[kKeyTiles][kNTilesM][4];
    zero_tile(dpt);
    GemmDP::gemm_qk16<false>(dpt, nullptr, sV, sdO, key_row0, lane);
    GemmS::gemm_pv16(dv, st, sdO, lane);  // P^T rounds to 16 bits here, as FA2's P does
#pragma unroll
    for (int kt = 0; kt < kKeyTiles; ++kt)
#pragma unroll
      for (int nt = 0; nt < kNTilesM; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          dpt[kt][nt][i] = st[kt][nt][i] * (dpt[kt][nt][i] - sD[nt * 8 + 2 * fr.t() + (i & 1)]);
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
    float ds[kQTiles][kNTilesN][4];
#pragma unroll
    for (int qt = 0; qt < kQTiles; ++qt)
#pragma unroll
      for (int nt = 0; nt < kNTilesN; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          ds[qt][nt][i] = sDs[(q_row0 + qt * 16 + fr.g() + (i / 2) * 8) * kStrideDs + nt * 8 + 2 * fr.t() + (i & 1)];
    float dq[kQTiles][kNTilesQK][4];
    zero_tile(dq);
    GemmDQ::gemm_pv16(dq, ds, sK, lane);
#pragma unroll
    for (int qt = 0; qt < kQTiles; ++qt)
#pragma unroll
      for (int nt = 0; nt < kNTilesQK; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = q_row0 + qt * 16 + fr.g() + (i / 2) * 8;
          const int c = nt * 8 + 2 * fr.t() + (i & 1);
          if (r < rows_q && c < kHeadDimQK) atomicAdd(p.dq_accum + (ws_head + m0 + r) * kDQK + c, dq[qt][nt][i] * p.scale);
        }
    __syncthreads();  // the next Q block overwrites sQ, sdO, sDs, sLse and sD
  }

  // ---- epilogue: dK (times the scale) and dV through the K and V tiles, then stored. Keys no
  // query row sees still get their zeros written.
  cp_async_wait<0>();  // with no Q block, the K/V copies may still be in flight
  __syncthreads();
  scale_tile(dk, p.scale);
  stage_tile16<kStrideQK>(sK, dk, key_row0, lane);
  stage_tile16<kStrideV>(sV, dv, key_row0, lane);
  __syncthreads();
  const int rows_k = min(kBlockN, seq.len_k - n0);
  store_tile<Elem, kBlockN, kHeadDimQK, kStrideQK, kVec, kThreads>(
      row_at(static_cast<Elem*>(p.dk), p.dk_stride, seq.batch, seq.k_start + n0, kv_head), p.dk_stride[1],
      p.dk_stride[3], sK, rows_k, tid);
  store_tile<Elem, kBlockN, kHeadDimV, kStrideV, kVec, kThreads>(
      row_at(static_cast<Elem*>(p.dv), p.dv_stride, seq.batch, seq.k_start + n0, kv_head), p.dv_stride[1],
      p.dv_stride[3], sV, rows_k, tid);
}
