// bwd_sm90 main kernel (docs/design/hopper_backward.md, steps 1, 2, 5 and 6): a CTA of
// kMmaWarpgroups MMA warpgroups and a producer keeps kBlockN keys of K and V of one KV head in
// shared memory, 64 keys a warpgroup, and walks the Q blocks of kBlockM rows that see them, for
// every q-head of the KV head's group:
//   S^T = K.Q^T and dP^T = V.dO^T   wgmma, both operands from shared memory (keys are the rows,
//                                   so P^T and dS^T come out in the A-operand layout dV and dK need)
//   P^T = exp2(S^T scale - LSE), dS^T = P^T (dP^T - D)       per column (query): preprocess's rows
//   dV += P^T.dO, dK += dS^T.Q      wgmma with A from registers, dO and Q read N-major
//   dQ = dS.K                       dS of every warpgroup's keys through shared memory (queries as
//                                   rows); each warpgroup takes a share of dQ's columns over all
//                                   the keys and adds it into the fp32 accumulator with vector
//                                   reductions, in bwd_sm80's slot order
// then writes dK (times the softmax scale) and dV. A producer warpgroup after the MMA warpgroups
// issues every copy (cp.async, each thread's counted on an mbarrier: K and V once, then each Q
// block into one of two stages the MMA warps release when done with it) and gives its registers
// to the MMA warpgroups (setmaxnreg); the MMA warpgroups meet once a block, at a named barrier
// for dS (stored by transposing stmatrix into one of two buffers). Within a block the tensor
// cores run while the threads work: P^T's exponentials under dP^T's product, dQ's reductions
// under dV's and dK's (dQ is issued first).
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
// (layout.cuh); rows at or past rows_valid (>= 1) become zeros. Each thread keeps one 16-byte
// column chunk and steps down the rows by a multiple of 8, so its swizzled offset is fixed and
// each copy costs an address add and a compare (the per-copy index arithmetic of a plain strided
// loop was most of the main kernel's instructions).
template <int kRows, int kCols>
FJ_DEVICE void load_tile(unsigned char* tile, const Elem* src, long long row_stride, int rows_valid, int tid) {
  constexpr int kChunksPerRow = kCols / 8;  // 16-byte chunks
  constexpr int kAtomChunks = kAtomBytes / 16;
  constexpr int kRowStep = kLoaderThreads / kChunksPerRow;
  static_assert(kLoaderThreads % kChunksPerRow == 0 && kRows % kRowStep == 0 && kRowStep % 8 == 0,
                "every thread copies whole rows' chunks at one swizzle phase");
  const int chunk = tid % kChunksPerRow, row0 = tid / kChunksPerRow;
  const unsigned dst = smem_addr(tile) + unsigned((chunk / kAtomChunks * kRows + row0) * kAtomBytes + (chunk % kAtomChunks ^ row0 % 8) * 16);
  // The producer's registers are few: one running source row (rows past the valid ones read
  // nothing and stay at the last valid one), not a precomputed address per copy.
  const Elem* from = src + chunk * 8 + row0 * row_stride;
  const long long step = kRowStep * row_stride;
#pragma unroll 1
  for (int n = 0; n < kRows / kRowStep; ++n) {
    const bool valid = row0 + n * kRowStep < rows_valid;
    cp_async_16_at(dst + unsigned(n * kRowStep * kAtomBytes), valid ? from : src, valid ? 16 : 0);
    from += step;
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

// row_stat_slot(8j + r) = r * kStatRun + j: a Q block's LSE and D grouped by row % 8, each run
// of kStatRun floats followed by padding in a stage (layout.cuh).
static_assert(fj::bwd::kRowGroups == fj_layout::kBwd90StatRuns, "the statistics' runs are the n8 tiles' 8 columns");
constexpr int kStatRun = kBlockM / fj::bwd::kRowGroups;
constexpr int kStatRunStride = kStatRun + fj_layout::kBwd90StatRunPad / fj_layout::kBwd90StatBytes;
constexpr int kFloatsPer16B = 4;

// A thread's LSE or D values of one Q block: column c of the accumulators is query c of the block,
// n8 tile j holds columns 8j + 2 (lane % 4) + {0, 1}, so for each e of 2t + e (t = lane % 4) the
// thread's columns' statistics are run 2t + e: Stats::at[q][e] holds those of tiles 4q .. 4q + 3.
// The first kStatsAhead [q] (all at 64 queries, half at 128) are loaded before the wgmma wait
// that precedes their use, so their latency runs under the product (loaded after it, the first
// exponentials and dS waited on them); the rest as they are used, under the earlier ones' math
// (all ahead, or all at once after the wait, spilled at 128 queries with the causal mask).
constexpr int kStatsAhead = 2;
struct Stats {
  float4 at[kBlockM / 32][2];
  const float* from;
  int t2;  // 2 (lane % 4)
  FJ_DEVICE Stats(const float* stats, int lane) : from(stats), t2(2 * (lane % 4)) {
#pragma unroll
    for (int q = 0; q < kStatsAhead; ++q) load(q);
  }
  FJ_DEVICE void load(int q) {
#pragma unroll
    for (int e = 0; e < 2; ++e) at[q][e] = *reinterpret_cast<const float4*>(from + (t2 + e) * kStatRunStride + q * kFloatsPer16B);
  }
  // Before the first use of [q]: loads it unless it came ahead.
  FJ_DEVICE void need(int q) {
    if (q >= kStatsAhead) load(q);
  }
  FJ_DEVICE float of(int j, int e) const { return reinterpret_cast<const float*>(&at[j / 4][e & 1])[j % 4]; }
};

// P^T of one Q block from S^T, in place (run while dP^T's product still runs). kMasked (causal, a
// block the diagonal cuts): keys past query + diagonal get P = 0, where diagonal = key of this
// thread's row g minus query of its column 2t (sequence offsets folded in).
template <bool kMasked>
FJ_DEVICE void probabilities(float (&st)[kBlockM / 2], Stats& lse, float score_scale, int diagonal) {
#pragma unroll
  for (int j = 0; j < kBlockM / 8; ++j) {
    if (j % 4 == 0) lse.need(j / 4);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float& s = st[4 * j + e];
      // Key g + 8 (e >> 1) against query 8j + (e & 1) (both beyond the thread's own offsets).
      if (kMasked && 8 * (e >> 1) - 8 * j - (e & 1) > -diagonal) s = neg_inf();
      s = exp2_approx(fmaf(s, score_scale, -lse.of(j, e)));
    }
  }
}

// dS^T = P^T (dP^T - D), and both packed per 16 queries as wgmma's register A fragments (n8
// tiles 2kk and 2kk + 1 of the accumulators).
FJ_DEVICE void grads_and_pack(const float (&pt)[kBlockM / 2], float (&dpt)[kBlockM / 2], Stats& dsum,
                              unsigned (&pa)[kBlockM / 16][4], unsigned (&da)[kBlockM / 16][4]) {
  // 16 queries at a time, packed as soon as formed: P^T and dP^T die as they are packed (with dK
  // and dV held, forming every dS first spilled at head dim 128).
#pragma unroll
  for (int kk = 0; kk < kBlockM / 16; ++kk) {
    if (kk % 2 == 0) dsum.need(kk / 2);
#pragma unroll
    for (int j = 2 * kk; j < 2 * kk + 2; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float& d = dpt[4 * j + e];
        d = pt[4 * j + e] * (d - dsum.of(j, e));
      }
    const float *lo = pt + 8 * kk, *hi = lo + 4, *dlo = dpt + 8 * kk, *dhi = dlo + 4;
    pa[kk][0] = pack(lo[0], lo[1]), pa[kk][1] = pack(lo[2], lo[3]), pa[kk][2] = pack(hi[0], hi[1]), pa[kk][3] = pack(hi[2], hi[3]);
    da[kk][0] = pack(dlo[0], dlo[1]), da[kk][1] = pack(dlo[2], dlo[3]), da[kk][2] = pack(dhi[0], dhi[1]),
    da[kk][3] = pack(dhi[2], dhi[3]);
  }
}

// dS with queries as rows (dQ = dS.K's A operand, K-major) from dS^T's A fragments: element
// (key r, query c) at row c, key column r of the swizzled atoms of 64 keys. warp: of the CTA (its
// warpgroup's keys start at 64 per warpgroup).
FJ_DEVICE void store_ds(unsigned char* ds_tile, const unsigned (&da)[kBlockM / 16][4], int warp, int lane) {
  // da[kk][i] is the 8 x 8 matrix of keys 16 (warp % 4) + 8 (i & 1) + 0..7 by queries 16 kk +
  // 8 (i >> 1) + 0..7; stored transposed, its row r is query 16 kk + 8 (i >> 1) + r, and the row's
  // 8 keys are 16-byte chunk 2 (warp % 4) + (i & 1) of that query's row of the atom, at its
  // swizzled place (XOR query % 8 = r). One stmatrix per 16 queries.
  const int i = lane / 8, r = lane % 8;
  const unsigned addr = smem_addr(ds_tile) + unsigned((warp / 4) * kBlockM * kAtomBytes + (8 * (i >> 1) + r) * kAtomBytes +
                                                      ((2 * (warp % 4) + (i & 1)) ^ r) * 16);
#pragma unroll
  for (int kk = 0; kk < kBlockM / 16; ++kk) stmatrix_x4_trans(addr + unsigned(16 * kk * kAtomBytes), da[kk]);
}

// accum (the Q block's fp32 dQ) += scale * this warpgroup's dQ rows [row0, row0 + 64) and columns
// [col0, col0 + kDqChunk) of dS.K. A thread's 4 values of an n8 tile (rows g and g + 8, columns
// 2t and 2t + 1 of its warp's 16 rows) are one m16n8 fragment of bwd_sm80's 4-warp dQ split,
// which convert reads back: one vector reduction. wg_warp: the warp within its warpgroup.
FJ_DEVICE void add_dq_chunk(float* accum, const float (&dq)[kDqChunk / 2], int row0, int col0, int wg_warp, int lane,
                            float scale) {
  using namespace fj::bwd;
  const int r0 = row0 + 16 * wg_warp;
  const int warp_m = r0 / kDqRows, mt = r0 % kDqRows / 16;
#pragma unroll
  for (int j = 0; j < kDqChunk / 8; ++j) {
    const int c0 = col0 + 8 * j;
    const int warp_n = c0 / kDqCols, nt = c0 % kDqCols / 8;
    const int owner = (warp_n * kDqWarpsM + warp_m) * 32 + lane;
    red_add_v4(accum + dq_slot(mt * kDqNTiles + nt, 0, owner), dq[4 * j] * scale, dq[4 * j + 1] * scale,
               dq[4 * j + 2] * scale, dq[4 * j + 3] * scale);
  }
}

// One Q block's Q, dO, LSE and D into stage buffers (LSE and D as the workspace holds them, in
// row_stat_slot order: 16-byte copies).
FJ_DEVICE void load_q_block(unsigned char* stage, const FjBackwardParams& p, const Sequence& seq, int head,
                            long long ws_head, int m0, int tid) {
  const FjAttentionParams& f = p.fwd;
  using fj::bwd::row_at;
  load_tile<kBlockM, kHeadDimQK>(stage, row_at(static_cast<const Elem*>(f.q), f.q_stride, seq.batch, seq.q_start + m0, head),
                                 f.q_stride[1], seq.len_q - m0, tid);
  load_tile<kBlockM, kHeadDimV>(stage + (kLayout.dout - kLayout.q),
                                row_at(static_cast<const Elem*>(p.dout), p.dout_stride, seq.batch, seq.q_start + m0, head),
                                p.dout_stride[1], seq.len_q - m0, tid);
  // The workspace rows of a Q block start 64-byte aligned; chunk c is 16 bytes of run c / kChunks.
  constexpr int kChunks = kStatRun / kFloatsPer16B;
  for (int c = tid; c < kBlockM / kFloatsPer16B; c += kLoaderThreads) {
    const int at = (c / kChunks * kStatRunStride + c % kChunks * kFloatsPer16B) * fj_layout::kBwd90StatBytes;
    cp_async<16>(stage + (kLayout.lse - kLayout.q) + at, p.lse_log2 + ws_head + m0 + c * kFloatsPer16B, 16);
    cp_async<16>(stage + (kLayout.dpsum - kLayout.q) + at, p.dpsum + ws_head + m0 + c * kFloatsPer16B, 16);
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

extern "C" __global__ void __launch_bounds__(fj::bwd90::kThreads, 1)
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
  __shared__ Barriers bars;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  // Through a warp reduction the warpgroup is warp-uniform to ptxas (fa3_sm90/forward.cu): its
  // descriptors stay in uniform registers.
  const int wg = int(__reduce_min_sync(0xffffffffu, unsigned(tid / 128)));
  const int wg_warp = warp % 4;
  const int n0 = blockIdx.x * kBlockN, kv_head = blockIdx.y;
  const Sequence seq = sequence_of(f, blockIdx.z);
  // The Q blocks that see a key of this block: under the causal mask (bottom-right aligned, query
  // i sees keys up to i + offset) from the one holding query n0 - offset on; for every q-head of
  // the KV head's group (GQA), one after another: dK and dV sum over all of them.
  const int m_blocks = (seq.len_q + kBlockM - 1) / kBlockM;
  const int m_begin = kCausal ? min(max(0, n0 - seq.offset()) / kBlockM, m_blocks) : 0;
  const int m_count = m_blocks - m_begin;
  const int group = kGqa ? f.group : 1;
  const int blocks = group * m_count;
  // Block `it` of the walk is Q block m_begin + it % m_count of q-head kv_head * group + it /
  // m_count; both roles step through them in order, so a running pair replaces the divisions.
  struct Walk {
    int m0, head;
  };
  auto next = [&](Walk w) {
    return w.m0 + kBlockM < m_blocks * kBlockM ? Walk{w.m0 + kBlockM, w.head} : Walk{m_begin * kBlockM, w.head + 1};
  };
  const Walk first{m_begin * kBlockM, kv_head * group};
  auto ws_head_of = [&](int head) {
    return (static_cast<long long>(blockIdx.z) * f.heads_q + head) * p.seqlen_q_rounded;
  };
  auto stage_of = [&](int i) { return smem + kLayout.q + (i % kQStages) * kLayout.stage; };

  if (tid == 0) {
    mbarrier_init(&bars.kv_full, kLoaderThreads);
    for (int s = 0; s < kQStages; ++s) {
      mbarrier_init(&bars.full[s], kLoaderThreads);
      mbarrier_init(&bars.empty[s], kMmaThreads);
    }
    fence_barrier_init();
  }
  __syncthreads();  // the last CTA-wide barrier: the producer warpgroup leaves early

  if (wg == kMmaWarpgroups) {
    // The producer warpgroup: K and V once, then each Q block's Q, dO, LSE and D into the stage
    // the MMA warpgroups released, every thread's copies counted on the stage's full barrier.
    if constexpr (kMoveRegisters) setmaxnreg_dec<kProducerRegs>();
    const int ptid = tid - kMmaThreads;
    const int keys = seq.len_k - n0;  // >= 1: the grid covers the keys
    load_tile<kBlockN, kHeadDimQK>(k_tile, row_at(static_cast<const Elem*>(f.k), f.k_stride, seq.batch, seq.k_start + n0, kv_head),
                                   f.k_stride[1], keys, ptid);
    load_tile<kBlockN, kHeadDimV>(v_tile, row_at(static_cast<const Elem*>(f.v), f.v_stride, seq.batch, seq.k_start + n0, kv_head),
                                  f.v_stride[1], keys, ptid);
    cp_async_arrive_noinc(&bars.kv_full);
    Walk w = first;
    for (int it = 0; it < blocks; ++it, w = next(w)) {
      const int s = it % kQStages;
      if (it >= kQStages) mbarrier_wait(&bars.empty[s], unsigned(it / kQStages - 1) & 1u);
      load_q_block(stage_of(it), p, seq, w.head, ws_head_of(w.head), w.m0, ptid);
      cp_async_arrive_noinc(&bars.full[s]);
    }
    cp_async_wait_all();  // no copy outlives its thread
    return;
  }
  if constexpr (kMoveRegisters) setmaxnreg_inc<kMmaRegs>();

  // This warpgroup's keys: rows [64 wg, 64 wg + 64) of the K and V tiles.
  const unsigned char* k_rows = k_tile + wg * kWgKeys * kAtomBytes;
  const unsigned char* v_rows = v_tile + wg * kWgKeys * kAtomBytes;
  // This thread's row g of its warp's 16 keys, as a key of the sequence.
  const int my_key = n0 + wg * kWgKeys + 16 * wg_warp + lane / 4;
  float dk[kDQK / 2], dv[kDV / 2];
#pragma unroll
  for (int i = 0; i < kDQK / 2; ++i) dk[i] = 0.f;
#pragma unroll
  for (int i = 0; i < kDV / 2; ++i) dv[i] = 0.f;
  mbarrier_wait(&bars.kv_full, 0);
  Walk w = first;
  for (int it = 0; it < blocks; ++it, w = next(w)) {
    const int m0 = w.m0;
    const long long ws_head = ws_head_of(w.head);
    const unsigned char* stage = stage_of(it);
    const unsigned char* q_tile = stage;
    const unsigned char* do_tile = stage + (kLayout.dout - kLayout.q);
    const float* lse = reinterpret_cast<const float*>(stage + (kLayout.lse - kLayout.q));
    const float* dsum = reinterpret_cast<const float*>(stage + (kLayout.dpsum - kLayout.q));
    // Two dS buffers: a warpgroup writes this block's while the other may still read the last one's.
    unsigned char* ds_tile = smem + kLayout.ds + (it % kDsBuffers) * kLayout.ds_bytes;
    // The block's copies landed (and K's, V's before the first): the threads' writes, to wgmma's
    // reads (the async proxy).
    mbarrier_wait(&bars.full[it % kQStages], unsigned(it / kQStages) & 1u);
    fence_async_shared();

    // S^T and dP^T as two groups: P^T's exponentials run under dP^T's product.
    float st[kBlockM / 2], dpt[kBlockM / 2];
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < kDQK / kWgmmaK; ++k)
      Wgmma<kBlockM>::template ss<kBf16, 0>(st, k_major<kBlockN>(k_rows, k), k_major<kBlockM>(q_tile, k), k > 0 ? 1 : 0);
    wgmma_commit();
#pragma unroll
    for (int k = 0; k < kDV / kWgmmaK; ++k)
      Wgmma<kBlockM>::template ss<kBf16, 0>(dpt, k_major<kBlockN>(v_rows, k), k_major<kBlockM>(do_tile, k), k > 0 ? 1 : 0);
    wgmma_commit();
    Stats lse_regs(lse, lane);
    wgmma_wait<1>();
    fence_registers(st);
    // The diagonal cuts this block where its first query does not see the CTA's last key.
    const int diagonal = my_key - (m0 + 2 * (lane % 4) + seq.offset());
    if (kCausal && m0 + seq.offset() < n0 + kBlockN - 1)
      probabilities<true>(st, lse_regs, f.scale_log2, diagonal);
    else
      probabilities<false>(st, lse_regs, f.scale_log2, diagonal);
    Stats dsum_regs(dsum, lane);
    wgmma_wait<0>();
    fence_registers(dpt);
    unsigned pa[kBlockM / 16][4], da[kBlockM / 16][4];
    grads_and_pack(st, dpt, dsum_regs, pa, da);
    store_ds(ds_tile, da, warp, lane);
    fence_async_shared();
    named_barrier_sync(kDsBarrier, kMmaThreads);  // every warpgroup's dS: dQ reads all the keys

    // dQ first, so its reductions run under dV's and dK's products.
    float* accum = p.dq_accum + (ws_head + m0) * kDQK;
#pragma unroll
    for (int ch = 0; ch < kDqWgCols / kDqChunk; ++ch) {
      // Rows [row0, row0 + 64) and columns [col0, col0 + kDqChunk) of dQ: dS's rows start at row0
      // of its atoms (a multiple of 8: the swizzle's phase holds), K's N-major operand at col0 of its atom.
      const int row0 = kDqSplitRows ? wg * kDqWgRows : 0;
      const int col0 = (kDqSplitRows ? 0 : wg * kDqWgCols) + ch * kDqChunk;
      const unsigned char* ds_rows = ds_tile + row0 * kAtomBytes;
      const unsigned char* k_cols = k_tile + col0 / kAtomElems * kBlockN * kAtomBytes + col0 % kAtomElems * 2;
      float dq[kDqChunk / 2];
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < kBlockN / kWgmmaK; ++k)
        Wgmma<kDqChunk>::template ss<kBf16, 1>(dq, k_major<kBlockM>(ds_rows, k), n_major<kBlockN>(k_cols, k), k > 0 ? 1 : 0);
      wgmma_commit();
      if (ch == 0) {
#pragma unroll
        for (int kk = 0; kk < kBlockM / 16; ++kk)
          Wgmma<kDV>::template rs<kBf16, 1>(dv, pa[kk], n_major<kBlockM>(do_tile, kk), 1);
#pragma unroll
        for (int kk = 0; kk < kBlockM / 16; ++kk)
          Wgmma<kDQK>::template rs<kBf16, 1>(dk, da[kk], n_major<kBlockM>(q_tile, kk), 1);
        wgmma_commit();
        wgmma_wait<1>();
      } else {
        wgmma_wait<0>();
      }
      fence_registers(dq);
      add_dq_chunk(accum, dq, row0, col0, wg_warp, lane, p.scale);
    }
    // Waited for here, not at the next block's start: ptxas serializes wgmmas left in flight
    // across the loop's back edge. Then the stage goes back to the producer.
    wgmma_wait<0>();
    fence_registers(dk);
    fence_registers(dv);
    // Every thread arrives (not one a warp after __syncwarp): its own reads of the stage's LSE and
    // D are then ordered before the producer's next copies there in a way racecheck follows.
    mbarrier_arrive(&bars.empty[it % kQStages]);
  }
  store_rows<kDQK>(static_cast<Elem*>(p.dk), p.dk_stride, seq, kv_head, n0, dk, p.scale, warp, lane);
  store_rows<kDV>(static_cast<Elem*>(p.dv), p.dv_stride, seq, kv_head, n0, dv, 1.f, warp, lane);
}
