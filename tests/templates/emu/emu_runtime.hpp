// A CPU stand-in for the CUDA execution model, enough to run the bwd_sm80 kernels' source as
// ordinary C++ (tests/templates/bwd_emulate.py): every thread of a CTA is a fiber (ucontext) on
// one OS thread, __syncthreads is a barrier over the CTA's fibers, and warp-collective
// instructions (ldmatrix, mma, shuffles) are barriers over the warp's 32 fibers whose last
// arriver computes every lane's result from every lane's operands, as the hardware's definition
// of the instruction says. CTAs run one after another. Deadlocks (a barrier some thread never
// reaches) abort with a message instead of hanging.
#pragma once

#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
};

struct Runtime {
  ucontext_t scheduler{};
  std::vector<Fiber> fibers;
  Fiber* current = nullptr;
  std::function<void()> body;
  int threads = 0;
  // __syncthreads
  int cta_arrived = 0;
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

inline int this_lane() { return int(threadIdx.x % 32); }
inline int this_warp() { return int(threadIdx.x / 32); }

// A barrier over the current warp's 32 fibers: the last to arrive runs `last` (which reads
// every lane's operands and writes every lane's results) and releases the others.
template <class F>
void warp_barrier(F&& last) {
  Runtime& r = rt();
  const int w = this_warp();
  if (++r.warps[w].arrived == 32) {
    r.warps[w].arrived = 0;
    last(r.warps[w]);
    for (int l = 0; l < 32; ++l) r.fibers[w * 32 + l].blocked = false;
    return;
  }
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
  r.cta_arrived = 0;
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
      if (f.blocked) continue;
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
