// The CPU emulation's templates/common/sm90/wgmma.cuh (tests/templates/bwd_emulate.py puts it in
// place of the real one): the real matrix_descriptor.cuh, the descriptor's advance, and wgmma's
// asynchrony kept: a wgmma (wgmma_ops.cuh) is recorded when its warpgroup's 128 threads have
// issued it, a commit closes the recorded ones into a group, and a wait runs the groups it waits
// for. A kernel that reads accumulators before waiting for their group reads the old values, and
// one that overwrites an operand's shared memory before the wait feeds the product the new bytes,
// as it could on the GPU.
#pragma once

#include "common/ptx.cuh"
#include "common/sm90/matrix_descriptor.cuh"
#include "common/sm90/wgmma_ops.cuh"

namespace fj::sm90 {

// The real one's 32-bit add on the low word: no carry into the leading offset's bits.
inline unsigned long long advance_descriptor(unsigned long long desc, unsigned bytes) {
  const unsigned lo = static_cast<unsigned>(desc) + (bytes >> 4);
  return (desc & ~0xffffffffull) | lo;
}

// Orders register and shared-memory accesses before wgmma's: operands are read when the group runs.
inline void wgmma_fence() {}
// Warpgroup-collective: the wgmmas the warpgroup issued since the last commit become one group.
inline void wgmma_commit() {
  emu::warpgroup_barrier([](emu::Runtime::Warpgroup& wg) {
    wg.committed.push_back(std::move(wg.issued));
    wg.issued.clear();
  });
}
// Runs the warpgroup's oldest groups until at most kPending are left. The first of its threads to
// wait runs them for all 128 (the others may not touch those accumulators before their own wait).
template <int kPending>
inline void wgmma_wait() {
  emu::Runtime::Warpgroup& wg = emu::rt().warpgroups[std::size_t(emu::this_warpgroup())];
  while (wg.committed.size() > std::size_t(kPending)) {
    const std::vector<std::function<void()>> group = std::move(wg.committed.front());
    wg.committed.pop_front();
    for (const std::function<void()>& mma : group) mma();
  }
}
// The real one only controls where ptxas places the wait.
template <int kPending>
inline void wgmma_wait_after(float) {
  wgmma_wait<kPending>();
}
// Keeps the compiler from moving accumulator accesses across a wgmma: here the accumulators'
// address went to the recorded wgmma, so the compiler reloads them after any wait already.
template <int kCount>
inline void fence_registers(float (&)[kCount]) {}

}  // namespace fj::sm90
