// bwd_sm80 convert: dQ from the fp32 accumulator (already scaled by the softmax scale in the
// main kernel) to dq's dtype and strides. One CTA per (BLOCK_M query rows, query head, batch)
// of kThreads threads, the main kernel's count: thread tid reads back the values the main
// kernel's thread tid added (bwd_sm80/dq_store.cuh's register order, each warp's reads 32
// consecutive floats), puts each at its row and column of a tile of the element type in shared
// memory (16-bit, or fp32 for fp32 outputs), and the tile is stored row by row, kVec elements an
// access.
//
// Varlen: as preprocess, a CTA per (Q block, q-head, sequence); rows of dq that no sequence covers are
// not written. Not yet covered (see docs/design/backward.md): the deterministic mode's ordered
// reduction of per-K/V-block partials (this kernel is where it would run).
#include "bwd_sm80/config.cuh"
#include "bwd_sm80/dq_store.cuh"
#include "bwd_sm80/elem.cuh"
#include "common/sequence.cuh"
#include "common/tile_io.cuh"
#include "common/warp_gemm_sm80.cuh"

extern "C" __global__ void __launch_bounds__(fj::bwd::kThreads)
flashjit_bwd_convert(const __grid_constant__ FjBackwardParams p) {
  using namespace fj;
  using namespace fj::bwd;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Elem* tile = reinterpret_cast<Elem*>(smem_raw);  // [kBlockM][kStrideConvert]: kLayout.convert_smem_bytes
  const FjAttentionParams& f = p.fwd;
  const int tid = threadIdx.x;
  const int m0 = blockIdx.x * kBlockM;
  const int head = blockIdx.y;
  const Sequence seq = sequence_of(f, blockIdx.z);
  const long long ws_row0 = (static_cast<long long>(blockIdx.z) * f.heads_q + head) * p.seqlen_q_rounded + m0;
  if constexpr (kSinks) {
    // dL/dsinks[head]: the Q blocks' terms summed in one fixed order by one thread (batch, then
    // block), so the result is the same run to run; preprocess, before this kernel on the
    // stream, wrote them all.
    if (p.dsinks && blockIdx.x == 0 && blockIdx.z == 0 && tid == 0) {
      float sum = 0.f;
      const long long terms = static_cast<long long>(gridDim.z) * gridDim.x;
      for (long long i = 0; i < terms; ++i) sum += p.dsinks_part[i * f.heads_q + head];
      p.dsinks[head] = sum;
    }
  }
  const float* accum = p.dq_accum + ws_row0 * kDQK;
#pragma unroll
  for (int mt = 0; mt < kDqMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < kDqNTiles; ++nt) {
      float x[kDqTileFloats];
      if constexpr (kDqVec4) {  // the tile's 4 floats are adjacent: one 16-byte load
        const float4 v = *reinterpret_cast<const float4*>(accum + dq_slot(mt * kDqNTiles + nt, 0, tid));
        x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
      } else {
#pragma unroll
        for (int i = 0; i < kDqTileFloats; ++i) x[i] = accum[dq_slot(mt * kDqNTiles + nt, i, tid)];
      }
#pragma unroll
      for (int i = 0; i < kDqTileFloats; ++i) tile[dq_row(mt, i, tid) * kStrideConvert + dq_col(nt, i, tid)] = from_float(x[i]);
    }
  __syncthreads();
  const int rows = min(kBlockM, seq.len_q - m0);
  if (rows <= 0) return;
  store_tile<Elem, kBlockM, kHeadDimQK, kStrideConvert, kVec, kThreads>(
      row_at(static_cast<Elem*>(p.dq), p.dq_stride, seq.batch, seq.q_start + m0, head), p.dq_stride[1], p.dq_stride[3],
      tile, rows, tid);
}
