// fa3_sm90's K/V rings between the producer's TMA copies and the consumers' wgmmas: per stage a
// "full" barrier (the copy's bytes landed) and an "empty" one (every consumer warp of the
// cluster is done with it), separately for K and V. KvStages names the consumer's side.
#pragma once

#include "common/sm90/async_copy.cuh"
#include "fa3_sm90/config.cuh"

namespace fj::fa3 {

using namespace fj::sm90;

struct Barriers {
  unsigned long long q_full, q_empty;
  unsigned long long k_full[kStages], v_full[kStages];
  unsigned long long k_empty[kStages], v_empty[kStages];
};

// K/V round r of a stage waits for the consumers' release of round r - 1; rounds count tiles
// across the CTA's whole walk, so barriers' phases carry on from one work tile to the next.
struct Ring {
  int it = 0;  // K/V tiles this CTA has streamed before the current work tile
  FJ_DEVICE int stage(int j) const { return (it + j) % kStages; }
  FJ_DEVICE unsigned phase(int j) const { return unsigned((it + j) / kStages) & 1u; }
  FJ_DEVICE bool refill(int j) const { return it + j >= kStages; }
  FJ_DEVICE unsigned previous_phase(int j) const { return phase(j) ^ 1u; }
};

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

// A consumer's side of the K and V rings: a stage's tiles, the wait for their copies to land (in
// the phase of the round) and the release to the producers. Stages and phases come from Ring.
struct KvStages {
  unsigned char* smem;
  Barriers& bars;
  int lane;

  FJ_DEVICE unsigned char* k_tile(int stage) const { return smem + kLayout.k_offset + stage * kLayout.k_bytes; }
  FJ_DEVICE unsigned char* v_tile(int stage) const { return smem + kLayout.v_offset + stage * kLayout.v_bytes; }
  FJ_DEVICE void wait_k(int stage, unsigned phase) const { mbarrier_wait(&bars.k_full[stage], phase); }
  FJ_DEVICE void wait_v(int stage, unsigned phase) const { mbarrier_wait(&bars.v_full[stage], phase); }
  FJ_DEVICE void release_k(int stage) const { release_stage(&bars.k_empty[stage], lane); }
  FJ_DEVICE void release_v(int stage) const { release_stage(&bars.v_empty[stage], lane); }
};

}  // namespace fj::fa3
