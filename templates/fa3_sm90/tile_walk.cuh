// Which query block of which head and sequence a CTA works on. The grid's tiles are numbered
// with query blocks fastest (one head's K/V stays in L2 across them) and, under the causal mask,
// the last query block of each head first: it sees the most keys, so the grid's tail is the
// lightest blocks rather than the heaviest.
//
// The launch plan picks the grid: one CTA per tile (each walks one tile), or a persistent grid
// of one CTA per SM slot, each walking every gridDim-th tile; there the producer streams the
// next tile's K and V while the consumers still normalize and store the last one's output.
#pragma once

#include "common/sequence.cuh"
#include "fa3_sm90/config.cuh"

namespace fj::fa3 {

// One tile as both the producer and the consumers see it: both derive it from the tile number
// alone, so they agree on every tile's key range without talking.
struct TileWork {
  Sequence seq;
  int b;  // the sequence's index: block table row, kv_lens and per-sequence ALiBi slopes
  int head, kv_head;
  int m0;  // first query row of the block, in the sequence's rows
  int first_tile, n_tiles;  // key tiles the block's rows see

  FJ_DEVICE bool has_rows() const { return m0 < seq.len_q; }  // the grid covers the longest sequence
  FJ_DEVICE bool has_keys() const { return has_rows() && n_tiles > 0; }
};

struct TileWalk {
  int m_blocks, heads, total, stride;

  FJ_DEVICE static TileWalk of_grid(const FjAttentionParams& p) {
    TileWalk w;
    w.m_blocks = (p.seqlen_q + kBlockM - 1) / kBlockM;
    w.heads = p.heads_q;
    w.total = w.m_blocks * p.heads_q * p.batch;
    w.stride = int(gridDim.x * gridDim.y * gridDim.z);
    return w;
  }
  FJ_DEVICE int first() const { return int(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)); }

  FJ_DEVICE TileWork work(const FjAttentionParams& p, int t) const {
    TileWork w;
    const int m = t % m_blocks, head_batch = t / m_blocks;
    w.head = head_batch % heads;
    w.b = head_batch / heads;
    w.kv_head = w.head / p.group;
    w.m0 = (kCausal ? m_blocks - 1 - m : m) * kBlockM;
    w.seq = sequence_of<kVarlen, kKvLens, kPaged>(p, w.b);
    int key_lo, key_hi;
    key_range<kCausal, kWindow>(w.seq, w.m0, kBlockM, p.window_left, kWindow ? p.window_right : 0, key_lo, key_hi);
    w.first_tile = key_lo / kBlockN;
    w.n_tiles = key_hi > key_lo ? (key_hi + kBlockN - 1) / kBlockN - w.first_tile : 0;
    return w;
  }

  // Whether this CTA has a tile with keys after tile t (the consumers' turns end with the last).
  FJ_DEVICE bool keys_after(const FjAttentionParams& p, int t) const {
    for (int u = t + stride; u < total; u += stride)
      if (work(p, u).has_keys()) return true;
    return false;
  }
};

}  // namespace fj::fa3
