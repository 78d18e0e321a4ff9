// fa3_sm90's producer: one thread of warpgroup 0 streams Q once per work tile and K and V tile
// by tile through TMA into the rings (fa3_sm90/pipeline.cuh), contiguous or paged.
#pragma once

#include "common/attention_params.cuh"
#include "common/sm90/async_copy.cuh"
#include "fa3_sm90/config.cuh"
#include "fa3_sm90/params.cuh"
#include "fa3_sm90/pipeline.cuh"
#include "fa3_sm90/tile_walk.cuh"

namespace fj::fa3 {

using namespace fj::sm90;

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

}  // namespace fj::fa3
