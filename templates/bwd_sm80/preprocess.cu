// bwd_sm80 preprocess: for every query row, D = rowsum(dO * O) in fp32 (the softmax's gradient
// term: dS = P * (dP - D)), the forward's LSE as P's exponent takes it (score_grad.cuh's
// exponent_lse), and the row's fp32 dQ accumulator zeroed, so the main kernel's atomics start
// from zero. One CTA per (BLOCK_M query rows, query head, batch): the same Q
// blocks the main kernel walks, so the workspace rows past seqlen_q up to the block's end get
// D = 0 and a zeroed accumulator too.
//
// Varlen: blockIdx.z is the sequence; its workspace rows are [z, head] x seqlen_q_rounded (the
// longest sequence rounded up), so every sequence's span is its own.
// Sinks: each CTA writes its Q block's term of dL/dsinks to the workspace; convert sums them.
// Deterministic: each CTA also zeroes its Q block's turn flag (bwd_sm80/dq_order.cuh).
// fp32 inputs: the same reads, kVec 4 (16 bytes).
#include "bwd_sm80/config.cuh"
#include "bwd_sm80/dq_order.cuh"
#include "bwd_sm80/elem.cuh"
#include "bwd_sm80/score_grad.cuh"
#include "common/sequence.cuh"
#include "common/tile_io.cuh"

extern "C" __global__ void __launch_bounds__(fj::bwd::kThreads)
flashjit_bwd_preprocess(const __grid_constant__ FjBackwardParams p) {
  using namespace fj;
  using namespace fj::bwd;
  const FjAttentionParams& f = p.fwd;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int m0 = blockIdx.x * kBlockM;
  const int head = blockIdx.y;
  const Sequence seq = sequence_of(f, blockIdx.z);
  const long long ws_row0 = (static_cast<long long>(blockIdx.z) * f.heads_q + head) * p.seqlen_q_rounded + m0;

  // D: kRowLanes lanes a row, each reading kVec elements of O and dO an access (16 bytes at
  // kVec 8, as the main kernel's copies) and striding the row's chunks; rows past the sequence
  // get 0. The loop runs the same number of passes in every lane (whole-warp shuffles).
  constexpr int kChunks = kHeadDimV / kVec;  // the host picks kVec dividing the head dims
  constexpr int kRowLanes = kChunks >= kWarpLanes ? kWarpLanes : pow2_at_least(kChunks);
  constexpr int kRowsPerPass = kThreads / kRowLanes;
  using Word = typename BytesOf<kVec * int(sizeof(Elem))>::type;
  const int sub = lane % kRowLanes;  // this lane's first chunk of its row
  // With sinks, each row's first lane also sums the row's -exp(sink - LSE) * D, the sink's gradient.
  float dsink = 0.f;
  for (int base = 0; base < kBlockM; base += kRowsPerPass) {
    const int r = base + tid / kRowLanes;
    const int row = m0 + r;
    float acc = 0.f;
    if (r < kBlockM && row < seq.len_q) {
      const Elem* o = row_at(static_cast<const Elem*>(f.o), f.o_stride, seq.batch, seq.q_start + row, head);
      const Elem* d = row_at(static_cast<const Elem*>(p.dout), p.dout_stride, seq.batch, seq.q_start + row, head);
      for (int c = sub; c < kChunks; c += kRowLanes) {
        // kVec == 1 also honours a non-unit stride along the head dim (common/tile_io.cuh's rule).
        const Word wo = *reinterpret_cast<const Word*>(o + c * (kVec == 1 ? f.o_stride[3] : kVec));
        const Word wd = *reinterpret_cast<const Word*>(d + c * (kVec == 1 ? p.dout_stride[3] : kVec));
        const Elem* eo = reinterpret_cast<const Elem*>(&wo);
        const Elem* ed = reinterpret_cast<const Elem*>(&wd);
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc += to_float(eo[e]) * to_float(ed[e]);
      }
    }
#pragma unroll
    for (int lanes = kRowLanes / 2; lanes > 0; lanes /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, lanes);
    if (sub == 0 && r < kBlockM) {
      p.dpsum[ws_row0 + row_stat_slot(r)] = acc;
      const float lse = row < seq.len_q
                            ? f.lse[seq.batch * f.lse_stride[0] + head * f.lse_stride[1] + (seq.q_start + row) * f.lse_stride[2]]
                            : neg_inf();
      p.lse_log2[ws_row0 + row_stat_slot(r)] = exponent_lse(lse);
      if constexpr (kSinks) {
        // The forward's LSE holds the sink's exp, so it is finite; -inf only where nothing was written.
        if (lse != neg_inf()) dsink -= expf(f.sinks[head] - lse) * acc;
      }
    }
  }
  if constexpr (kSinks) {
    // The block's term, summed in a fixed order (lanes by a fixed butterfly, then warp by warp):
    // deterministic with no atomics.
    __shared__ float warp_terms[kWarps];
    dsink = warp_sum(dsink);
    if (lane == 0) warp_terms[warp] = dsink;
    __syncthreads();
    if (tid == 0 && p.dsinks) {
      float block = 0.f;
      for (int w = 0; w < kWarps; ++w) block += warp_terms[w];
      p.dsinks_part[(static_cast<long long>(blockIdx.z) * gridDim.x + blockIdx.x) * f.heads_q + head] = block;
    }
  }

  if constexpr (kDeterministic) {
    if (tid == 0) *dq_turn_of(p, blockIdx.z, head, blockIdx.x) = 0;  // no K/V block has added yet
  }

  // The block's dQ accumulator rows, every padded column included (the main kernel's atomics
  // touch only the real ones; convert reads only those).
  // float4 stores: a block's kBlockM * kDQK floats start 64-byte aligned (rows and kDQK multiples of 16).
  float4* accum = reinterpret_cast<float4*>(p.dq_accum + ws_row0 * kDQK);
  for (int i = tid; i < kBlockM * kDQK / 4; i += kThreads) accum[i] = make_float4(0.f, 0.f, 0.f, 0.f);
}
