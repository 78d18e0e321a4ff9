// The two products of the attention inner loop on sm_80 tensor cores (mma.sync), for one warp:
//   S[16*kMTiles x 8*kNTilesS]  = Q_warp . K_slice^T
//   O[16*kMTiles x 8*kNTilesO] += P . V_slice       (P is S after softmax, still in registers)
// Shared by the families that run mma.sync warps; each decides which rows and which keys a warp
// owns (fa2_sm80: a warp's own rows against a whole key tile; decode: one row tile against a
// warp's slice of the keys). Accumulators use the m16n8 C layout for every input type, so
// masking and softmax are shared; only fragment loading differs: 16-bit inputs use ldmatrix and
// m16n8k16, fp32 inputs use scalar shared loads and m16n8k8 tf32 (three products per step when
// exact fp32 is asked for).
#pragma once

#include "common/ptx.cuh"
#include "common/tile_verbs.cuh"

namespace fj::sm80 {

struct Frag {
  int lane;
  FJ_DEVICE int g() const { return lane >> 2; }  // row group of the C/A layouts
  FJ_DEVICE int t() const { return lane & 3; }   // thread in quad
};

// Exact mode splits x = big + small (both tf32) and sums big*big + big*small + small*big, which
// keeps about fp32 accuracy (the dropped small*small term is below fp32 rounding).
struct Tf32Pair { unsigned big, small; };

// Elem: the element bits (unsigned short for 16-bit types, float for fp32); kDtypeId: 0 f16,
// 1 bf16, 2 f32 (DType on the host); strides are the shared tiles' row strides in elements.
template <typename Elem, int kDtypeId, bool kTf32, int kMTiles, int kNTilesS, int kNTilesO, int kDQK, int kStrideQK,
          int kStrideV>
struct WarpGemm {
  static_assert(kNTilesS % 2 == 0, "keys come in k16 steps: an even number of n8 score tiles");
  // ------------------------------------------------------------------ 16-bit (f16 / bf16) --
  static FJ_DEVICE void mma16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    if constexpr (kDtypeId == 1) mma_bf16_16816(d, a, b0, b1);
    else mma_f16_16816(d, a, b0, b1);
  }
  static FJ_DEVICE unsigned pack16(float lo, float hi) {
    if constexpr (kDtypeId == 1) return pack_bf16x2(lo, hi);
    else return pack_f16x2(lo, hi);
  }

  // A fragment of Q rows [row0, row0+16) at head-dim step kk (16 columns).
  static FJ_DEVICE void load_q_frag16(unsigned (&a)[4], const Elem* sQ, int row0, int kk, int lane) {
    ldmatrix_x4(a, sQ + (row0 + (lane & 15)) * kStrideQK + kk * 16 + (lane >> 4) * 8);
  }

  template <bool kFromRegs>
  static FJ_DEVICE void gemm_qk16(float (&s)[kMTiles][kNTilesS][4], const unsigned (*qreg)[kMTiles][4],
                           const Elem* sQ, const Elem* sK, int warp_row0, int lane) {
  #pragma unroll
    for (int kk = 0; kk < kDQK / 16; ++kk) {
      unsigned qa[kMTiles][4];
  #pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        if constexpr (kFromRegs) {
  #pragma unroll
          for (int i = 0; i < 4; ++i) qa[mt][i] = qreg[kk][mt][i];
        } else {
          load_q_frag16(qa[mt], sQ, warp_row0 + mt * 16, kk, lane);
        }
      }
  #pragma unroll
      for (int np = 0; np < kNTilesS / 2; ++np) {
        unsigned kb[4];
        // Matrices: keys 0-7 / k 0-7, keys 0-7 / k 8-15, keys 8-15 / k 0-7, keys 8-15 / k 8-15.
        ldmatrix_x4(kb, sK + (np * 16 + (lane & 7) + (lane >> 4) * 8) * kStrideQK + kk * 16 +
                            ((lane >> 3) & 1) * 8);
  #pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma16(s[mt][2 * np], qa[mt], kb[0], kb[1]);
          mma16(s[mt][2 * np + 1], qa[mt], kb[2], kb[3]);
        }
      }
    }
  }

  static FJ_DEVICE void gemm_pv16(float (&o)[kMTiles][kNTilesO][4], const float (&p)[kMTiles][kNTilesS][4],
                           const Elem* sV, int lane) {
  #pragma unroll
    for (int kk = 0; kk < kNTilesS / 2; ++kk) {
      // The C layout of two adjacent n8 score tiles is exactly the A layout of one k16 step.
      unsigned pa[kMTiles][4];
  #pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        pa[mt][0] = pack16(p[mt][2 * kk][0], p[mt][2 * kk][1]);
        pa[mt][1] = pack16(p[mt][2 * kk][2], p[mt][2 * kk][3]);
        pa[mt][2] = pack16(p[mt][2 * kk + 1][0], p[mt][2 * kk + 1][1]);
        pa[mt][3] = pack16(p[mt][2 * kk + 1][2], p[mt][2 * kk + 1][3]);
      }
  #pragma unroll
      for (int np = 0; np < kNTilesO / 2; ++np) {
        unsigned vb[4];
        // Transposed matrices: keys 0-7 / d 0-7, keys 8-15 / d 0-7, keys 0-7 / d 8-15, keys 8-15 / d 8-15.
        ldmatrix_x4_trans(vb, sV + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kStrideV +
                                  np * 16 + (lane >> 4) * 8);
  #pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma16(o[mt][2 * np], pa[mt], vb[0], vb[1]);
          mma16(o[mt][2 * np + 1], pa[mt], vb[2], vb[3]);
        }
      }
    }
  }

  // --------------------------------------------------------------------------- fp32 inputs --
  static FJ_DEVICE Tf32Pair split_tf32(float x) {
    Tf32Pair r;
    r.big = to_tf32(x);
    r.small = kTf32 ? 0u : to_tf32(x - __uint_as_float(r.big));
    return r;
  }
  static FJ_DEVICE void mma_f32(float (&d)[4], const Tf32Pair (&a)[4], Tf32Pair b0, Tf32Pair b1) {
    const unsigned ab[4] = {a[0].big, a[1].big, a[2].big, a[3].big};
    if constexpr (!kTf32) {
      const unsigned as[4] = {a[0].small, a[1].small, a[2].small, a[3].small};
      mma_tf32_1688(d, as, b0.big, b1.big);
      mma_tf32_1688(d, ab, b0.small, b1.small);
    }
    mma_tf32_1688(d, ab, b0.big, b1.big);
  }

  // Takes Elem pointers so the 16-bit instantiation still type-checks; only fp32 variants call it.
  static FJ_DEVICE void gemm_qk32(float (&s)[kMTiles][kNTilesS][4], const Elem* sQ_, const Elem* sK_,
                           int warp_row0, int lane) {
    const float* sQ = reinterpret_cast<const float*>(sQ_);
    const float* sK = reinterpret_cast<const float*>(sK_);
    const Frag f{lane};
  #pragma unroll
    for (int kk = 0; kk < kDQK / 8; ++kk) {
      Tf32Pair qa[kMTiles][4];
  #pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        const float* q = sQ + (warp_row0 + mt * 16 + f.g()) * kStrideQK + kk * 8 + f.t();
        qa[mt][0] = split_tf32(q[0]);
        qa[mt][1] = split_tf32(q[8 * kStrideQK]);
        qa[mt][2] = split_tf32(q[4]);
        qa[mt][3] = split_tf32(q[8 * kStrideQK + 4]);
      }
  #pragma unroll
      for (int nt = 0; nt < kNTilesS; ++nt) {
        const float* k = sK + (nt * 8 + f.g()) * kStrideQK + kk * 8 + f.t();
        const Tf32Pair b0 = split_tf32(k[0]), b1 = split_tf32(k[4]);
  #pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) mma_f32(s[mt][nt], qa[mt], b0, b1);
      }
    }
  }

  // Exact mode sums each tile's product in fresh registers and adds it to o with ordinary fp32
  // adds: tensor-core accumulation truncates, and over thousands of keys that bias alone cost
  // 3e-5 relative error at Sk = 4096 (measured), three times the exact-fp32 bound.
  static FJ_DEVICE void gemm_pv32(float (&o_out)[kMTiles][kNTilesO][4], const float (&p)[kMTiles][kNTilesS][4],
                           const Elem* sV_, int lane) {
    float o_tile[kTf32 ? 1 : kMTiles][kTf32 ? 1 : kNTilesO][4];
    if constexpr (!kTf32) zero_tile(o_tile);
    auto& o = *reinterpret_cast<float(*)[kMTiles][kNTilesO][4]>(kTf32 ? &o_out[0][0][0] : &o_tile[0][0][0]);
    const float* sV = reinterpret_cast<const float*>(sV_);
    const Frag f{lane};
    // The A layout of m16n8k8 wants P(g, t) and P(g, t+4); the C layout holds P(g, 2t..2t+1):
    // fetch them from the lanes of the same quad row.
    const int src_lo = (lane & ~3) | (f.t() >> 1);
    const int src_hi = (lane & ~3) | (2 + (f.t() >> 1));
    const bool odd = f.t() & 1;
  #pragma unroll
    for (int kk = 0; kk < kNTilesS; ++kk) {
      Tf32Pair pa[kMTiles][4];
  #pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        const float* c = p[mt][kk];
        const float lo0 = __shfl_sync(0xffffffffu, c[0], src_lo), lo1 = __shfl_sync(0xffffffffu, c[1], src_lo);
        const float lo2 = __shfl_sync(0xffffffffu, c[2], src_lo), lo3 = __shfl_sync(0xffffffffu, c[3], src_lo);
        const float hi0 = __shfl_sync(0xffffffffu, c[0], src_hi), hi1 = __shfl_sync(0xffffffffu, c[1], src_hi);
        const float hi2 = __shfl_sync(0xffffffffu, c[2], src_hi), hi3 = __shfl_sync(0xffffffffu, c[3], src_hi);
        pa[mt][0] = split_tf32(odd ? lo1 : lo0);
        pa[mt][1] = split_tf32(odd ? lo3 : lo2);
        pa[mt][2] = split_tf32(odd ? hi1 : hi0);
        pa[mt][3] = split_tf32(odd ? hi3 : hi2);
      }
  #pragma unroll
      for (int nt = 0; nt < kNTilesO; ++nt) {
        const float* v = sV + (kk * 8 + f.t()) * kStrideV + nt * 8 + f.g();
        const Tf32Pair b0 = split_tf32(v[0]), b1 = split_tf32(v[4 * kStrideV]);
  #pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) mma_f32(o[mt][nt], pa[mt], b0, b1);
      }
    }
    if constexpr (!kTf32) add_tile(o_out, o_tile);
  }
};

}  // namespace fj::sm80
