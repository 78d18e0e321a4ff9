// fa3_sm90: attention forward on Hopper's instructions, warp-specialized.
//
// Warpgroup 0 is the producer: it gives most of its registers away (setmaxnreg) and one thread
// streams Q once and K and V tile by tile through TMA into rings of kStages stages. Each stage
// has a "full" mbarrier (the copy's bytes landed) and an "empty" one (every consumer warp is done
// with it), separately for K and V, so K of a later tile can land while V of an earlier one is
// still read.
//
// Warpgroups 1..kWarpgroups are consumers of 64 query rows each. Per tile j a consumer issues
// S_j = Q.K_j^T and, behind it, O += P_{j-1}.V_{j-1} (P from registers): the softmax of tile j
// then runs while the tensor cores still accumulate tile j - 1 (the intra-warpgroup pipeline).
// With two or more consumers, named barriers make them take turns issuing their GEMMs, so one's
// softmax overlaps the others' GEMMs (ping-pong).
//
// Semantics: causal and sliding windows skip the key tiles no row of the CTA sees and mask the
// tiles they cut; softcap and ALiBi transform every score; sinks join the final denominator;
// varlen and kv_lens place and shorten each sequence (TMA boxes may reach into the neighbouring
// sequence's rows: those keys are masked, their V rows zeroed, and those query rows never
// stored); paged caches load each tile box by box from the pages the block table names.
//
// A CTA walks one tile or, on a persistent grid, many (fa3_sm90/tile_walk.cuh): the barriers'
// rounds then run on across tiles, Q's buffer is refilled once every consumer has issued its
// last Q.K^T of the previous tile, and the consumers' turns at the tensor cores continue from
// one tile to the next.
//
// The output leaves through a swizzled shared-memory tile per consumer and a TMA store, which
// clips rows past the sequence and columns past the head dim; varlen (whose sequences share the
// tensor's rows) and layouts without room for the tiles store from registers instead.
#include "common/attention_params.cuh"
#include "common/online_softmax.cuh"
#include "common/score_tile.cuh"
#include "common/sequence.cuh"
#include "common/sm90/async_copy.cuh"
#include "common/sm90/wgmma.cuh"
#include "common/tile_verbs.cuh"
#include "fa3_sm90/config.cuh"
#include "fa3_sm90/epilogue.cuh"
#include "fa3_sm90/params.cuh"
#include "fa3_sm90/pipeline.cuh"
#include "fa3_sm90/producer.cuh"
#include "fa3_sm90/rows.cuh"
#include "fa3_sm90/tile_walk.cuh"

namespace fj::fa3 {

using namespace fj::sm90;

// S = Q.K^T over the head dim: Q and K read K-major from their swizzled tiles; every 4 steps of
// 16 elements (32 bytes) the next 128-byte atom. Each step's descriptors are the tiles' first
// ones advanced by a compile-time offset: rebuilding each took ~5 dependent uniform instructions
// (D = 128's GEMM block: 271 instructions before, 151 after; speed within the runs' spread).
FJ_DEVICE void issue_qk(float (&s)[kBlockN / 2], const unsigned char* q_tile, const unsigned char* k_tile) {
  const unsigned long long dq0 = matrix_descriptor(q_tile, 16, kGroupStride, Swizzle::b128);
  const unsigned long long dk0 = matrix_descriptor(k_tile, 16, kGroupStride, Swizzle::b128);
#pragma unroll
  for (int k = 0; k < kStepsQK; ++k) {
    const int atom = k / kStepsPerAtom, within = (k % kStepsPerAtom) * kWgmmaK * 2;
    const unsigned long long dq = advance_descriptor(dq0, unsigned(atom * kRowsPerWg * kAtomBytes + within));
    const unsigned long long dk = advance_descriptor(dk0, unsigned(atom * kBlockN * kAtomBytes + within));
    Wgmma<kBlockN>::template ss<kBf16, 0>(s, dq, dk, k > 0 ? 1 : 0);
  }
}

// O += P.V: per 16 keys (16 rows of the V tile, read N-major; the head dim crosses atoms every
// kBlockN rows' worth of bytes), P's m16n8k16 A fragments.
FJ_DEVICE void issue_pv(float (&o)[kDV / 2], const unsigned (&pa)[kStepsPV][4], const unsigned char* v_tile) {
  const unsigned long long dv0 =
      matrix_descriptor(v_tile, unsigned(kBlockN * kAtomBytes), kGroupStride, Swizzle::b128);
#pragma unroll
  for (int kk = 0; kk < kStepsPV; ++kk)
    Wgmma<kDV>::template rs<kBf16, 1>(o, pa[kk], advance_descriptor(dv0, unsigned(kk * kWgmmaK * kAtomBytes)), 1);
}

// One wgmma group each: issued, then committed, so gemm_wait can count them.
FJ_DEVICE void qk_async(float (&s)[kBlockN / 2], const unsigned char* q_tile, const unsigned char* k_tile) {
  issue_qk(s, q_tile, k_tile);
  wgmma_commit();
}
FJ_DEVICE void pv_async(float (&o)[kDV / 2], const unsigned (&pa)[kStepsPV][4], const unsigned char* v_tile) {
  issue_pv(o, pa, v_tile);
  wgmma_commit();
}

// At most kPending wgmma groups still run; acc (written by the retired ones) may be read.
template <int kPending, int kRegs>
FJ_DEVICE void gemm_wait(float (&acc)[kRegs]) {
  wgmma_wait<kPending>();
  fence_registers(acc);
}

// The consumers' turns at the tensor cores, round robin (one consumer: nothing to order), over
// every work tile of the CTA. Consumer c waits on named barrier kTurnBarrier + c, which the
// consumer before it completes by passing; the last one's first pass is made before its first
// turn, so consumer 0 goes first (and a CTA without keys to read passes nothing).
struct Turns {
  int c;
  bool started = false;
  FJ_DEVICE explicit Turns(int consumer) : c(consumer) {}
  FJ_DEVICE void take() {
    if (kConsumers == 1) return;
    if (!started && c == kConsumers - 1) named_barrier_arrive(kTurnBarrier, kTurnThreads);
    started = true;
    named_barrier_sync(kTurnBarrier + c, kTurnThreads);
  }
  // After the CTA's last GEMMs the last consumer has no one left to wait for its pass.
  FJ_DEVICE void pass(bool last) const {
    if (kConsumers > 1 && !(last && c == kConsumers - 1))
      named_barrier_arrive(kTurnBarrier + (c + 1) % kConsumers, kTurnThreads);
  }
};


// P as wgmma's register A operand: per 16 keys, the m16n8k16 A fragment of this warp's rows
// (n8 tiles 2kk and 2kk + 1 of the S accumulator).
FJ_DEVICE void pack_probabilities(const float (&s)[kBlockN / 2], unsigned (&pa)[kStepsPV][4]) {
#pragma unroll
  for (int kk = 0; kk < kStepsPV; ++kk) {
    const float* lo = s + 8 * kk;
    const float* hi = lo + 4;
    pa[kk][0] = pack(lo[0], lo[1]);
    pa[kk][1] = pack(lo[2], lo[3]);
    pa[kk][2] = pack(hi[0], hi[1]);
    pa[kk][3] = pack(hi[2], hi[3]);
  }
}

// Zeroes rows [valid_rows, kBlockN) of a landed V tile (whole 128-byte rows of every atom, so the
// swizzle does not matter), then makes the writes visible to wgmma's reads of shared memory and
// waits for the warpgroup: wgmma is collective. Consumer 0 does it before its last P.V of a work
// tile; every other consumer issues that P.V after its turn, which comes after consumer 0's.
FJ_DEVICE void zero_v_tail(unsigned char* v_tile, int valid_rows) {
  constexpr int kChunksPerRow = kAtomBytes / 16;
  const int rows = kBlockN - valid_rows, chunks = rows * kChunksPerRow;
  for (int i = int(threadIdx.x % kWgThreads); i < kLayout.atoms_v * chunks; i += kWgThreads) {
    const int atom = i / chunks, r = valid_rows + i % chunks / kChunksPerRow, chunk = i % kChunksPerRow;
    store_shared_zero16(v_tile + (atom * kBlockN + r) * kAtomBytes + chunk * 16);
  }
  fence_async_shared();
  named_barrier_sync(kEpilogueBarrier, kWgThreads);
}

// P.V_{j-1}'s end: waited for only after the softmax that ran under it (see kSoftmaxUnderPV),
// then O may be read and V_{j-1}'s stage goes back to the producer.
FJ_DEVICE void retire_pv(float (&o)[kDV / 2], const Softmax& sm, const KvStages& kv, int stage) {
  if constexpr (kSoftmaxUnderPV)
    wgmma_wait_after<0>(sm.row_sum[0][0] + sm.row_sum[0][1]);
  else
    wgmma_wait<0>();
  fence_registers(o);
  kv.release_v(stage);
}

// A consumer's walk over one work tile's key tiles: prologue S_0 alone, then per tile S_j with
// P_{j-1}.V_{j-1} behind it, then the last P.V. Each step is straight-line code: ptxas
// serializes wgmmas whose retirement it cannot follow through branches, so the mbarrier waits
// (loops) come before a step's first wgmma and nothing branches between its wgmmas. `last`: no
// work tile of this CTA follows, so the turns end here.
FJ_DEVICE void consume(const ConsumerRows& rows, unsigned char* smem, Barriers& bars, Turns& turns, const Ring& ring,
                       int q_round, bool last, int first_tile, int n_tiles, int lane, float (&o)[kDV / 2],
                       Softmax& sm) {
  const unsigned char* q_tile = smem + kLayout.q_offset + turns.c * kLayout.atoms_qk * kRowsPerWg * kAtomBytes;
  const KvStages kv{smem, bars, lane};
  mbarrier_wait(&bars.q_full, unsigned(q_round) & 1u);
  unsigned pa[kStepsPV][4];  // P of the previous tile, wgmma's register A operand
  {
    const int stage = ring.stage(0);
    float s[kBlockN / 2];
    turns.take();
    kv.wait_k(stage, ring.phase(0));
    wgmma_fence();
    qk_async(s, q_tile, kv.k_tile(stage));
    turns.pass(false);
    gemm_wait<0>(s);
    kv.release_k(stage);
    rows.prepare(s, first_tile * kBlockN);
    float alpha[1][2];
    sm.probabilities(c_tiles(s), rows.score_scale, alpha);  // O is 0: no rescale
    pack_probabilities(s, pa);
  }
  for (int j = 1; j < n_tiles; ++j) {
    const int stage = ring.stage(j), prev = ring.stage(j - 1);
    float s[kBlockN / 2];
    turns.take();
    kv.wait_k(stage, ring.phase(j));
    kv.wait_v(prev, ring.phase(j - 1));
    wgmma_fence();
    qk_async(s, q_tile, kv.k_tile(stage));
    pv_async(o, pa, kv.v_tile(prev));
    turns.pass(false);
    gemm_wait<1>(s);  // S_j; P_{j-1}.V_{j-1} may still run
    kv.release_k(stage);
    rows.prepare(s, (first_tile + j) * kBlockN);
    float alpha[1][2];
    if constexpr (kRescaleAmongExps) {
      // The first columns' exponentials under P.V_{j-1}, then O's multiplies among the rest.
      constexpr int kSplit = kNTilesS / 2;
      sm.move_max(c_tiles(s), rows.score_scale, alpha);
      sm.template exponentiate<0, kSplit>(c_tiles(s), rows.score_scale);
      retire_pv(o, sm, kv, prev);
      sm.rescale_all(c_tiles(o), alpha);
      sm.template exponentiate<kSplit, kNTilesS>(c_tiles(s), rows.score_scale);
    } else {
      const bool any_rescale = sm.probabilities(c_tiles(s), rows.score_scale, alpha);
      retire_pv(o, sm, kv, prev);
      sm.rescale(c_tiles(o), alpha, any_rescale);
    }
    pack_probabilities(s, pa);
  }
  {
    // Every Q.K^T of the tile has retired: the producer may bring the next tile's Q.
    release(&bars.q_empty, lane);
    const int stage = ring.stage(n_tiles - 1);
    unsigned char* v_tile = kv.v_tile(stage);
    if constexpr (kKeysEndInsideTensor) {
      const int valid_rows = rows.seq.len_k - (first_tile + n_tiles - 1) * kBlockN;
      if (turns.c == 0 && valid_rows < kBlockN) {
        kv.wait_v(stage, ring.phase(n_tiles - 1));
        zero_v_tail(v_tile, valid_rows);
      }
    }
    turns.take();
    kv.wait_v(stage, ring.phase(n_tiles - 1));
    wgmma_fence();
    pv_async(o, pa, v_tile);
    turns.pass(last);
    gemm_wait<0>(o);
    kv.release_v(stage);
  }
}


}  // namespace fj::fa3

extern "C" __global__ void __launch_bounds__(fj::fa3::kThreads, fj::fa3::kCtasPerSm)
flashjit_fa3_fwd(const __grid_constant__ FjFa3Params prm) {
  using namespace fj;
  using namespace fj::fa3;
  const FjAttentionParams& p = prm.attn;
  extern __shared__ unsigned char smem_raw[];
  // TMA's 128-byte swizzle repeats every 1024 bytes, and wgmma descriptors assume tiles start on
  // that boundary: round the dynamic shared memory up to it (the layout counts the slack).
  unsigned char* smem = smem_raw + ((fj_layout::kSwizzleAlign - smem_addr(smem_raw) % fj_layout::kSwizzleAlign) %
                                    fj_layout::kSwizzleAlign);
  __shared__ Barriers bars;

  const int tid = threadIdx.x, warp = (tid % kWgThreads) / 32, lane = tid % 32;
  // Read through a warp reduction (REDUX writes a uniform register), the warpgroup index is
  // warp-uniform to ptxas too: the Q tile's wgmma descriptors, which depend on it, then live in
  // uniform registers instead of being moved there (two R2UR and two moves) before every wgmma.
  // threadIdx.x / 128 alone, or through __shfl_sync, still gave the moves.
  const int wg = int(__reduce_min_sync(0xffffffffu, unsigned(tid / kWgThreads)));
  const TileWalk walk{p, prm.section_heads};

  if (tid == 0) {
    mbarrier_init(&bars.q_full, 1);
    mbarrier_init(&bars.q_empty, kConsumers * 4);  // one arrival per consumer warp
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(&bars.k_full[s], 1);
      mbarrier_init(&bars.v_full[s], 1);
      mbarrier_init(&bars.k_empty[s], kShareCtas * kConsumers * 4);  // every consumer warp of the cluster
      mbarrier_init(&bars.v_empty[s], kShareCtas * kConsumers * 4);
    }
    fence_barrier_init();
  }
  // The last CTA-wide barrier (the producer's idle warps leave below); in a cluster, no copy or
  // arrival reaches another CTA's barriers before they are initialized.
  if constexpr (kCluster > 1)
    cluster_sync();
  else
    __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<kProducerRegs>();
    if (warp == 0 && lane == 0) produce(prm, smem, bars, walk);
    return;
  }
  setmaxnreg_inc<kConsumerRegs>();
  Turns turns(wg - 1);  // this consumer's
  Ring ring;
  int q_round = 0;
  for (int k = 0, t = walk.tile(0); t < walk.total(); t = walk.tile(++k)) {
    const TileWork w = walk.work(t);
    if (!w.has_rows()) continue;
    const int wg_row0 = w.m0 + turns.c * kRowsPerWg;
    const int right = kWindow ? p.window_right : 0;
    ConsumerRows rows;
    rows.p = &p;
    rows.seq = w.seq;
    rows.row0 = wg_row0 + warp * 16 + lane / 4;
    rows.col0 = 2 * (lane % 4);
    rows.right = right;
    rows.edges = TileEdges::of(w.seq, wg_row0, wg_row0 + kRowsPerWg - 1, p.window_left, right);
    rows.alibi_slope = alibi_slope_of(p, w.b, w.head);
    rows.score_scale = kScoresInLog2 ? 1.f : p.scale_log2;

    float o[kDV / 2];
    zero_tile(o);
    Softmax sm;
    sm.init();
    if (w.n_tiles > 0) {
      const bool last = kConsumers == 1 || !walk.keys_after(k);
      consume(rows, smem, bars, turns, ring, q_round, last, w.first_tile, w.n_tiles, lane, o, sm);
      ring.it += w.n_tiles;
      ++q_round;
    }
    if constexpr (kStoreOViaTma)
      store_tile(prm, rows, o, sm, w.head, wg_row0, turns.c, warp, lane, smem);
    else
      store_rows(p, rows, o, sm, w.head, lane);
  }
  // The shared memory must outlive the last store's reads of it.
  if (kStoreOViaTma && warp == 0 && lane == 0) bulk_wait_group_read<0>();
}
