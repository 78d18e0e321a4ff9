// The CPU emulation's templates/common/sm90/async_copy.cuh (tests/templates/bwd_emulate.py puts
// it in place of the real one): the mbarriers, fences, register moves and named barriers the
// emulated kernels use, on emu_runtime.hpp's fibers. Copies happen at once (cp.async in
// common/ptx.cuh), so a barrier's phase completes on its arrivals alone and a waiting thread
// sleeps until the arrivals it waits for have come. What no emulated kernel uses (TMA, clusters,
// transaction counts) is left out: a kernel that starts to use it fails to compile here instead
// of running on a wrong model.
#pragma once

#include "common/ptx.cuh"

namespace fj::sm90 {

inline void mbarrier_init(unsigned long long* bar, unsigned arrivals) { emu::mbarrier_init(bar, arrivals); }
// Orders the initialization before the async proxy's use: nothing is asynchronous here.
inline void fence_barrier_init() {}
inline void mbarrier_arrive(unsigned long long* bar) { emu::mbarrier_arrive(bar); }
inline bool mbarrier_try_wait(unsigned long long* bar, unsigned parity) { return emu::mbarrier_phase_done(bar, parity); }
// The thread sleeps (other fibers run) until the phase of this parity has completed; a wait no
// arrival can end is reported as a deadlock.
inline void mbarrier_wait(unsigned long long* bar, unsigned parity) {
  emu::wait_until([bar, parity] { return emu::mbarrier_phase_done(bar, parity); });
}

// Generic-proxy writes to shared memory made visible to the async proxy (wgmma): one memory here.
inline void fence_async_shared() {}

// Register moves between warpgroups: no registers here; the operands' checks stay.
template <int kRegs>
inline void setmaxnreg_dec() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg takes multiples of 8 in [24, 256]");
}
template <int kRegs>
inline void setmaxnreg_inc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg takes multiples of 8 in [24, 256]");
}

inline void named_barrier_sync(int id, int threads) { emu::named_barrier(id, threads); }

}  // namespace fj::sm90
