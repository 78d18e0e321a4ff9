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
#include "fa3_sm90/config.cuh"
#include "fa3_sm90/params.cuh"
#include "fa3_sm90/tile_walk.cuh"

namespace fj::fa3 {

using namespace fj::sm90;

using Softmax = OnlineSoftmax<1, kNTilesS, kNTilesO>;

struct Barriers {
  unsigned long long q_full, q_empty;
  unsigned long long k_full[kStages], v_full[kStages];
  unsigned long long k_empty[kStages], v_empty[kStages];
};

// One tensor's tile of keys [k0, k0 + kBlockN) (rows of the tensor) of one key/value head, atom by
// atom. In a cluster each CTA loads its share of the keys (boxes of kBlockN / kCluster rows) into
// every CTA's tile, and its barrier expects the whole tile: the others' shares land on it too.
template <int kAtoms>
FJ_DEVICE void load_tile(const FjTensorMap* map, unsigned char* dst, int k0, int kv_head, int batch,
                         unsigned long long* bar) {
  mbarrier_arrive_expect_tx(bar, unsigned(kAtoms * kBlockN * kAtomBytes));
  if constexpr (kShareCtas == 1) {
#pragma unroll
    for (int b = 0; b < kCluster; ++b)
#pragma unroll
      for (int a = 0; a < kAtoms; ++a) {
        const int r0 = b * (kBlockN / kCluster);
        tma_load_4d(dst + (a * kBlockN + r0) * kAtomBytes, map, a * fj_layout::kAtomElems, kv_head, k0 + r0, batch, bar);
      }
  } else {
    const int r0 = int(cluster_ctarank()) * (kBlockN / kCluster);
#pragma unroll
    for (int a = 0; a < kAtoms; ++a)
      tma_load_4d_multicast(dst + (a * kBlockN + r0) * kAtomBytes, map, a * fj_layout::kAtomElems, kv_head, k0 + r0,
                            batch, bar, kClusterMask);
  }
}

// The same tile from a paged pool: box by box of kv_box_rows keys, each from the page the block
// table names for it (entries clamped to the pools; keys past the table are masked, so their
// entry is clamped to its last). Box rows are a multiple of 8, so every box starts on the
// swizzle's 1024-byte repeat.
template <int kAtoms>
FJ_DEVICE void load_paged_tile(const FjTensorMap* map, unsigned char* dst, const FjAttentionParams& p,
                               const int* table_row, int box_rows, int n0, int kv_head, unsigned long long* bar) {
  mbarrier_arrive_expect_tx(bar, unsigned(kAtoms * kBlockN * kAtomBytes));
  for (int r = 0; r < kBlockN; r += box_rows) {
    const int key = n0 + r, entry = key / p.page_size;
    const int page = min(max(table_row[min(entry, p.max_pages - 1)], 0), p.num_pages - 1);
    const int slot = key - entry * p.page_size;
#pragma unroll
    for (int a = 0; a < kAtoms; ++a)
      tma_load_4d(dst + (a * kBlockN + r) * kAtomBytes, map, a * fj_layout::kAtomElems, kv_head, slot, page, bar);
  }
}

// Key tile [k0, k0 + kBlockN) of one tensor (K or V) from its contiguous or paged layout.
template <int kAtoms>
FJ_DEVICE void load_key_tile(const FjTensorMap* map, unsigned char* dst, const FjFa3Params& prm, const int* table_row,
                             const TileWork& w, int k0, unsigned long long* bar) {
  if constexpr (kPaged)
    load_paged_tile<kAtoms>(map, dst, prm.attn, table_row, prm.kv_box_rows, k0, w.kv_head, bar);
  else
    load_tile<kAtoms>(map, dst, k0, w.kv_head, w.seq.batch, bar);
}

// K/V round r of a stage waits for the consumers' release of round r - 1; rounds count tiles
// across the CTA's whole walk, so barriers' phases carry on from one work tile to the next.
struct Ring {
  int it = 0;  // K/V tiles this CTA has streamed before the current work tile
  FJ_DEVICE int stage(int j) const { return (it + j) % kStages; }
  FJ_DEVICE unsigned phase(int j) const { return unsigned((it + j) / kStages) & 1u; }
  FJ_DEVICE bool refill(int j) const { return it + j >= kStages; }
  FJ_DEVICE unsigned previous_phase(int j) const { return phase(j) ^ 1u; }
};

// The producer's one thread: per work tile K and V of every key tile, each stage refilled once
// every consumer warp has released it, and Q once its buffer is free (after the first K tile,
// so the next tile's keys stream while the consumers finish the last one). (A second thread for
// V, so K never waits behind a V stage's later release, measured no faster and made ptxas spill
// at D = 256.)
FJ_DEVICE void produce(const FjFa3Params& prm, unsigned char* smem, Barriers& bars, const TileWalk& walk) {
  const FjAttentionParams& p = prm.attn;
  prefetch_tensor_map(&prm.q_map);
  prefetch_tensor_map(&prm.k_map);
  prefetch_tensor_map(&prm.v_map);
  Ring ring;
  int q_round = 0;
  for (int k = 0, t = walk.tile(0); t < walk.total(); t = walk.tile(++k)) {
    const TileWork w = walk.work(t);
    if (!w.has_keys()) continue;
    const int* table_row = kPaged ? p.block_table + w.b * p.table_stride : nullptr;
    for (int j = 0; j < w.n_tiles; ++j) {
      const int stage = ring.stage(j);
      const int k0 = w.seq.k_start + (w.first_tile + j) * kBlockN;
      unsigned char* k_dst = smem + kLayout.k_offset + stage * kLayout.k_bytes;
      unsigned char* v_dst = smem + kLayout.v_offset + stage * kLayout.v_bytes;
      if (ring.refill(j)) mbarrier_wait(&bars.k_empty[stage], ring.previous_phase(j));
      load_key_tile<kLayout.atoms_qk>(&prm.k_map, k_dst, prm, table_row, w, k0, &bars.k_full[stage]);
      if (j == 0) {
        if (q_round > 0) mbarrier_wait(&bars.q_empty, unsigned(q_round - 1) & 1u);
        mbarrier_arrive_expect_tx(&bars.q_full, unsigned(kLayout.q_bytes));
        for (int c = 0; c < kConsumers; ++c)
          for (int a = 0; a < kLayout.atoms_qk; ++a)
            tma_load_4d(smem + kLayout.q_offset + (c * kLayout.atoms_qk + a) * kRowsPerWg * kAtomBytes, &prm.q_map,
                        a * fj_layout::kAtomElems, w.head, w.seq.q_start + w.m0 + c * kRowsPerWg, w.seq.batch,
                        &bars.q_full);
      }
      if (ring.refill(j)) mbarrier_wait(&bars.v_empty[stage], ring.previous_phase(j));
      load_key_tile<kLayout.atoms_v>(&prm.v_map, v_dst, prm, table_row, w, k0, &bars.v_full[stage]);
    }
    ring.it += w.n_tiles;
    ++q_round;
  }
  // In a cluster the other CTAs' consumers release this CTA's stages: it must not exit before
  // their last arrivals (a stage's next round would be the first after the walk).
  if constexpr (kShareCtas > 1) {
    for (int j = 0; j < kStages; ++j) {
      if (!ring.refill(j)) continue;
      mbarrier_wait(&bars.k_empty[ring.stage(j)], ring.previous_phase(j));
      mbarrier_wait(&bars.v_empty[ring.stage(j)], ring.previous_phase(j));
    }
  }
}

// A consumer warp is done reading a buffer: its first lane tells the producer.
FJ_DEVICE void release(unsigned long long* bar, int lane) {
  __syncwarp();
  if (lane == 0) mbarrier_arrive(bar);
}

// The same for a K/V stage, which every producer of the cluster writes into: lane i > 0 tells
// the producer of CTA rank + i.
FJ_DEVICE void release_stage(unsigned long long* bar, int lane) {
  release(bar, lane);
  if constexpr (kShareCtas > 1) {
    if (lane > 0 && lane < kShareCtas) mbarrier_arrive_cluster(bar, (cluster_ctarank() + unsigned(lane)) % kShareCtas);
  }
}

FJ_DEVICE unsigned pack(float lo, float hi) { return kBf16 ? pack_bf16x2(lo, hi) : pack_f16x2(lo, hi); }

// A wgmma accumulator as the m16n8 C-layout tiles the softmax and the score transforms index.
template <int kRegs>
FJ_DEVICE float (&c_tiles(float (&acc)[kRegs]))[1][kRegs / 4][4] {
  return *reinterpret_cast<float(*)[1][kRegs / 4][4]>(acc);
}

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

// One consumer's view of its 64 rows: where they sit, which keys they see, and the score
// transforms' per-row constants.
struct ConsumerRows {
  const FjAttentionParams* p;
  Sequence seq;
  int row0;  // this thread's row g (of g and g + 8) of its warp's 16, in sequence rows
  int col0;  // this thread's first column of every n8 tile
  int right;
  TileEdges edges;
  float alibi_slope, score_scale;

  // Scores of keys [n0, n0 + kBlockN) transformed and masked, ready for the softmax.
  FJ_DEVICE void prepare(float (&s)[kBlockN / 2], int n0) const {
    if constexpr (kSoftcap || kAlibi) transform_scores(c_tiles(s), row0, n0 + col0, seq.offset(), *p, alibi_slope);
    edges.mask(c_tiles(s), n0, row0, n0 + col0, seq, p->window_left, right);
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

// A consumer's walk over one work tile's key tiles: prologue S_0 alone, then per tile S_j with
// P_{j-1}.V_{j-1} behind it, then the last P.V. Each step is straight-line code: ptxas
// serializes wgmmas whose retirement it cannot follow through branches, so the mbarrier waits
// (loops) come before a step's first wgmma and nothing branches between its wgmmas. `last`: no
// work tile of this CTA follows, so the turns end here.
FJ_DEVICE void consume(const ConsumerRows& rows, unsigned char* smem, Barriers& bars, Turns& turns, const Ring& ring,
                       int q_round, bool last, int first_tile, int n_tiles, int lane, float (&o)[kDV / 2],
                       Softmax& sm) {
  const unsigned char* q_tile = smem + kLayout.q_offset + turns.c * kLayout.atoms_qk * kRowsPerWg * kAtomBytes;
  mbarrier_wait(&bars.q_full, unsigned(q_round) & 1u);
  unsigned pa[kStepsPV][4];  // P of the previous tile, wgmma's register A operand
  {
    const int stage = ring.stage(0);
    float s[kBlockN / 2];
    turns.take();
    mbarrier_wait(&bars.k_full[stage], ring.phase(0));
    wgmma_fence();
    issue_qk(s, q_tile, smem + kLayout.k_offset + stage * kLayout.k_bytes);
    wgmma_commit();
    turns.pass(false);
    wgmma_wait<0>();
    fence_registers(s);
    release_stage(&bars.k_empty[stage], lane);
    rows.prepare(s, first_tile * kBlockN);
    float alpha[1][2];
    sm.probabilities(c_tiles(s), rows.score_scale, alpha);  // O is 0: no rescale
    pack_probabilities(s, pa);
  }
  for (int j = 1; j < n_tiles; ++j) {
    const int stage = ring.stage(j), prev = ring.stage(j - 1);
    float s[kBlockN / 2];
    turns.take();
    mbarrier_wait(&bars.k_full[stage], ring.phase(j));
    mbarrier_wait(&bars.v_full[prev], ring.phase(j - 1));
    wgmma_fence();
    issue_qk(s, q_tile, smem + kLayout.k_offset + stage * kLayout.k_bytes);
    wgmma_commit();
    issue_pv(o, pa, smem + kLayout.v_offset + prev * kLayout.v_bytes);
    wgmma_commit();
    turns.pass(false);
    wgmma_wait<1>();
    fence_registers(s);
    release_stage(&bars.k_empty[stage], lane);
    rows.prepare(s, (first_tile + j) * kBlockN);
    float alpha[1][2];
    const bool any_rescale = sm.probabilities(c_tiles(s), rows.score_scale, alpha);
    // P.V_{j-1} ran under the softmax: wait for it only now (see kSoftmaxUnderPV).
    if constexpr (kSoftmaxUnderPV)
      wgmma_wait_after<0>(sm.row_sum[0][0] + sm.row_sum[0][1]);
    else
      wgmma_wait<0>();
    fence_registers(o);
    release_stage(&bars.v_empty[prev], lane);
    sm.rescale(c_tiles(o), alpha, any_rescale);
    pack_probabilities(s, pa);
  }
  {
    // Every Q.K^T of the tile has retired: the producer may bring the next tile's Q.
    release(&bars.q_empty, lane);
    const int stage = ring.stage(n_tiles - 1);
    unsigned char* v_tile = smem + kLayout.v_offset + stage * kLayout.v_bytes;
    if constexpr (kKeysEndInsideTensor) {
      const int valid_rows = rows.seq.len_k - (first_tile + n_tiles - 1) * kBlockN;
      if (turns.c == 0 && valid_rows < kBlockN) {
        mbarrier_wait(&bars.v_full[stage], ring.phase(n_tiles - 1));
        zero_v_tail(v_tile, valid_rows);
      }
    }
    turns.take();
    mbarrier_wait(&bars.v_full[stage], ring.phase(n_tiles - 1));
    wgmma_fence();
    issue_pv(o, pa, v_tile);
    wgmma_commit();
    turns.pass(last);
    wgmma_wait<0>();
    fence_registers(o);
    release_stage(&bars.v_empty[stage], lane);
  }
}

// Rows g and g + 8 of this thread: normalized output (the head dim's columns, pairs per thread)
// and the LSE from each quad's first thread.
FJ_DEVICE void store_rows(const FjAttentionParams& p, const ConsumerRows& rows, const float (&o)[kDV / 2],
                          const Softmax& sm, int head, int lane) {
  const float sink_log2 = sink_log2_of(p.sinks, head, kSinks);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = rows.row0 + h * 8;
    const RowTotal total = row_total<kSinks>(quad_sum(sm.row_sum[0][h]), sm.row_max[0][h], rows.score_scale, sink_log2);
    if (row >= rows.seq.len_q) continue;
    unsigned short* out = static_cast<unsigned short*>(p.o) + rows.seq.batch * p.o_stride[0] +
                          (rows.seq.q_start + row) * p.o_stride[1] + head * p.o_stride[2];
#pragma unroll
    for (int nt = 0; nt < kHeadDimV / 8; ++nt) {
      const int col = nt * 8 + 2 * (lane % 4);
      *reinterpret_cast<unsigned*>(out + col) = pack(o[nt * 4 + 2 * h] * total.inv, o[nt * 4 + 2 * h + 1] * total.inv);
    }
    if constexpr (kWriteLse) {
      if (lane % 4 == 0)
        p.lse[rows.seq.batch * p.lse_stride[0] + head * p.lse_stride[1] + (rows.seq.q_start + row) * p.lse_stride[2]] =
            total.lse;
    }
  }
}

// This consumer's 64 rows through its shared-memory output tile and one TMA store per 64-column
// atom, laid out as TMA's 128-byte swizzle expects (16-byte chunk k of row r at k ^ (r % 8)): a
// warp's stores then fall on 32 different banks. The LSE goes from registers as in store_rows.
// The tile is rewritten only once the previous tile's store has read it.
FJ_DEVICE void store_tile(const FjFa3Params& prm, const ConsumerRows& rows, const float (&o)[kDV / 2],
                          const Softmax& sm, int head, int wg_row0, int c, int warp, int lane, unsigned char* smem) {
  const FjAttentionParams& p = prm.attn;
  unsigned char* tile = smem + kLayout.o_offset + c * kLayout.atoms_v * kRowsPerWg * kAtomBytes;
  const bool elected = warp == 0 && lane == 0;
  if (elected) bulk_wait_group_read<0>();
  named_barrier_sync(kEpilogueBarrier + c, kWgThreads);
  const float sink_log2 = sink_log2_of(p.sinks, head, kSinks);
  // The lane read again here, opaquely: otherwise the compiler hoists the tile's swizzled
  // addresses (two per 8 columns) out of the tile walk, and they stay live through the main loop.
  const int lane_now = lane_id();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = warp * 16 + lane_now / 4 + h * 8;  // the row within the consumer's 64
    const RowTotal total = row_total<kSinks>(quad_sum(sm.row_sum[0][h]), sm.row_max[0][h], rows.score_scale, sink_log2);
#pragma unroll
    for (int nt = 0; nt < kHeadDimV / 8; ++nt) {
      const int col = nt * 8 + 2 * (lane_now % 4), within = col % fj_layout::kAtomElems;
      const int chunk = (within * 2 / 16) ^ (r % 8);
      unsigned char* at = tile + (col / fj_layout::kAtomElems) * kRowsPerWg * kAtomBytes + r * kAtomBytes + chunk * 16 +
                          within * 2 % 16;
      *reinterpret_cast<unsigned*>(at) = pack(o[nt * 4 + 2 * h] * total.inv, o[nt * 4 + 2 * h + 1] * total.inv);
    }
    const int row = rows.row0 + h * 8;
    if (kWriteLse && lane % 4 == 0 && row < rows.seq.len_q)
      p.lse[rows.seq.batch * p.lse_stride[0] + head * p.lse_stride[1] + (rows.seq.q_start + row) * p.lse_stride[2]] =
          total.lse;
  }
  fence_async_shared();  // the generic proxy's writes, before the copy engine reads them
  named_barrier_sync(kEpilogueBarrier + c, kWgThreads);
  if (elected) {
#pragma unroll
    for (int a = 0; a < kLayout.atoms_v; ++a)
      tma_store_4d(&prm.o_map, tile + a * kRowsPerWg * kAtomBytes, a * fj_layout::kAtomElems, head,
                   rows.seq.q_start + wg_row0, rows.seq.batch);
    bulk_commit_group();
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

  const int tid = threadIdx.x, wg = tid / kWgThreads, warp = (tid % kWgThreads) / 32, lane = tid % 32;
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
#pragma unroll
    for (int i = 0; i < kDV / 2; ++i) o[i] = 0.f;
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
