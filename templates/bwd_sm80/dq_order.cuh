// Deterministic mode (kDeterministic): the K/V blocks add into a Q block's dQ accumulator one
// after another, always in the same order, so the fp32 sums (and dq) have the same bits every
// call. The order is descending: the last K/V block of the sequence adds first. The main kernel
// maps CTA x to K/V block gridDim.x - 1 - x (k_block_of), so the block a CTA waits for was
// launched before it: CTAs start in launch order, so it runs or has run, and the wait ends.
// Descending also suits causal and windowed walks: a K/V block's Q blocks start at or after
// those of the block below it, so the block it waits for started its walk earlier, or at once;
// the first Q blocks of each walk wait for nothing (FlashAttention-3 calls it shortest job first).
//
// The turn of a Q block (of one q-head and sequence) is an int in the workspace: 0 when
// preprocess zeroed it, then k + 1 once K/V block k has added. Block k adds after block k + 1
// (when that block walks this Q block at all: the blocks that do are consecutive, tile_walk.cuh)
// and so waits for turn k + 2. Every thread waits for itself (its own acquire orders its own
// adds); one thread hands the turn on after a barrier, which orders every thread's adds before it.
#pragma once

#include "bwd_sm80/config.cuh"
#include "bwd_sm80/tile_walk.cuh"

namespace fj::bwd {

// The K/V block CTA x works on: in launch order, or the reverse with a fixed dQ order.
FJ_DEVICE int k_block_of(unsigned x) { return kDeterministic ? int(gridDim.x) - 1 - int(x) : int(x); }

// The turn flag of Q block m_block of q-head `head` in sequence z.
FJ_DEVICE int* dq_turn_of(const FjBackwardParams& p, int z, int head, int m_block) {
  return p.dq_turn + (static_cast<long long>(z) * p.fwd.heads_q + head) * (p.seqlen_q_rounded / kBlockM) + m_block;
}

// Returns when K/V block k may add into `turn`'s Q block: at once when the block above it does not
// walk that Q block (k adds first), else once that block has added.
FJ_DEVICE void wait_dq_turn(const int* turn, int k, bool above_walks_it) {
  if (!above_walks_it) return;
  while (ld_acquire_gpu(turn) != k + 2) {
  }
}

// After a barrier that follows every thread's adds: the turn passes to K/V block k - 1.
FJ_DEVICE void pass_dq_turn(int* turn, int k, int tid) {
  if (tid == 0) st_release_gpu(turn, k + 1);
}

}  // namespace fj::bwd
