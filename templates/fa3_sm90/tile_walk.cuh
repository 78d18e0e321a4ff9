// Which query block of which head and sequence a CTA works on, and in what order. Tiles are
// numbered in sections of `section_heads` heads (of all sequences): within a section, heads
// fastest, then query blocks, under the causal mask the last query block first (it sees the
// most keys).
//
// One CTA per tile (the grid holds every tile): sections of one head, so the CTAs running at
// once share one head's K and V in L2 and each head starts with its heaviest block; the hardware
// hands freed SMs the next tile.
//
// A persistent grid (fewer CTAs than tiles): the CTAs take the tiles round by round, CTA c the
// c-th tile of even rounds and the c-th from the end of odd ones. The launch plan sizes sections
// so that a round spans few query blocks (its tiles weigh nearly the same) and, where that
// allows, so that a section's K and V fit in L2; the reversal pays back in the next round what
// the first CTAs took extra. (Measured on the H100: a plain stride over one head's blocks left
// some CTAs 2.6x the work of others at 16K causal; sections sized to L2 alone balanced 16K
// worse than all heads, and all heads at 1K reread K and V from memory: 162 against 266 TFLOP/s.)
// The producer streams the next tile's K and V while the consumers store the last one's output.
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

  // The grid covers the longest sequence. A cluster's CTAs share every K/V load, so one past the
  // last query block (an odd count) still walks the keys: TMA reads its Q rows as zeros and
  // clips its output rows.
  FJ_DEVICE bool has_rows() const { return kCluster > 1 || m0 < seq.len_q; }
  FJ_DEVICE bool has_keys() const { return has_rows() && n_tiles > 0; }
};

// Sizes come from the kernel's parameters and special registers where used: the walk holds only
// the parameters and what the launch plan chose.
struct TileWalk {
  const FjAttentionParams& p;
  int section_heads;

  // Query blocks per head, a whole number of clusters (the launch plan pads the grid alike).
  FJ_DEVICE int m_blocks() const { return (p.seqlen_q + kBlockM * kCluster - 1) / (kBlockM * kCluster) * kCluster; }
  FJ_DEVICE int total() const { return m_blocks() * p.heads_q * p.batch; }
  FJ_DEVICE static int grid() { return int(gridDim.x * gridDim.y * gridDim.z); }

  // The CTA's k-th tile, or total() past its last.
  FJ_DEVICE int tile(int k) const {
    const int cta = int(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
    const long long t = (long long)k * grid() + ((k & 1) ? grid() - 1 - cta : cta);
    return t < total() ? int(t) : total();
  }

  FJ_DEVICE TileWork work(int t) const {
    TileWork w;
    const int blocks = m_blocks(), section_tiles = section_heads * blocks;
    const int section = t / section_tiles, first_head = section * section_heads;
    const int heads_here = min(section_heads, p.heads_q * p.batch - first_head);  // the last section's may be fewer
    const int in_section = t - section * section_tiles;
    const int m = in_section / heads_here, head_batch = first_head + in_section % heads_here;
    w.head = head_batch % p.heads_q;
    w.b = head_batch / p.heads_q;
    w.kv_head = w.head / p.group;
    w.m0 = (kCausal ? blocks - 1 - m : m) * kBlockM;
    w.seq = sequence_of(p, w.b);
    int key_lo, key_hi;
    key_range<kCausal, kWindow>(w.seq, w.m0, kBlockM, p.window_left, kWindow ? p.window_right : 0, key_lo, key_hi);
    w.first_tile = key_lo / kBlockN;
    w.n_tiles = key_hi > key_lo ? (key_hi + kBlockN - 1) / kBlockN - w.first_tile : 0;
    return w;
  }

  // Whether this CTA has a tile with keys after its k-th (the consumers' turns end with the last).
  FJ_DEVICE bool keys_after(int k) const {
    for (int u = tile(++k); u < total(); u = tile(++k))
      if (work(u).has_keys()) return true;
    return false;
  }
};

}  // namespace fj::fa3
