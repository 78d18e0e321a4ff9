// Hopper's bulk copy engine for whole rows: one cp.async.bulk instruction moves a row of K or V
// (256 bytes at D = 128) into shared memory and signals an mbarrier when its bytes have landed,
// where cp.async needs one instruction per 16 bytes and a thread-side wait. A ring of
// barriers, one per pipeline stage, replaces cp.async's commit groups.
// Only for sm_90 and newer: callers guard with kArchHasBulkCopy.
#pragma once

#include "common/ptx.cuh"

namespace fj {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr bool kArchHasBulkCopy = true;
#else
constexpr bool kArchHasBulkCopy = false;
#endif

FJ_DEVICE void mbarrier_init(unsigned long long* bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals) : "memory");
}
// Makes the initialized barriers visible to the copy engine before any copy names them.
FJ_DEVICE void fence_barrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

// One arrival that also announces `bytes` more to come from copies; they may land before it.
FJ_DEVICE void mbarrier_arrive_expect(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

FJ_DEVICE void mbarrier_wait(unsigned long long* bar, unsigned parity) {
  unsigned done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  }
}

// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared memory,
// completing on `bar`.
FJ_DEVICE void bulk_copy_row(void* smem, const void* gmem, unsigned bytes, unsigned long long* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          smem_addr(smem)),
      "l"(gmem), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// One barrier per stage. Tile t lands in stage t % kStages; the n-th tile of a stage completes the
// barrier's phase n, so its waiters test parity n & 1.
template <int kStages>
struct BulkRing {
  unsigned long long* bars;

  // Thread 0 initializes; the caller's next __syncthreads publishes the barriers to the CTA.
  // The barriers are static shared memory of this function, so kernels that never call it
  // keep their shared memory (and code) as they were.
  FJ_DEVICE void init(int tid) {
    __shared__ unsigned long long storage[kStages];
    bars = storage;
    if (tid == 0) {
      for (int s = 0; s < kStages; ++s) mbarrier_init(bars + s, 1);
      fence_barrier_init();
    }
  }
  FJ_DEVICE unsigned long long* bar(int tile) const { return bars + tile % kStages; }
  // Thread 0, once per tile: the tile's byte count (its copies may already be under way).
  FJ_DEVICE void expect(int tile, unsigned bytes, int tid) const {
    if (tid == 0) mbarrier_arrive_expect(bar(tile), bytes);
  }
  FJ_DEVICE void wait(int tile) const { mbarrier_wait(bar(tile), unsigned(tile / kStages) & 1u); }
};

}  // namespace fj
