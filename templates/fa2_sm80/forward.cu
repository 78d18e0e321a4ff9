// fa2_sm80: FlashAttention-2 style forward for sm_80 and newer (mma.sync tensor cores,
// ldmatrix, cp.async multi-stage pipeline). One CTA owns kBlockM query rows of one (batch,
// head); its warps split the rows and stream key/value tiles of kBlockN keys through a ring of
// kStages shared buffers, keeping the output and the softmax statistics in registers.
#include "common/params.cuh"
#include "common/tile_io.cuh"
#include "fa2_sm80/gemm.cuh"
#include "fa2_sm80/softmax.cuh"

namespace fj::fa2 {

FJ_DEVICE const Elem* elem_ptr(const void* base, const long long (&st)[4], int b, int s, int h) {
  return static_cast<const Elem*>(base) + b * st[0] + s * st[1] + h * st[2];
}

FJ_DEVICE void write_output(const FjFwdParams& p, float (&o)[kMTiles][kNTilesO][4],
                            SoftmaxState& sm, Elem* smem, int m0, int warp_row0, int b, int head,
                            int tid, int lane) {
  const Frag f{lane};
  // Everyone is done with the key/value buffers before the output tile reuses them.
  cp_async_wait<0>();
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float sum = quad_sum(sm.row_sum[mt][h]);
      const float inv = sum > 0.f ? 1.f / sum : 0.f;  // rows that saw no key give zeros
      const int row = warp_row0 + mt * 16 + h * 8 + f.g();
#pragma unroll
      for (int nt = 0; nt < kNTilesO; ++nt) {
        const float x0 = o[mt][nt][2 * h] * inv, x1 = o[mt][nt][2 * h + 1] * inv;
        Elem* dst = smem + row * kStrideO + nt * 8 + 2 * f.t();
        if constexpr (k16Bit) {
          *reinterpret_cast<unsigned*>(dst) = pack16(x0, x1);
        } else {
          dst[0] = x0;
          dst[1] = x1;
        }
      }
      if constexpr (kWriteLse) {
        const int grow = m0 + row;
        if (f.t() == 0 && grow < p.seqlen_q) {
          // Natural-log LSE; -inf for a row that saw no key (log of an empty sum).
          const float lse = sum > 0.f ? (sm.row_max[mt][h] * p.scale_log2 + log2f(sum)) * 0.69314718056f
                                      : neg_inf();
          p.lse[b * p.lse_stride[0] + head * p.lse_stride[1] + grow * p.lse_stride[2]] = lse;
        }
      }
    }
  }
  __syncthreads();
  Elem* out = static_cast<Elem*>(p.o) + b * p.o_stride[0] + m0 * p.o_stride[1] + head * p.o_stride[2];
  store_tile<Elem, kBlockM, kHeadDimV, kStrideO, kVec, kThreads>(
      out, p.o_stride[1], p.o_stride[3], smem, min(kBlockM, p.seqlen_q - m0), tid);
}

}  // namespace fj::fa2

extern "C" __global__ void __launch_bounds__(fj::fa2::kThreads)
flashjit_fwd(const __grid_constant__ FjFwdParams p) {
  using namespace fj;
  using namespace fj::fa2;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Elem* sQ = reinterpret_cast<Elem*>(smem_raw);
  Elem* sKV = sQ + kBlockM * kStrideQK;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // Causal: the last query blocks have the most keys; start them first.
  const int m_block = kCausal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int head = blockIdx.y, b = blockIdx.z;
  const int kv_head = kGqa ? head / p.group : head;
  const int m0 = m_block * kBlockM;
  const int warp_row0 = warp * kRowsPerWarp;

  const int n_end = kCausal ? min(p.seqlen_k, m0 + kBlockM + p.causal_offset) : p.seqlen_k;
  const int n_blocks = n_end > 0 ? (n_end + kBlockN - 1) / kBlockN : 0;

  const Elem* gQ = elem_ptr(p.q, p.q_stride, b, m0, head);
  const Elem* gK = elem_ptr(p.k, p.k_stride, b, 0, kv_head);
  const Elem* gV = elem_ptr(p.v, p.v_stride, b, 0, kv_head);

  zero_columns<Elem, kBlockM, kHeadDimQK, kDQK, kStrideQK, kThreads>(sQ, tid);
  for (int s = 0; s < kStages; ++s) {
    zero_columns<Elem, kBlockN, kHeadDimQK, kDQK, kStrideQK, kThreads>(sKV + s * kStageElems, tid);
    zero_columns<Elem, kBlockN, kHeadDimV, kDV, kStrideV, kThreads>(
        sKV + s * kStageElems + kBlockN * kStrideQK, tid);
  }

  auto load_kv = [&](int tile) {
    Elem* sK = sKV + (tile % kStages) * kStageElems;
    const int n0 = tile * kBlockN;
    const int rows = p.seqlen_k - n0;
    load_tile_async<Elem, kBlockN, kHeadDimQK, kStrideQK, kVec, kThreads>(
        sK, gK + n0 * p.k_stride[1], p.k_stride[1], p.k_stride[3], rows, tid);
    load_tile_async<Elem, kBlockN, kHeadDimV, kStrideV, kVec, kThreads>(
        sK + kBlockN * kStrideQK, gV + n0 * p.v_stride[1], p.v_stride[1], p.v_stride[3], rows, tid);
  };

  load_tile_async<Elem, kBlockM, kHeadDimQK, kStrideQK, kVec, kThreads>(
      sQ, gQ, p.q_stride[1], p.q_stride[3], p.seqlen_q - m0, tid);
  cp_async_commit();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_blocks) load_kv(s);
    cp_async_commit();  // empty groups keep the wait count uniform
  }

  float o[kMTiles][kNTilesO][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNTilesO; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) o[mt][nt][i] = 0.f;
  SoftmaxState sm;
  sm.init();

  unsigned qreg[kQInRegisters ? kDQK / 16 : 1][kMTiles][4];
  const int row_base = m0 + warp_row0 + (lane >> 2);

  for (int j = 0; j < n_blocks; ++j) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if constexpr (kQInRegisters) {
      if (j == 0) {
#pragma unroll
        for (int kk = 0; kk < kDQK / 16; ++kk)
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) load_q_frag16(qreg[kk][mt], sQ, warp_row0 + mt * 16, kk, lane);
      }
    }
    if (j + kStages - 1 < n_blocks) load_kv(j + kStages - 1);
    cp_async_commit();

    const Elem* sK = sKV + (j % kStages) * kStageElems;
    const Elem* sV = sK + kBlockN * kStrideQK;
    float s[kMTiles][kNTilesS][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNTilesS; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[mt][nt][i] = 0.f;

    if constexpr (k16Bit) gemm_qk16<kQInRegisters>(s, qreg, sQ, sK, warp_row0, lane);
    else gemm_qk32(s, sQ, sK, warp_row0, lane);

    const int n0 = j * kBlockN;
    const bool needs_mask = n0 + kBlockN > p.seqlen_k ||
                            (kCausal && n0 + kBlockN - 1 > m0 + p.causal_offset);
    if (needs_mask) apply_mask(s, row_base, n0 + 2 * (lane & 3), p.seqlen_k, p.causal_offset);

    sm.update(s, o, p.scale_log2);

    if constexpr (k16Bit) gemm_pv16(o, s, sV, lane);
    else gemm_pv32(o, s, sV, lane);
  }

  write_output(p, o, sm, sQ, m0, warp_row0, b, head, tid, lane);
}
