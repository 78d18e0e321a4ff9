// The CPU emulation's templates/common/sm90/wgmma_ops.cuh (tests/templates/bwd_emulate.py puts it
// in place of the generated one): wgmma.mma_async m64nNk16, fp32 accumulators, f16 or bf16
// inputs, per warpgroup D (64 x N) = A (64 x 16) . B (16 x N) + (accumulate ? D : 0), from the PTX
// ISA's definitions:
// - Register fragments: warp w of the warpgroup holds rows 16w .. 16w + 15; lane 4g + t holds of
//   D, for n8 tile j, d[4j], d[4j + 1] at row g, columns 8j + 2t, + 1 and d[4j + 2], d[4j + 3] at
//   row g + 8; of A (rs), mma.m16n8k16's A fragment: a0 (g, k 2t, 2t + 1), a1 (g + 8, same k),
//   a2 (g, k 2t + 8, 2t + 9), a3 (g + 8, same), the lower k in the low half.
// - Shared-memory operands through matrix descriptors (wgmma.cuh), 128-byte swizzle only (what
//   the emulated kernels use; the others abort), base offset 0. K-major (A always; B with
//   kTransB = 0): row r (M of A, N of B) at (r / 8) stride + (r % 8) 128 bytes, its 16 k
//   contiguous; the leading offset is unused. MN-major (B with kTransB = 1): element n of k row
//   at (n / 64) leading + (n % 64) 2 + (k / 8) stride + (k % 8) 128 bytes. The swizzle acts on the
//   final address: its 16-byte chunk (bits 4-6) XOR its 128-byte row (bits 7-9).
// Each k's product is added in fp32 in k order (the tensor cores' own rounding is not modelled).
// The wgmma is recorded when the warpgroup's 128 threads have issued it and runs at the wait for
// its group (wgmma.cuh): shared memory and accumulators are read then, A's registers at issue.
#pragma once

#include "common/ptx.cuh"

namespace fj::sm90 {

namespace emu_wgmma {

constexpr int kM = 64, kK = 16;
constexpr int kRowBytes = 128;  // the 128-byte swizzle's row (and atom width)
constexpr int kGroupRows = 8;   // core matrices' rows: the stride offset's step
constexpr int kAtomElems = kRowBytes / 2;

// One thread's operands of the wgmma being issued.
struct Operands {
  float* d;
  unsigned a[4];
  unsigned long long desc_a, desc_b;
  int accumulate;
};
constexpr int kMaxThreads = 1024;
inline Operands& operands_of(int tid) {
  static Operands slots[kMaxThreads];
  return slots[tid];
}

struct Matrix {
  unsigned start, leading, stride;
};
inline Matrix decode(unsigned long long desc) {
  constexpr unsigned long long kB128 = 1;
  if (desc >> 62 != kB128 || (desc >> 49 & 7u)) {
    std::fprintf(stderr, "emu: wgmma descriptor 0x%016llx: only the 128-byte swizzle at base offset 0 is emulated\n",
                 desc);
    std::abort();
  }
  return {unsigned(desc & 0x3FFFu) << 4, unsigned(desc >> 16 & 0x3FFFu) << 4, unsigned(desc >> 32 & 0x3FFFu) << 4};
}
inline float element(unsigned addr, bool bf16) {
  addr ^= (addr >> 7 & 7u) << 4;
  if (addr % 2 || addr + 2 > kEmuSmemBytes) {
    std::fprintf(stderr, "emu: wgmma operand address 0x%x misaligned or outside shared memory\n", addr);
    std::abort();
  }
  std::uint16_t h;
  std::memcpy(&h, smem_raw + addr, 2);
  return bf16 ? flashjit::bf16_to_float(h) : flashjit::f16_to_float(h);
}
inline float k_major(const Matrix& m, int row, int k, bool bf16) {
  return element(m.start + unsigned(row / kGroupRows) * m.stride + unsigned(row % kGroupRows * kRowBytes + 2 * k), bf16);
}
inline float mn_major(const Matrix& m, int n, int k, bool bf16) {
  return element(m.start + unsigned(n / kAtomElems) * m.leading + unsigned(n % kAtomElems * 2) +
                     unsigned(k / kGroupRows) * m.stride + unsigned(k % kGroupRows * kRowBytes),
                 bf16);
}

// The recorded wgmma, from the warpgroup's 128 threads' operands (in thread order).
template <int N>
void run(const std::vector<Operands>& ops, bool a_regs, bool bf16, bool trans_b) {
  auto half = [bf16](unsigned reg, int e) {
    const std::uint16_t h = std::uint16_t(reg >> (16 * e));
    return bf16 ? flashjit::bf16_to_float(h) : flashjit::f16_to_float(h);
  };
  float A[kM][kK], B[kK][N];
  if (a_regs) {
    for (int t = 0; t < emu::kWarpgroupThreads; ++t) {
      const int row = 16 * (t / 32) + t % 32 / 4, k = 2 * (t % 4);
      for (int e = 0; e < 2; ++e) {
        A[row][k + e] = half(ops[t].a[0], e);
        A[row + 8][k + e] = half(ops[t].a[1], e);
        A[row][k + 8 + e] = half(ops[t].a[2], e);
        A[row + 8][k + 8 + e] = half(ops[t].a[3], e);
      }
    }
  } else {
    const Matrix a = decode(ops[0].desc_a);
    for (int m = 0; m < kM; ++m)
      for (int k = 0; k < kK; ++k) A[m][k] = k_major(a, m, k, bf16);
  }
  const Matrix b = decode(ops[0].desc_b);
  for (int k = 0; k < kK; ++k)
    for (int n = 0; n < N; ++n) B[k][n] = trans_b ? mn_major(b, n, k, bf16) : k_major(b, n, k, bf16);
  const bool accumulate = ops[0].accumulate != 0;
  for (int t = 0; t < emu::kWarpgroupThreads; ++t) {
    const int lane = t % 32, row0 = 16 * (t / 32) + lane / 4;
    for (int i = 0; i < N / 2; ++i) {
      const int row = row0 + 8 * (i >> 1 & 1), col = 8 * (i >> 2) + 2 * (lane % 4) + (i & 1);
      float acc = accumulate ? ops[t].d[i] : 0.f;
      for (int k = 0; k < kK; ++k) acc += A[row][k] * B[k][col];
      ops[t].d[i] = acc;
    }
  }
}

// A thread issues; the last of its warpgroup records the wgmma (the descriptors and the
// accumulate flag must agree across the warpgroup: they are one instruction's operands).
template <int N>
void issue(float (&d)[N / 2], const unsigned* a, unsigned long long desc_a, unsigned long long desc_b, int accumulate,
           bool bf16, bool trans_b) {
  Operands& mine = operands_of(int(threadIdx.x));
  mine.d = d;
  for (int i = 0; i < 4; ++i) mine.a[i] = a ? a[i] : 0u;
  mine.desc_a = desc_a, mine.desc_b = desc_b, mine.accumulate = accumulate != 0;
  const int first = emu::this_warpgroup() * emu::kWarpgroupThreads;
  emu::warpgroup_barrier([=](emu::Runtime::Warpgroup& wg) {
    std::vector<Operands> ops(&operands_of(first), &operands_of(first) + emu::kWarpgroupThreads);
    for (const Operands& o : ops)
      if ((!a && o.desc_a != ops[0].desc_a) || o.desc_b != ops[0].desc_b || o.accumulate != ops[0].accumulate) {
        std::fprintf(stderr, "emu: a warpgroup's threads disagree on a wgmma's descriptors or accumulate flag\n");
        std::abort();
      }
    const bool a_regs = a != nullptr;
    wg.issued.push_back([ops = std::move(ops), a_regs, bf16, trans_b] { run<N>(ops, a_regs, bf16, trans_b); });
  });
}

}  // namespace emu_wgmma

template <int N>
struct Wgmma {  // m64nNk16: N / 2 fp32 accumulators a thread
  static_assert(N % 16 == 0 && N >= 16 && N <= 256, "wgmma's N: a multiple of 16 up to 256");
  template <bool kBf16, int kTransB>
  static void ss(float (&d)[N / 2], unsigned long long desc_a, unsigned long long desc_b, int accumulate) {
    emu_wgmma::issue<N>(d, nullptr, desc_a, desc_b, accumulate, kBf16, kTransB != 0);
  }
  template <bool kBf16, int kTransB>
  static void rs(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long desc_b, int accumulate) {
    emu_wgmma::issue<N>(d, a, 0, desc_b, accumulate, kBf16, kTransB != 0);
  }
};

}  // namespace fj::sm90
