// bwd_sm80 convert: dQ from the fp32 accumulator (already scaled by the softmax scale in the
// main kernel) to dq's dtype and strides. One CTA per (BLOCK_M query rows, query head, batch).
//
// Varlen: as preprocess, a CTA per (Q block, q-head, sequence); rows of dq that no sequence covers are
// not written. Not yet covered (see docs/design/backward.md): fp32 outputs (a plain copy),
// vectorized stores (one element a thread here), the deterministic mode's ordered reduction of
// per-K/V-block partials (this kernel is where it would run).
#include "bwd_sm80/config.cuh"
#include "bwd_sm80/elem.cuh"
#include "common/sequence.cuh"

extern "C" __global__ void __launch_bounds__(fj::bwd::kThreads)
flashjit_bwd_convert(const __grid_constant__ FjBackwardParams p) {
  using namespace fj;
  using namespace fj::bwd;
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
  const int rows = min(kBlockM, seq.len_q - m0);

  for (int i = tid; i < kBlockM * kHeadDimQK; i += kThreads) {
    const int r = i / kHeadDimQK, c = i % kHeadDimQK;
    if (r < rows) {
      Elem* dq = row_at(static_cast<Elem*>(p.dq), p.dq_stride, seq.batch, seq.q_start + m0 + r, head);
      dq[c * p.dq_stride[3]] = from_float(accum[r * kDQK + c]);
    }
  }
}
