// Hopper's asynchronous copies and the barriers that track them (sm_90a): mbarriers with
// transaction counts, TMA tensor loads and stores (cp.async.bulk.tensor) addressed through a
// CUtensorMap the host encodes, proxy fences, and the register moves between warpgroups of a
// warp-specialized CTA. NVRTC compiles these with no host headers: a tensor map arrives as the
// address of a 128-byte, 64-byte-aligned __grid_constant__ kernel parameter.
#pragma once

#include "common/ptx.cuh"

namespace fj::sm90 {

// --- mbarriers ---------------------------------------------------------------------------------
// A phase completes when its expected arrivals have arrived and its transaction bytes landed;
// waiters name the phase by its parity (the n-th completion of a barrier has parity n & 1).
FJ_DEVICE void mbarrier_init(unsigned long long* bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals) : "memory");
}
// Publishes initialized barriers to the async proxy (TMA) before any copy names them.
FJ_DEVICE void fence_barrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

FJ_DEVICE void mbarrier_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// One arrival that also announces `bytes` more to come from copies (which may land first).
FJ_DEVICE void mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
FJ_DEVICE bool mbarrier_try_wait(unsigned long long* bar, unsigned parity) {
  unsigned done;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
  return done != 0;
}
// One arrival on the barrier at the same shared-memory offset in CTA `cta` of the cluster
// (this CTA included). The default .release.cta semantics, as CUTLASS's cluster pipelines use:
// the arrival follows reads that have completed (wgmma.wait_group) and only orders them.
FJ_DEVICE void mbarrier_arrive_cluster(unsigned long long* bar, unsigned cta) {
  asm volatile(
      "{\n .reg .b32 remote;\n mapa.shared::cluster.u32 remote, %0, %1;\n"
      " mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(smem_addr(bar)),
      "r"(cta)
      : "memory");
}
// try_wait suspends the thread for a hardware-chosen time before it returns false, so the loop
// does not spin hot.
FJ_DEVICE void mbarrier_wait(unsigned long long* bar, unsigned parity) {
  while (!mbarrier_try_wait(bar, parity)) {
  }
}

// --- TMA ---------------------------------------------------------------------------------------
// A box of the tensor map `map` at element coordinates (innermost first) into shared memory,
// completing `bytes` on `bar` (the box's size, announced by mbarrier_arrive_expect_tx).
// Out-of-bounds elements of the box are zero-filled by the copy engine.
FJ_DEVICE unsigned long long map_addr(const void* map) { return reinterpret_cast<unsigned long long>(map); }

FJ_DEVICE void tma_load_2d(void* smem, const void* map, int c0, int c1, unsigned long long* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
          "r"(smem_addr(smem)),
      "l"(map_addr(map)), "r"(c0), "r"(c1), "r"(smem_addr(bar))
      : "memory");
}
FJ_DEVICE void tma_load_3d(void* smem, const void* map, int c0, int c1, int c2, unsigned long long* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(smem_addr(smem)),
      "l"(map_addr(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
      : "memory");
}
FJ_DEVICE void tma_load_4d(void* smem, const void* map, int c0, int c1, int c2, int c3, unsigned long long* bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(smem_addr(smem)),
      "l"(map_addr(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar))
      : "memory");
}

// The same box into the same shared-memory offset of every CTA of the cluster in `cta_mask`
// (bit i: CTA rank i), completing its bytes on each one's barrier at `bar`'s offset.
FJ_DEVICE void tma_load_4d_multicast(void* smem, const void* map, int c0, int c1, int c2, int c3,
                                     unsigned long long* bar, unsigned short cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, "
      "%3, %4, %5}], [%6], %7;\n" ::"r"(smem_addr(smem)),
      "l"(map_addr(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar)), "h"(cta_mask)
      : "memory");
}

// Shared memory to the tensor map's box; elements outside the tensor are not written. Generic
// stores to `smem` must be made visible to the copy engine first (fence_async_shared).
FJ_DEVICE void tma_store_3d(const void* map, const void* smem, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(map_addr(map)),
               "r"(smem_addr(smem)), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}
FJ_DEVICE void tma_store_4d(const void* map, const void* smem, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                   map_addr(map)),
               "r"(smem_addr(smem)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
FJ_DEVICE void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most kPending store groups still read shared memory (their writes may still
// be in flight: the buffer may be reused, the kernel may exit).
template <int kPending>
FJ_DEVICE void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}
// Generic-proxy writes to shared memory become visible to the async proxy (TMA stores, wgmma).
FJ_DEVICE void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Brings a tensor map into the cache of descriptors before its first copy.
FJ_DEVICE void prefetch_tensor_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map_addr(map)) : "memory");
}

// --- clusters ----------------------------------------------------------------------------------
// This CTA's rank within its cluster (0 without one).
FJ_DEVICE unsigned cluster_ctarank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// Every thread of every CTA of the cluster: what each wrote before (barrier initialization
// included) is visible to all after. Also a CTA-wide barrier.
FJ_DEVICE void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// --- warp specialization -------------------------------------------------------------------------
// Moves registers between the warpgroups of a CTA: a copy-only producer gives its registers
// up, the consumers that hold accumulators take them. kRegs: a multiple of 8 in [24, 256].
template <int kRegs>
FJ_DEVICE void setmaxnreg_dec() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg takes multiples of 8 in [24, 256]");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
FJ_DEVICE void setmaxnreg_inc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg takes multiples of 8 in [24, 256]");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// Named barriers (ids 1..15; 0 is __syncthreads) between some warps of a CTA: the consumer
// warpgroups' turn-taking. `threads` is a multiple of 32.
FJ_DEVICE void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
FJ_DEVICE void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace fj::sm90
