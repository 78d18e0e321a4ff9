// The CPU emulation's templates/common/ptx.cuh (tests/templates/bwd_emulate.py puts it in place
// of the real one): the same functions, each computing what its PTX instruction is defined to
// compute, warp-collective ones (ldmatrix, mma) over the warp's 32 fibers (emu_runtime.hpp).
#pragma once

#include "emu_runtime.hpp"
#include "base/host_float.hpp"

#define FJ_DEVICE inline

// The dynamic shared memory every CTA uses (one CTA runs at a time), defined by the test driver.
constexpr unsigned kEmuSmemBytes = 256 * 1024;
extern unsigned char smem_raw[];

namespace fj {

// Shared-space addresses are offsets into the one dynamic shared buffer (bwd_emu_main.cpp's).
inline unsigned smem_addr(const void* p) {
  const std::ptrdiff_t off = static_cast<const unsigned char*>(p) - smem_raw;
  if (off < 0 || off >= std::ptrdiff_t(kEmuSmemBytes)) {
    std::fprintf(stderr, "emu: smem_addr of a pointer outside shared memory\n");
    std::abort();
  }
  return unsigned(off);
}

inline void store_shared_zero16(void* p) { std::memset(p, 0, 16); }

inline int lane_id() { return emu::this_lane(); }

// cp.async: the copy happens at once (the waits then have nothing to wait for); src_bytes < size
// zero-fills the rest.
template <int kBytes>
inline void cp_async(void* smem, const void* gmem, int src_bytes) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async moves 4, 8 or 16 bytes");
  if (reinterpret_cast<std::uintptr_t>(smem) % kBytes || (src_bytes && reinterpret_cast<std::uintptr_t>(gmem) % kBytes)) {
    std::fprintf(stderr, "emu: misaligned cp.async of %d bytes\n", kBytes);
    std::abort();
  }
  const int n = src_bytes < kBytes ? src_bytes : kBytes;
  std::memcpy(smem, gmem, std::size_t(n));
  std::memset(static_cast<char*>(smem) + n, 0, std::size_t(kBytes - n));
}
inline void cp_async_16_at(unsigned smem, const void* gmem, int src_bytes) {
  if (smem + 16 > kEmuSmemBytes) {
    std::fprintf(stderr, "emu: cp.async to a shared-space address past shared memory\n");
    std::abort();
  }
  cp_async<16>(smem_raw + smem, gmem, src_bytes);
}
inline void cp_async_commit() {}
template <int kPending>
inline void cp_async_wait() {}
inline void cp_async_wait_all() {}
// cp.async.mbarrier.arrive.noinc: an arrival once this thread's copies landed (they have), which
// the barrier's expected count includes.
inline void cp_async_arrive_noinc(unsigned long long* bar) { emu::mbarrier_arrive(bar); }

// The row addresses of an ldmatrix or stmatrix .x4 (w.addr, lanes 8j..8j+7: matrix j's rows):
// each matrix's 8 rows move in one pass, so their 16-byte chunks must sit in 8 distinct groups of
// 4 banks (what the row pad, or the swizzle, is for).
inline void check_matrix_rows(const emu::Runtime::Warp& w, const char* what) {
  constexpr long long kChunkBytes = 16, kChunkGroups = 8;
  for (int j = 0; j < 4; ++j) {
    unsigned seen = 0;
    for (int l = 8 * j; l < 8 * j + 8; ++l) {
      const long long chunk = (static_cast<const unsigned char*>(w.addr[l]) - smem_raw) / kChunkBytes;
      const unsigned bit = 1u << (chunk % kChunkGroups);
      if (seen & bit) {
        std::fprintf(stderr, "emu: %s: shared-memory bank conflict (matrix %d, lane %d, chunk %lld)\n", what, j, l,
                     chunk);
        std::abort();
      }
      seen |= bit;
    }
  }
}

// ldmatrix .x4: lanes 8j..8j+7 give the row addresses of matrix j; lane L receives, of each
// matrix, row L/4's elements 2(L%4) and 2(L%4)+1 (plain) or column L/4's elements of rows
// 2(L%4) and 2(L%4)+1 (.trans), the lower index in the low half.
inline void ldmatrix_any(unsigned (&r)[4], const void* smem, bool trans) {
  emu::Runtime::Warp& w = emu::rt().warps[emu::this_warp()];
  const int lane = emu::this_lane();
  if (reinterpret_cast<std::uintptr_t>(smem) % 16) {
    std::fprintf(stderr, "emu: ldmatrix row address not 16-byte aligned\n");
    std::abort();
  }
  w.addr[lane] = smem;
  w.in[lane][0] = trans;
  emu::warp_barrier([](emu::Runtime::Warp& w) {
    for (int l = 0; l < 32; ++l)
      if (w.in[l][0] != w.in[0][0]) {
        std::fprintf(stderr, "emu: lanes disagree on ldmatrix .trans\n");
        std::abort();
      }
    const bool t = w.in[0][0];
    check_matrix_rows(w, "ldmatrix");
    for (int l = 0; l < 32; ++l)
      for (int j = 0; j < 4; ++j) {
        std::uint16_t lo, hi;
        if (!t) {
          const std::uint16_t* row = static_cast<const std::uint16_t*>(w.addr[8 * j + l / 4]);
          lo = row[2 * (l % 4)], hi = row[2 * (l % 4) + 1];
        } else {
          lo = static_cast<const std::uint16_t*>(w.addr[8 * j + 2 * (l % 4)])[l / 4];
          hi = static_cast<const std::uint16_t*>(w.addr[8 * j + 2 * (l % 4) + 1])[l / 4];
        }
        w.out[l][j] = unsigned(lo) | unsigned(hi) << 16;
      }
  });
  for (int j = 0; j < 4; ++j) r[j] = w.out[lane][j];
}
inline void ldmatrix_x4(unsigned (&r)[4], const void* smem) { ldmatrix_any(r, smem, false); }
inline void ldmatrix_x4_trans(unsigned (&r)[4], const void* smem) { ldmatrix_any(r, smem, true); }
inline void ldmatrix_x4_at(unsigned (&r)[4], unsigned addr) { ldmatrix_any(r, smem_raw + addr, false); }
inline void ldmatrix_x4_trans_at(unsigned (&r)[4], unsigned addr) { ldmatrix_any(r, smem_raw + addr, true); }
// stmatrix .x4 .trans (sm_90), ldmatrix .trans's inverse: lanes 8j..8j+7 give the row addresses
// of matrix j as stored; lane L's register j holds elements (L/4, 2(L%4)) and (L/4, 2(L%4)+1)
// of matrix j (the lower in the low half), stored transposed: at column L/4 of rows 2(L%4) and
// 2(L%4)+1. (bwd_sm90/backward.cu spells this one in its own asm; bwd_emulate.py drops that
// definition from the copied templates, so the kernel's call finds this one.)
inline void stmatrix_x4_trans(unsigned addr, const unsigned (&r)[4]) {
  emu::Runtime::Warp& w = emu::rt().warps[emu::this_warp()];
  const int lane = emu::this_lane();
  if (addr % 16 || addr + 16 > kEmuSmemBytes) {
    std::fprintf(stderr, "emu: stmatrix row address not 16-byte aligned or outside shared memory\n");
    std::abort();
  }
  w.addr[lane] = smem_raw + addr;
  for (int j = 0; j < 4; ++j) w.in[lane][j] = r[j];
  w.in[lane][4] = addr;
  emu::warp_barrier([](emu::Runtime::Warp& w) {
    check_matrix_rows(w, "stmatrix");
    for (int l = 0; l < 32; ++l)
      for (int j = 0; j < 4; ++j)
        for (int e = 0; e < 2; ++e) {
          const std::uint16_t h = std::uint16_t(w.in[l][j] >> (16 * e));
          std::memcpy(smem_raw + w.in[8 * j + 2 * (l % 4) + e][4] + 2 * (l / 4), &h, 2);
        }
  });
}
inline void st_shared_b32(unsigned addr, unsigned v) {
  if (addr % 4 || addr + 4 > kEmuSmemBytes) {
    std::fprintf(stderr, "emu: st.shared.b32 misaligned or outside shared memory\n");
    std::abort();
  }
  std::memcpy(smem_raw + addr, &v, 4);
}

// The fp32 fragments' shared loads and stores (kWords 4-byte words a lane), warp-collective here
// so that each also checks what the kernels' row padding is for: no bank conflicts. 32 banks of
// a word; a 64-bit access is served a half-warp at a time, so its conflicts count within halves.
constexpr int kEmuBanks = 32;
inline void check_shared(unsigned addr, int words, const char* what) {
  if (addr % (4u * unsigned(words)) || addr + 4u * unsigned(words) > kEmuSmemBytes) {
    std::fprintf(stderr, "emu: %s misaligned or outside shared memory\n", what);
    std::abort();
  }
  emu::Runtime::Warp& w = emu::rt().warps[emu::this_warp()];
  w.in[emu::this_lane()][0] = addr;
  w.in[emu::this_lane()][1] = unsigned(words);
  emu::warp_barrier([what](emu::Runtime::Warp& w) {
    const int group = w.in[0][1] == 1 ? 32 : 16;  // lanes served together
    for (int l0 = 0; l0 < 32; l0 += group) {
      long long word_in_bank[kEmuBanks];
      for (long long& x : word_in_bank) x = -1;
      for (int l = l0; l < l0 + group; ++l)
        for (unsigned i = 0; i < w.in[l][1]; ++i) {
          const long long word = w.in[l][0] / 4 + i;
          long long& seen = word_in_bank[word % kEmuBanks];
          if (seen >= 0 && seen != word) {
            std::fprintf(stderr, "emu: %s: shared-memory bank conflict (lane %d, word %lld, bank %lld)\n", what, l, word,
                         word % kEmuBanks);
            std::abort();
          }
          seen = word;
        }
    }
  });
}
inline float ld_shared_f32(unsigned addr) {
  check_shared(addr, 1, "ld.shared.f32");
  float x;
  std::memcpy(&x, smem_raw + addr, 4);
  return x;
}
inline void ld_shared_v2_f32(float& x, float& y, unsigned addr) {
  check_shared(addr, 2, "ld.shared.v2.f32");
  std::memcpy(&x, smem_raw + addr, 4);
  std::memcpy(&y, smem_raw + addr + 4, 4);
}
inline void st_shared_v2_f32(unsigned addr, float x, float y) {
  check_shared(addr, 2, "st.shared.v2.f32");
  std::memcpy(smem_raw + addr, &x, 4);
  std::memcpy(smem_raw + addr + 4, &y, 4);
}

// mma.m16n8k16.row.col, fp32 accumulators: lane L = 4g + t holds A rows g, g+8 (k 2t, 2t+1 in
// a0/a1, k 2t+8, 2t+9 in a2/a3), B column g (k 2t, 2t+1 in b0, 2t+8, 2t+9 in b1), C/D rows g, g+8
// and columns 2t, 2t+1.
// D = C + A.B of an m16n8 tile into every lane's four D registers (lane L = 4g + t holds rows g
// and g + 8, columns 2t and 2t + 1), for either k.
template <int K>
inline void mma_store_d(emu::Runtime::Warp& w, const float (&A)[16][K], const float (&B)[K][8], const float (&C)[16][8]) {
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int i = 0; i < 4; ++i) {
      const int row = g + (i / 2) * 8, col = 2 * t + (i & 1);
      float acc = C[row][col];
      for (int k = 0; k < K; ++k) acc += A[row][k] * B[k][col];
      w.fout[l][i] = acc;
    }
  }
}
inline void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1, bool bf16) {
  emu::Runtime::Warp& w = emu::rt().warps[emu::this_warp()];
  const int lane = emu::this_lane();
  for (int i = 0; i < 4; ++i) w.in[lane][i] = a[i], w.fin[lane][i] = d[i];
  w.in[lane][4] = b0, w.in[lane][5] = b1, w.in[lane][6] = bf16;
  emu::warp_barrier([](emu::Runtime::Warp& w) {
    const bool bf = w.in[0][6];
    auto val = [bf](unsigned reg, int half) {
      const std::uint16_t h = std::uint16_t(half ? reg >> 16 : reg & 0xffffu);
      return bf ? flashjit::bf16_to_float(h) : flashjit::f16_to_float(h);
    };
    float A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < 32; ++l) {
      const int g = l / 4, t = l % 4;
      for (int e = 0; e < 2; ++e) {
        A[g][2 * t + e] = val(w.in[l][0], e);
        A[g + 8][2 * t + e] = val(w.in[l][1], e);
        A[g][2 * t + 8 + e] = val(w.in[l][2], e);
        A[g + 8][2 * t + 8 + e] = val(w.in[l][3], e);
        B[2 * t + e][g] = val(w.in[l][4], e);
        B[2 * t + 8 + e][g] = val(w.in[l][5], e);
        C[g][2 * t + e] = w.fin[l][e];
        C[g + 8][2 * t + e] = w.fin[l][2 + e];
      }
    }
    mma_store_d(w, A, B, C);
  });
  for (int i = 0; i < 4; ++i) d[i] = w.fout[lane][i];
}
inline void mma_f16_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) { mma_16816(d, a, b0, b1, false); }
inline void mma_bf16_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) { mma_16816(d, a, b0, b1, true); }
// mma.m16n8k8.row.col.f32.tf32.tf32.f32: lane L = 4g + t holds A (g, t), (g + 8, t), (g, t + 4),
// (g + 8, t + 4) in a0..a3, B (k t, column g), (k t + 4, column g) in b0, b1, C/D as m16n8k16.
// Every operand must be a tf32 (to_tf32's result: the low 13 bits zero), which the kernels'
// splits guarantee; the products of two tf32 are exact in fp32, summed in fp32.
constexpr unsigned kTf32DroppedBits = 0x1fffu;  // the fp32 mantissa bits tf32 lacks
inline void mma_tf32_1688(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  emu::Runtime::Warp& w = emu::rt().warps[emu::this_warp()];
  const int lane = emu::this_lane();
  for (int i = 0; i < 4; ++i) w.in[lane][i] = a[i], w.fin[lane][i] = d[i];
  w.in[lane][4] = b0, w.in[lane][5] = b1;
  emu::warp_barrier([](emu::Runtime::Warp& w) {
    auto val = [](unsigned reg) {
      if (reg & kTf32DroppedBits) {
        std::fprintf(stderr, "emu: tf32 mma operand 0x%08x is not a tf32 (low mantissa bits set)\n", reg);
        std::abort();
      }
      float f;
      std::memcpy(&f, &reg, 4);
      return f;
    };
    float A[16][8], B[8][8], C[16][8];
    for (int l = 0; l < 32; ++l) {
      const int g = l / 4, t = l % 4;
      A[g][t] = val(w.in[l][0]), A[g + 8][t] = val(w.in[l][1]);
      A[g][t + 4] = val(w.in[l][2]), A[g + 8][t + 4] = val(w.in[l][3]);
      B[t][g] = val(w.in[l][4]), B[t + 4][g] = val(w.in[l][5]);
      for (int e = 0; e < 2; ++e) C[g][2 * t + e] = w.fin[l][e], C[g + 8][2 * t + e] = w.fin[l][2 + e];
    }
    mma_store_d(w, A, B, C);
  });
  for (int i = 0; i < 4; ++i) d[i] = w.fout[lane][i];
}

inline unsigned pack_f16x2(float lo, float hi) { return unsigned(flashjit::float_to_f16(lo)) | unsigned(flashjit::float_to_f16(hi)) << 16; }
inline unsigned pack_bf16x2(float lo, float hi) {
  return unsigned(flashjit::float_to_bf16(lo)) | unsigned(flashjit::float_to_bf16(hi)) << 16;
}
inline float f16_to_f32(unsigned short h) { return flashjit::f16_to_float(h); }
inline float bf16_to_f32(unsigned short h) { return flashjit::bf16_to_float(h); }
inline unsigned short f32_to_f16(float f) { return flashjit::float_to_f16(f); }
inline unsigned short f32_to_bf16(float f) { return flashjit::float_to_bf16(f); }
// cvt.rna.tf32.f32: x rounded to 10 mantissa bits, ties away from zero (on the magnitude's bits,
// so a carry into the exponent rounds up to the next binade or to infinity); NaN and infinity
// pass through.
inline unsigned to_tf32(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return u;
  constexpr std::uint32_t kHalf = (kTf32DroppedBits + 1) / 2;  // half a tf32 unit in the last place
  return (u + kHalf) & ~kTf32DroppedBits;
}

inline void red_add_v4(float* p, float a, float b, float c, float d) {
  if (reinterpret_cast<std::uintptr_t>(p) % 16) {
    std::fprintf(stderr, "emu: red.v4 address not 16-byte aligned\n");
    std::abort();
  }
  p[0] += a, p[1] += b, p[2] += c, p[3] += d;
}

// CTAs run one after another here, so a flag an earlier CTA sets is already set: a load that
// would have to wait for a later CTA is a deadlock on the GPU too (with one CTA resident).
// A thread never yields while it spins, so the same address loaded this often in a row is a
// thread stuck (far more than every thread of every CTA loading it once).
constexpr long long kEmuMaxSpins = 1ll << 24;
inline int ld_acquire_gpu(const int* p) {
  static const int* last = nullptr;
  static long long repeats = 0;
  repeats = p == last ? repeats + 1 : 0;
  last = p;
  if (repeats > kEmuMaxSpins) {
    std::fprintf(stderr, "emu: deadlock: a CTA waits on a flag no earlier CTA set\n");
    std::abort();
  }
  return *p;
}
inline void st_release_gpu(int* p, int v) { *p = v; }

inline float exp2_approx(float x) { return std::exp2(x); }
inline float rcp_approx(float x) { return 1.f / x; }
inline float tanh_fast(float x) {
  constexpr float kTwoLog2e = 2.8853900817779268f;
  return 1.f - 2.f * rcp_approx(exp2_approx(x * kTwoLog2e) + 1.f);
}
inline float quad_max(float x) {
  x = std::fmax(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return std::fmax(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
inline float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

inline float neg_inf() { return -INFINITY; }

}  // namespace fj
