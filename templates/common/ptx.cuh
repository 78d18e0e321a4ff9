// Thin wrappers over the PTX instructions the kernels use. NVRTC compiles these with no host or
// CUDA headers, so types are spelled with builtin integers and floats.
#pragma once

#define FJ_DEVICE __device__ __forceinline__

namespace fj {

FJ_DEVICE unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Sixteen zero bytes at a 16-byte aligned shared-memory address.
FJ_DEVICE void store_shared_zero16(void* p) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(smem_addr(p)), "r"(0u) : "memory");
}

// The lane index as a volatile read: code using it stays where it is written (the compiler may
// not hoist it out of a loop and keep what it derives live across the loop).
FJ_DEVICE int lane_id() {
  int lane;
  asm volatile("mov.u32 %0, %%laneid;\n" : "=r"(lane));
  return lane;
}

// --- asynchronous global -> shared copies (sm_80) -------------------------------------------
// src_bytes < size zero-fills the rest, which is how out-of-range rows become zeros.
// cp_async_16_at: the 16-byte copy to a shared-space address (smem_addr's result plus offsets).
FJ_DEVICE void cp_async_16_at(unsigned smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(src_bytes));
}
template <int kBytes>
FJ_DEVICE void cp_async(void* smem, const void* gmem, int src_bytes) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async moves 4, 8 or 16 bytes");
  if constexpr (kBytes == 16) {
    cp_async_16_at(smem_addr(smem), gmem, src_bytes);
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_addr(smem)),
                 "l"(gmem), "n"(kBytes), "r"(src_bytes));
  }
}
FJ_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
FJ_DEVICE void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending)); }
FJ_DEVICE void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
// Arrives on the mbarrier once every cp.async this thread issued so far has landed, without
// raising its expected count: the barrier counts one arrival per copying thread.
FJ_DEVICE void cp_async_arrive_noinc(unsigned long long* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

// --- shared -> register fragment loads --------------------------------------------------------
FJ_DEVICE void ldmatrix_x4(unsigned (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem)));
}
FJ_DEVICE void ldmatrix_x4_trans(unsigned (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem)));
}

// The same loads from a shared-space address (smem_addr's result plus byte offsets): with the
// arithmetic in 32 bits, ptxas folds an offset's constant part into the instruction's immediate
// (pointer arithmetic in 64 bits needs an add and a conversion per load).
FJ_DEVICE void ldmatrix_x4_at(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
FJ_DEVICE void ldmatrix_x4_trans_at(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// ldmatrix .trans's inverse (sm_90): four 8x8 16-bit matrices, stored transposed; lane l names
// the address of row l % 8 of matrix l / 8 as stored; register i holds matrix i in the m16n8
// fragment order.
FJ_DEVICE void stmatrix_x4_trans(unsigned addr, const unsigned (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}
// Four bytes to a shared-space address (see ldmatrix_x4_at).
FJ_DEVICE void st_shared_b32(unsigned addr, unsigned v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
// fp32 fragments by shared-space address (ldmatrix moves 16-bit elements only): one float, two
// adjacent floats (8-byte aligned), and two adjacent floats stored.
FJ_DEVICE float ld_shared_f32(unsigned addr) {
  float x;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(x) : "r"(addr));
  return x;
}
FJ_DEVICE void ld_shared_v2_f32(float& x, float& y, unsigned addr) {
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(x), "=f"(y) : "r"(addr));
}
FJ_DEVICE void st_shared_v2_f32(unsigned addr, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(x), "f"(y) : "memory");
}

// --- tensor-core products, fp32 accumulators --------------------------------------------------
FJ_DEVICE void mma_f16_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
FJ_DEVICE void mma_bf16_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
FJ_DEVICE void mma_tf32_1688(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// --- conversions --------------------------------------------------------------------------------
// Packs (lo, hi) into one register of two 16-bit values; lo lands in the low half.
FJ_DEVICE unsigned pack_f16x2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
FJ_DEVICE unsigned pack_bf16x2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// Single 16-bit values (the backward's preprocess and convert read and write elements one at a time).
FJ_DEVICE float f16_to_f32(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(h));
  return f;
}
// bf16 is the top half of an fp32: widening is a shift.
FJ_DEVICE float bf16_to_f32(unsigned short h) { return __uint_as_float(unsigned(h) << 16); }
FJ_DEVICE unsigned short f32_to_f16(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(h) : "f"(f));
  return h;
}
FJ_DEVICE unsigned short f32_to_bf16(float f) {
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(f));
  return h;
}
FJ_DEVICE unsigned to_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

// --- global reductions ---------------------------------------------------------------------------
// *p += (a, b, c, d), four consecutive floats (16-byte aligned) in one instruction: sm_90 only
// (PTX 8.1's vector red).
FJ_DEVICE void red_add_v4(float* p, float a, float b, float c, float d) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}

// --- flags between CTAs (bwd_sm80/dq_order.cuh) ------------------------------------------------------
// A load that later loads and reductions of this thread cannot pass, and a store that every write
// this thread has seen (through a barrier: other threads' too) precedes, both at GPU scope.
FJ_DEVICE int ld_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
FJ_DEVICE void st_release_gpu(int* p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// --- math -----------------------------------------------------------------------------------------
FJ_DEVICE float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
FJ_DEVICE float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
// tanh(x) = 1 - 2 / (e^(2x) + 1) on the two fast units: absolute error near 1e-7 (tanh.approx
// is off by up to 2^-11, too coarse for a softcap of 50 in fp16). Saturates to +-1 exactly.
FJ_DEVICE float tanh_fast(float x) {
  constexpr float kTwoLog2e = 2.8853900817779268f;  // 2 log2(e): e^(2x) = 2^(2x log2 e)
  return 1.f - 2.f * rcp_approx(exp2_approx(x * kTwoLog2e) + 1.f);
}
FJ_DEVICE float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
FJ_DEVICE float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

FJ_DEVICE float neg_inf() { return __int_as_float(0xff800000); }

}  // namespace fj
