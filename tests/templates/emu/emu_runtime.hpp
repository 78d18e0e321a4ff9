// A CPU stand-in for the CUDA execution model, enough to run the bwd_sm80 and bwd_sm90 kernels'
// source as ordinary C++ (tests/templates/bwd_emulate.py): every thread of a CTA is a fiber
// (ucontext) on one OS thread, __syncthreads and named barriers are barriers over the CTA's
// fibers or some of them, and warp- or warpgroup-collective instructions (ldmatrix, mma,
// shuffles, wgmma) are barriers over the warp's 32 fibers (the warpgroup's 128) whose last
// arriver computes every lane's result from every lane's operands, as the hardware's definition
// of the instruction says. A thread waiting on a condition another thread makes true (an
// mbarrier's phase) sleeps until the scheduler finds it true. CTAs run one after another.
// Deadlocks (a barrier some thread never reaches, a condition nobody makes true) abort with a
// message instead of hanging.
#pragma once

#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <vector>

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};

namespace emu {

struct Fiber {
  ucontext_t ctx{};
  std::vector<char> stack;
  dim3 tid;
  bool done = false, blocked = false;
  std::function<bool()> until;  // while blocked: what wakes it (empty: a barrier's last arriver)
};

struct Runtime {
  ucontext_t scheduler{};
  std::vector<Fiber> fibers;
  Fiber* current = nullptr;
  std::function<void()> body;
  int threads = 0;
  // __syncthreads
  int cta_arrived = 0;
  // Named barriers (bar.sync id, count): arrivals and the fibers waiting, per id.
  static constexpr int kNamedBarriers = 16;
  int named_arrived[kNamedBarriers] = {};
  std::vector<Fiber*> named_waiting[kNamedBarriers];
  // Warp collectives: operands in, results out, one slot per lane; `arrived` per warp.
  struct Warp {
    int arrived = 0;
    const void* addr[32];
    unsigned in[32][10];
    float fin[32][4];
    unsigned out[32][4];
    float fout[32][4];
  };
  std::vector<Warp> warps;
  // Warpgroups (4 warps, sm_90): a collective's arrivals, and the asynchronous operations
  // (wgmma) issued and not yet committed, then committed in groups that a wait runs.
  struct Warpgroup {
    int arrived = 0;
    std::vector<std::function<void()>> issued;
    std::deque<std::vector<std::function<void()>>> committed;
  };
  std::vector<Warpgroup> warpgroups;
};

inline Runtime& rt() {
  static Runtime r;
  return r;
}

}  // namespace emu

// The built-in variables, set by the scheduler as it switches fibers.
inline dim3 threadIdx, blockIdx, gridDim, blockDim;

namespace emu {

inline void trampoline() {
  rt().body();
  rt().current->done = true;
  swapcontext(&rt().current->ctx, &rt().scheduler);
}

// Blocks the current fiber until the scheduler finds it unblocked.
inline void block_here() {
  Fiber* f = rt().current;
  f->blocked = true;
  swapcontext(&f->ctx, &rt().scheduler);
  threadIdx = f->tid;
}

// Blocks the current fiber until `ready()` holds (the scheduler asks it between turns); returns
// at once if it holds already.
inline void wait_until(std::function<bool()> ready) {
  if (ready()) return;
  rt().current->until = std::move(ready);
  block_here();
}

inline int this_lane() { return int(threadIdx.x % 32); }
inline int this_warp() { return int(threadIdx.x / 32); }
constexpr int kWarpgroupThreads = 128;
inline int this_warpgroup() { return int(threadIdx.x) / kWarpgroupThreads; }

// A barrier over fibers [first, first + count), counted in `arrived`: the last to arrive runs
// `last` and releases the others.
template <class F>
void group_barrier(int first, int count, int& arrived, F&& last) {
  Runtime& r = rt();
  if (++arrived == count) {
    arrived = 0;
    last();
    for (int t = first; t < first + count; ++t) r.fibers[std::size_t(t)].blocked = false;
    return;
  }
  block_here();
}

// A barrier over the current warp's 32 fibers: the last to arrive runs `last` (which reads
// every lane's operands and writes every lane's results) and releases the others.
template <class F>
void warp_barrier(F&& last) {
  Runtime::Warp& w = rt().warps[std::size_t(this_warp())];
  group_barrier(this_warp() * 32, 32, w.arrived, [&] { last(w); });
}

// The same over the current warpgroup's 128 fibers (every one must exist: whole warpgroups).
template <class F>
void warpgroup_barrier(F&& last) {
  const int g = this_warpgroup();
  if (rt().threads < (g + 1) * kWarpgroupThreads) {
    std::fprintf(stderr, "emu: a warpgroup collective in a CTA of %d threads\n", rt().threads);
    std::abort();
  }
  Runtime::Warpgroup& wg = rt().warpgroups[std::size_t(g)];
  group_barrier(g * kWarpgroupThreads, kWarpgroupThreads, wg.arrived, [&] { last(wg); });
}

// bar.sync id, count: returns once `count` threads (any of the CTA's) have arrived at barrier id.
inline void named_barrier(int id, int count) {
  Runtime& r = rt();
  if (id <= 0 || id >= Runtime::kNamedBarriers || count <= 0 || count % 32 || count > r.threads) {
    std::fprintf(stderr, "emu: bar.sync %d, %d: not a named barrier of whole warps of this CTA\n", id, count);
    std::abort();
  }
  if (++r.named_arrived[id] == count) {
    r.named_arrived[id] = 0;
    for (Fiber* f : r.named_waiting[id]) f->blocked = false;
    r.named_waiting[id].clear();
    return;
  }
  r.named_waiting[id].push_back(r.current);
  block_here();
}

inline void syncthreads() {
  Runtime& r = rt();
  if (++r.cta_arrived == r.threads) {
    r.cta_arrived = 0;
    for (Fiber& f : r.fibers) f.blocked = false;
    return;
  }
  block_here();
}

// Runs one CTA of `block` threads: body() in each.
inline void run_cta(const dim3& block, std::function<void()> body) {
  Runtime& r = rt();
  r.threads = int(block.x);
  if (r.threads % 32) {
    std::fprintf(stderr, "emu: blocks must be whole warps\n");
    std::abort();
  }
  r.body = std::move(body);
  r.fibers.clear();
  r.fibers.resize(std::size_t(r.threads));
  r.warps.assign(std::size_t(r.threads / 32), Runtime::Warp{});
  r.warpgroups.assign(std::size_t((r.threads + kWarpgroupThreads - 1) / kWarpgroupThreads), Runtime::Warpgroup{});
  r.cta_arrived = 0;
  for (int id = 0; id < Runtime::kNamedBarriers; ++id) r.named_arrived[id] = 0, r.named_waiting[id].clear();
  constexpr std::size_t kStack = 256 * 1024;  // the kernels' unrolled register tiles live on it
  for (int t = 0; t < r.threads; ++t) {
    Fiber& f = r.fibers[std::size_t(t)];
    f.stack.resize(kStack);
    f.tid.x = unsigned(t);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.data();
    f.ctx.uc_stack.ss_size = kStack;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, trampoline, 0);
  }
  for (;;) {
    bool any_left = false, progress = false;
    for (Fiber& f : r.fibers) {
      if (f.done) continue;
      any_left = true;
      if (f.blocked) {
        if (!f.until || !f.until()) continue;
        f.blocked = false;
        f.until = nullptr;
      }
      progress = true;
      r.current = &f;
      threadIdx = f.tid;
      swapcontext(&r.scheduler, &f.ctx);
    }
    if (!any_left) break;
    if (!progress) {
      std::fprintf(stderr, "emu: deadlock in CTA (%u, %u, %u): every live thread waits at a barrier\n", blockIdx.x,
                   blockIdx.y, blockIdx.z);
      std::abort();
    }
  }
  for (const Runtime::Warpgroup& wg : r.warpgroups)
    if (!wg.issued.empty() || !wg.committed.empty()) {
      std::fprintf(stderr, "emu: CTA (%u, %u, %u) exited with wgmmas not waited for\n", blockIdx.x, blockIdx.y,
                   blockIdx.z);
      std::abort();
    }
}

// Runs a kernel over a grid, CTA by CTA.
template <class Kernel, class Params>
void launch(Kernel kernel, const dim3& grid, const dim3& block, const Params& p) {
  gridDim = grid;
  blockDim = block;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = dim3{x, y, z};
        run_cta(block, [&] { kernel(p); });
      }
}

// mbarriers (sm_90): the 64-bit shared-memory word holds the emulation's state, as the hardware's
// does its own: bits 0-31 the arrivals still pending in the current phase, 32-62 the arrivals a
// phase expects, 63 the current phase's parity. No transaction counts: the copies that would
// complete bytes on a barrier happen at once here.
constexpr int kMbarExpectedShift = 32, kMbarPhaseShift = 63;
constexpr unsigned long long kMbarCountMask = 0x7fffffffull;
inline void mbarrier_init(unsigned long long* bar, unsigned arrivals) {
  if (arrivals == 0 || arrivals > kMbarCountMask) {
    std::fprintf(stderr, "emu: mbarrier.init with %u arrivals\n", arrivals);
    std::abort();
  }
  *bar = (static_cast<unsigned long long>(arrivals) << kMbarExpectedShift) | arrivals;
}
// One arrival: the last one the phase expects completes it, flipping the parity and starting
// the next phase with the full count pending.
inline void mbarrier_arrive(unsigned long long* bar) {
  const unsigned long long expected = *bar >> kMbarExpectedShift & kMbarCountMask;
  const unsigned long long pending = *bar & 0xffffffffull;
  if (expected == 0 || pending == 0) {
    std::fprintf(stderr, "emu: arrival on an mbarrier never initialized\n");
    std::abort();
  }
  if (pending > 1) {
    *bar -= 1;
    return;
  }
  const unsigned long long phase = *bar >> kMbarPhaseShift;
  *bar = (phase ^ 1ull) << kMbarPhaseShift | expected << kMbarExpectedShift | expected;
}
// mbarrier.try_wait.parity: whether the phase of this parity has completed, that is, whether the
// current phase has the other parity.
inline bool mbarrier_phase_done(const unsigned long long* bar, unsigned parity) {
  return (*bar >> kMbarPhaseShift) != (parity & 1u);
}

}  // namespace emu

// --- the CUDA built-ins the kernels use ---------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

using std::max;
using std::min;

struct alignas(16) float4 {
  float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
struct alignas(8) float2 {
  float x, y;
};

inline void __syncthreads() { emu::syncthreads(); }
inline float __int_as_float(int x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
inline float __uint_as_float(unsigned x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
inline float atomicAdd(float* p, float x) {  // one OS thread: a plain add is atomic
  const float old = *p;
  *p = old + x;
  return old;
}
inline float __shfl_xor_sync(unsigned, float x, int d) {
  emu::Runtime::Warp& w = emu::rt().warps[emu::this_warp()];
  const int lane = emu::this_lane();
  w.fin[lane][0] = x;
  w.in[lane][0] = unsigned(d);
  emu::warp_barrier([](emu::Runtime::Warp& w) {
    for (int l = 0; l < 32; ++l) w.fout[l][0] = w.fin[l ^ int(w.in[l][0])][0];
  });
  return w.fout[lane][0];
}
inline unsigned __reduce_min_sync(unsigned, unsigned x) {
  emu::Runtime::Warp& w = emu::rt().warps[emu::this_warp()];
  const int lane = emu::this_lane();
  w.in[lane][0] = x;
  emu::warp_barrier([](emu::Runtime::Warp& w) {
    unsigned m = w.in[0][0];
    for (int l = 1; l < 32; ++l) m = std::min(m, w.in[l][0]);
    for (int l = 0; l < 32; ++l) w.out[l][0] = m;
  });
  return w.out[lane][0];
}
inline float __shfl_sync(unsigned, float x, int src) {
  emu::Runtime::Warp& w = emu::rt().warps[emu::this_warp()];
  const int lane = emu::this_lane();
  w.fin[lane][0] = x;
  w.in[lane][0] = unsigned(src);
  emu::warp_barrier([](emu::Runtime::Warp& w) {
    for (int l = 0; l < 32; ++l) w.fout[l][0] = w.fin[int(w.in[l][0]) & 31][0];
  });
  return w.fout[lane][0];
}
