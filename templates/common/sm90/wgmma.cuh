// Warpgroup matrix multiplies (sm_90a): the shared-memory matrix descriptor's advance (the
// descriptor itself: matrix_descriptor.cuh), the fences that order wgmma against the registers
// and shared memory around it, and the forms themselves (wgmma_ops.cuh, generated). A warpgroup
// is 4 consecutive warps (128 threads) issuing together.
#pragma once

#include "common/ptx.cuh"
#include "common/sm90/matrix_descriptor.cuh"
#include "common/sm90/wgmma_ops.cuh"

namespace fj::sm90 {

// The same matrix `bytes` further on (a 16-element step inside a swizzle atom moves the start;
// the hardware applies the swizzle to the final address). A 32-bit add on the low word: the start
// field cannot carry out of it, as every shared-memory address fits its 14 bits (>> 4), and a
// compile-time `bytes` then costs one instruction instead of rebuilding the descriptor.
FJ_DEVICE unsigned long long advance_descriptor(unsigned long long desc, unsigned bytes) {
  // Spelled in PTX: from C++ the compiler widens it back into a 64-bit add with carry.
  unsigned long long out;
  asm("{\n .reg .b32 lo, hi;\n mov.b64 {lo, hi}, %1;\n add.u32 lo, lo, %2;\n mov.b64 %0, {lo, hi};\n}\n"
      : "=l"(out)
      : "l"(desc), "r"(bytes >> 4));
  return out;
}

// Orders earlier register and shared-memory accesses before the next wgmma reads them.
FJ_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
// Closes the wgmmas issued since the last commit into one group.
FJ_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most kPending committed groups are still running: their accumulators may be read.
template <int kPending>
FJ_DEVICE void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// wgmma_wait, held until `after` is computed. ptxas places a wait as early as its basic block
// allows, above work the PTX puts before it (measured on fa3_sm90: the softmax it meant to run
// under P.V ran after it). A warp-uniform branch on `after` opens a new block; both arms wait,
// spelled differently so the compiler cannot fold the arms back into one block. The value must
// be warp-uniformly comparable (any float: the test is never-equal, just opaque).
template <int kPending>
FJ_DEVICE void wgmma_wait_after(float after) {
  constexpr float kOpaque = 0.1234567f;  // any constant: only the branch's existence matters
  if (__any_sync(0xffffffffu, after != kOpaque))
    wgmma_wait<kPending>();
  else
    asm volatile("wgmma.wait_group.sync.aligned %0; // held back\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving accesses of accumulator registers across a wgmma in flight.
template <int kCount>
FJ_DEVICE void fence_registers(float (&r)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

}  // namespace fj::sm90
