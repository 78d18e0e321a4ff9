// bwd_sm90 main kernel, first cut (docs/design/hopper_backward.md, step 1): a CTA of one MMA
// warpgroup owns kBlockN keys of one head (K and V stay in shared memory) and walks every Q block
// of kBlockM rows:
//   S^T = K.Q^T and dP^T = V.dO^T   wgmma, both operands from shared memory (keys are the rows,
//                                   so P^T and dS^T come out in the A-operand layout dV and dK need)
//   P^T = exp2(S^T scale - LSE), dS^T = P^T (dP^T - D)       per column (query): preprocess's rows
//   dV += P^T.dO, dK += dS^T.Q      wgmma with A from registers, dO and Q read N-major
//   dQ = dS.K                       dS through shared memory (queries as rows), added into the fp32
//                                   accumulator with vector reductions in bwd_sm80's slot order
// then writes dK (times the softmax scale) and dV. Q blocks load with cp.async, one at a time:
// the producer warp, TMA rings and the second warpgroup come in the next steps.
//
// Rows past the sequence: K/V rows past len_k are zeros (S = 0 there, and their dK/dV rows are
// never stored; zero K rows add nothing to dQ); Q/dO rows past len_q are zeros, and preprocess
// gave them LSE +inf (P = 0) and D = 0, so they add nothing.
#include "bwd_sm80/elem.cuh"
#include "bwd_sm90/config.cuh"
#include "common/sequence.cuh"
#include "common/sm90/async_copy.cuh"

namespace fj::bwd90 {

using namespace fj::sm90;

// Rows [0, kRows) of a 16-bit tile with kCols contiguous columns into the swizzled atom layout
// (layout.cuh); rows at or past rows_valid (>= 1) become zeros.
template <int kRows, int kCols>
FJ_DEVICE void load_tile(unsigned char* tile, const Elem* src, long long row_stride, int rows_valid, int tid) {
  constexpr int kChunksPerRow = kCols / 8;  // 16-byte chunks
  constexpr int kAtomChunks = kAtomBytes / 16;
#pragma unroll 4
  for (int i = tid; i < kRows * kChunksPerRow; i += kMmaThreads) {
    const int row = i / kChunksPerRow, chunk = i % kChunksPerRow;
    const int atom = chunk / kAtomChunks, c = chunk % kAtomChunks;
    unsigned char* dst = tile + (atom * kRows + row) * kAtomBytes + (c ^ (row % 8)) * 16;
    const bool valid = row < rows_valid;
    cp_async<16>(dst, src + (valid ? row : 0) * row_stride + chunk * 8, valid ? 16 : 0);
  }
}

// Step k (16 elements of K) of an operand read K-major from a tile of kRows rows (its M or N).
template <int kRows>
FJ_DEVICE unsigned long long k_major(const unsigned char* tile, int k) {
  const unsigned long long d0 = matrix_descriptor(tile, 16, kGroupStride, Swizzle::b128);
  return advance_descriptor(d0, unsigned(k / kStepsPerAtom * kRows * kAtomBytes + k % kStepsPerAtom * kWgmmaK * 2));
}

// Step k (16 rows, which are K) of an operand read N-major from a tile of kRows rows: N runs
// along the atoms, kRows * 128 bytes apart.
template <int kRows>
FJ_DEVICE unsigned long long n_major(const unsigned char* tile, int k) {
  const unsigned long long d0 = matrix_descriptor(tile, unsigned(kRows * kAtomBytes), kGroupStride, Swizzle::b128);
  return advance_descriptor(d0, unsigned(k * kWgmmaK * kAtomBytes));
}

FJ_DEVICE unsigned pack(float lo, float hi) { return kBf16 ? pack_bf16x2(lo, hi) : pack_f16x2(lo, hi); }

FJ_DEVICE void st_shared_u16(unsigned addr, unsigned short v) {
  asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(addr), "h"(v) : "memory");
}

template <int kRegs>
FJ_DEVICE void fence_acc(float (&r)[kRegs]) {
#pragma unroll
  for (int i = 0; i < kRegs; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// P^T and dS^T of one Q block from S^T and dP^T (in place of them), packed per 16 queries as
// wgmma's register A fragments (n8 tiles 2kk and 2kk + 1 of the accumulators). Column c of the
// accumulators is query c of the block: n8 tile j holds columns 8j + 2 (lane % 4) + {0, 1}.
FJ_DEVICE void probs_and_grads(float (&st)[kBlockM / 2], float (&dpt)[kBlockM / 2], const float* lse, const float* dsum,
                               float score_scale, int lane, unsigned (&pa)[kBlockM / 16][4],
                               unsigned (&da)[kBlockM / 16][4]) {
  const int c0 = 2 * (lane % 4);
#pragma unroll
  for (int j = 0; j < kBlockM / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = 8 * j + c0 + (e & 1);
      float& s = st[4 * j + e];
      float& d = dpt[4 * j + e];
      s = exp2_approx(fmaf(s, score_scale, -lse[c]));
      d = s * (d - dsum[c]);
    }
#pragma unroll
  for (int kk = 0; kk < kBlockM / 16; ++kk) {
    const float *lo = st + 8 * kk, *hi = lo + 4, *dlo = dpt + 8 * kk, *dhi = dlo + 4;
    pa[kk][0] = pack(lo[0], lo[1]), pa[kk][1] = pack(lo[2], lo[3]), pa[kk][2] = pack(hi[0], hi[1]), pa[kk][3] = pack(hi[2], hi[3]);
    da[kk][0] = pack(dlo[0], dlo[1]), da[kk][1] = pack(dlo[2], dlo[3]), da[kk][2] = pack(dhi[0], dhi[1]),
    da[kk][3] = pack(dhi[2], dhi[3]);
  }
}

// dS with queries as rows (dQ = dS.K's A operand, K-major) from dS^T's A fragments: element
// (key r, query c) at row c, key column r of the swizzled atoms of 64 keys.
FJ_DEVICE void store_ds(unsigned char* ds_tile, const unsigned (&da)[kBlockM / 16][4], int warp, int lane) {
  const unsigned base = smem_addr(ds_tile);
#pragma unroll
  for (int kk = 0; kk < kBlockM / 16; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = 16 * warp + lane / 4 + 8 * (i & 1);                // key: A fragment rows g, g + 8
        const int c = 16 * kk + 8 * (i >> 1) + 2 * (lane % 4) + half;   // query: columns 2t, 2t + 8
        const unsigned at = unsigned(r / kAtomElems * kBlockM + c) * kAtomBytes +
                            unsigned(((r % kAtomElems) / 8) ^ (c % 8)) * 16 + unsigned(r % 8) * 2;
        st_shared_u16(base + at, static_cast<unsigned short>(da[kk][i] >> (16 * half)));
      }
}

// accum (the Q block's fp32 dQ) += scale * this thread's 64-column chunk ch of dS.K. A thread's
// 4 values of an n8 tile (rows g and g + 8, columns 2t and 2t + 1 of its warp's 16 rows) are one
// m16n8 fragment of bwd_sm80's 4-warp dQ split, which convert reads back: one vector reduction.
FJ_DEVICE void add_dq_chunk(float* accum, const float (&dq)[kDqChunk / 2], int ch, int warp, int lane, float scale) {
  using namespace fj::bwd;
  const int r0 = 16 * warp;
  const int warp_m = r0 / kDqRows, mt = r0 % kDqRows / 16;
#pragma unroll
  for (int j = 0; j < kDqChunk / 8; ++j) {
    const int c0 = ch * kDqChunk + 8 * j;
    const int warp_n = c0 / kDqCols, nt = c0 % kDqCols / 8;
    const int owner = (warp_n * kDqWarpsM + warp_m) * 32 + lane;
    red_add_v4(accum + dq_slot(mt * kDqNTiles + nt, 0, owner), dq[4 * j] * scale, dq[4 * j + 1] * scale,
               dq[4 * j + 2] * scale, dq[4 * j + 3] * scale);
  }
}

// Rows of dK or dV (keys n0 + 16 warp + g, + 8) from an accumulator of kCols columns, times x.
template <int kCols>
FJ_DEVICE void store_rows(Elem* out, const long long (&stride)[4], const Sequence& seq, int head, int n0,
                          const float (&acc)[kCols / 2], float x, int warp, int lane) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int key = n0 + 16 * warp + lane / 4 + 8 * h;
    if (key >= seq.len_k) continue;
    Elem* row = fj::bwd::row_at(out, stride, seq.batch, seq.k_start + key, head) + 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j)
      *reinterpret_cast<unsigned*>(row + 8 * j) = pack(acc[4 * j + 2 * h] * x, acc[4 * j + 2 * h + 1] * x);
  }
}

}  // namespace fj::bwd90

extern "C" __global__ void __launch_bounds__(fj::bwd90::kMmaThreads, 1)
flashjit_bwd_main(const __grid_constant__ FjBackwardParams p) {
  using namespace fj;
  using namespace fj::bwd90;
  using fj::bwd::row_at;
  const FjAttentionParams& f = p.fwd;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((fj_layout::kBwd90Align - smem_addr(smem_raw) % fj_layout::kBwd90Align) %
                                    fj_layout::kBwd90Align);
  unsigned char* k_tile = smem + kLayout.k;
  unsigned char* v_tile = smem + kLayout.v;
  unsigned char* q_tile = smem + kLayout.q;
  unsigned char* do_tile = smem + kLayout.dout;
  unsigned char* ds_tile = smem + kLayout.ds;
  float* lse = reinterpret_cast<float*>(smem + kLayout.lse);
  float* dsum = reinterpret_cast<float*>(smem + kLayout.dpsum);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int n0 = blockIdx.x * kBlockN, head = blockIdx.y;
  const Sequence seq = sequence_of(f, blockIdx.z);
  const int keys = seq.len_k - n0;  // >= 1: the grid covers the keys
  load_tile<kBlockN, kHeadDimQK>(k_tile, row_at(static_cast<const Elem*>(f.k), f.k_stride, seq.batch, seq.k_start + n0, head),
                                 f.k_stride[1], keys, tid);
  load_tile<kBlockN, kHeadDimV>(v_tile, row_at(static_cast<const Elem*>(f.v), f.v_stride, seq.batch, seq.k_start + n0, head),
                                f.v_stride[1], keys, tid);
  cp_async_commit();

  float dk[kDQK / 2], dv[kDV / 2];
#pragma unroll
  for (int i = 0; i < kDQK / 2; ++i) dk[i] = 0.f;
#pragma unroll
  for (int i = 0; i < kDV / 2; ++i) dv[i] = 0.f;
  const long long ws_head = (static_cast<long long>(blockIdx.z) * f.heads_q + head) * p.seqlen_q_rounded;
  const int m_blocks = (seq.len_q + kBlockM - 1) / kBlockM;
  for (int mb = 0; mb < m_blocks; ++mb) {
    const int m0 = mb * kBlockM;
    __syncthreads();  // every warp has waited for the last Q block's wgmmas (their shared reads)
    load_tile<kBlockM, kHeadDimQK>(q_tile, row_at(static_cast<const Elem*>(f.q), f.q_stride, seq.batch, seq.q_start + m0, head),
                                   f.q_stride[1], seq.len_q - m0, tid);
    load_tile<kBlockM, kHeadDimV>(do_tile, row_at(static_cast<const Elem*>(p.dout), p.dout_stride, seq.batch, seq.q_start + m0, head),
                                  p.dout_stride[1], seq.len_q - m0, tid);
    cp_async_commit();
    if (tid < kBlockM) {  // preprocess wrote every row of the block, in row_stat_slot order
      lse[tid] = p.lse_log2[ws_head + m0 + fj::bwd::row_stat_slot(tid)];
      dsum[tid] = p.dpsum[ws_head + m0 + fj::bwd::row_stat_slot(tid)];
    }
    cp_async_wait<0>();
    fence_async_shared();  // the copies' and stores' bytes, to wgmma's reads (the async proxy)
    __syncthreads();

    float st[kBlockM / 2], dpt[kBlockM / 2];
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < kDQK / kWgmmaK; ++k)
      Wgmma<kBlockM>::template ss<kBf16, 0>(st, k_major<kBlockN>(k_tile, k), k_major<kBlockM>(q_tile, k), k > 0 ? 1 : 0);
#pragma unroll
    for (int k = 0; k < kDV / kWgmmaK; ++k)
      Wgmma<kBlockM>::template ss<kBf16, 0>(dpt, k_major<kBlockN>(v_tile, k), k_major<kBlockM>(do_tile, k), k > 0 ? 1 : 0);
    wgmma_commit();
    wgmma_wait<0>();
    fence_acc(st);
    fence_acc(dpt);

    unsigned pa[kBlockM / 16][4], da[kBlockM / 16][4];
    probs_and_grads(st, dpt, lse, dsum, f.scale_log2, lane, pa, da);
    store_ds(ds_tile, da, warp, lane);
    fence_async_shared();
    __syncthreads();

    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk)
      Wgmma<kDV>::template rs<kBf16, 1>(dv, pa[kk], n_major<kBlockM>(do_tile, kk), 1);
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk)
      Wgmma<kDQK>::template rs<kBf16, 1>(dk, da[kk], n_major<kBlockM>(q_tile, kk), 1);
    wgmma_commit();
    float* accum = p.dq_accum + (ws_head + m0) * kDQK;
#pragma unroll
    for (int ch = 0; ch < kDQK / kDqChunk; ++ch) {
      float dq[kDqChunk / 2];
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < kBlockN / kWgmmaK; ++k)
        Wgmma<kDqChunk>::template ss<kBf16, 1>(dq, k_major<kBlockM>(ds_tile, k),
                                               n_major<kBlockN>(k_tile + ch * kBlockN * kAtomBytes, k), k > 0 ? 1 : 0);
      wgmma_commit();
      wgmma_wait<0>();
      fence_acc(dq);
      add_dq_chunk(accum, dq, ch, warp, lane, p.scale);
    }
  }
  fence_acc(dk);
  fence_acc(dv);
  store_rows<kDQK>(static_cast<Elem*>(p.dk), p.dk_stride, seq, head, n0, dk, p.scale, warp, lane);
  store_rows<kDV>(static_cast<Elem*>(p.dv), p.dv_stride, seq, head, n0, dv, 1.f, warp, lane);
}
