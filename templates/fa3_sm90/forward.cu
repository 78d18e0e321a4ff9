// fa3_sm90: attention forward on Hopper's instructions, warp-specialized.
//
// Warpgroup 0 is the producer: it gives most of its registers away (setmaxnreg) and one thread
// streams Q once and K and V tile by tile through TMA into rings of kStages stages. Each stage
// has a "full" mbarrier (the copy's bytes landed) and an "empty" one (every consumer warp is done
// with it), separately for K and V, so K of a later tile can land while V of an earlier one is
// still read.
//
// Warpgroups 1..kWarpgroups are consumers of 64 query rows each. Per tile j a consumer issues
// S_j = Q.K_j^T and, behind it, O += P_{j-1}.V_{j-1} (P from registers): the softmax of tile j
// then runs while the tensor cores still accumulate tile j - 1 (the intra-warpgroup pipeline).
// With two consumers a pair of named barriers makes them take turns issuing their GEMMs, so one's
// softmax overlaps the other's GEMMs (ping-pong).
// Not yet: a persistent scheduler, TMA stores of O, the other semantics.
#include "common/attention_params.cuh"
#include "common/online_softmax.cuh"
#include "common/ptx.cuh"
#include "common/sequence.cuh"
#include "common/sm90/async_copy.cuh"
#include "common/sm90/wgmma.cuh"
#include "common/variant_types.cuh"
#include "fa3_sm90/layout.cuh"
#include "fa3_sm90/params.cuh"

namespace fj::fa3 {

using namespace fj::cfg;
using namespace fj::sm90;
using namespace fj::var;

constexpr bool kBf16 = kDtype == kBF16;  // f16 otherwise: the host refuses fp32
constexpr int kD = kHeadDimQK;         // == kHeadDimV, a multiple of 64 (the host refuses others)
constexpr int kAtoms = kD / fj_layout::kAtomElems;
constexpr int kRowsPerWg = fj_layout::kWarpgroupRows;
constexpr int kConsumers = kWarpgroups;
constexpr int kWgThreads = 128;
constexpr int kThreads = (kConsumers + 1) * kWgThreads;
constexpr int kStepsQK = kD / 16;      // wgmma k-steps of S = Q.K^T
constexpr int kStepsPV = kBlockN / 16;  // and of O += P.V
constexpr int kAtomBytes = fj_layout::kAtomElems * 2;  // one swizzled row: 128 bytes
constexpr unsigned kGroupStride = 8 * kAtomBytes;       // 8 rows: the swizzle's repeat
constexpr fj_layout::Fa3Layout kLayout = fj_layout::fa3_layout(kD, kWarpgroups, kBlockN, kStages);
static_assert(kD % fj_layout::kAtomElems == 0 && kHeadDimQK == kHeadDimV, "the host refuses other head dims");

// Registers: one consumer warpgroup runs two CTAs per SM where their tiles fit (each one's
// softmax hides under the other's GEMMs), two consumers one CTA. The producer only needs loop
// counters and addresses; the consumers take what is left of the 64K-register file.
constexpr int kSmemPerSm = 228 * 1024;   // sm_90: shared memory of one SM
constexpr int kSmemPerCtaExtra = 2048;   // the runtime's 1 KiB per CTA and this kernel's static barriers
constexpr bool kTwoCtas = kConsumers == 1 && 2 * (kLayout.smem_bytes + kSmemPerCtaExtra) <= kSmemPerSm;
constexpr int kCtasPerSm = kTwoCtas ? 2 : 1;
constexpr int kRegisterFile = 65536;
constexpr int kProducerRegs = 24;  // setmaxnreg's minimum
constexpr int kMaxConsumerRegs = 240;  // a thread addresses at most 255; setmaxnreg counts in 8s
constexpr int kFreeRegs = (kRegisterFile / kCtasPerSm / kWgThreads - kProducerRegs) / kConsumers / 8 * 8;
constexpr int kConsumerRegs = kFreeRegs < kMaxConsumerRegs ? kFreeRegs : kMaxConsumerRegs;
static_assert(kConsumerRegs >= 200 && kCtasPerSm * kWgThreads * (kProducerRegs + kConsumers * kConsumerRegs) <= kRegisterFile,
              "the consumers' registers must fit the register file");

// Named barriers 1 and 2 (0 is __syncthreads): consumer c waits on kTurnBarrier + c for its turn.
constexpr int kTurnBarrier = 1;
constexpr int kTurnThreads = 2 * kWgThreads;

constexpr float kLn2 = 0.69314718056f;  // the LSE leaves log2 units

using Softmax = OnlineSoftmax<1, kBlockN / 8, kD / 8>;

struct Barriers {
  unsigned long long q_full;
  unsigned long long k_full[kStages], v_full[kStages];
  unsigned long long k_empty[kStages], v_empty[kStages];
};

// One tensor's tile of keys [n0, n0 + kBlockN) of one key/value head, atom by atom.
FJ_DEVICE void load_tile(const FjTensorMap* map, unsigned char* dst, int n0, int kv_head, int batch,
                         unsigned long long* bar) {
  mbarrier_arrive_expect_tx(bar, unsigned(kLayout.kv_bytes));
#pragma unroll
  for (int a = 0; a < kAtoms; ++a)
    tma_load_4d(dst + a * kBlockN * kAtomBytes, map, a * fj_layout::kAtomElems, kv_head, n0, batch, bar);
}

// The producer's one thread: Q once, then K and V of every tile, each stage refilled once every
// consumer warp has released it (round r of a stage waits for the consumers' release of round r - 1).
FJ_DEVICE void produce(const FjFa3Params& prm, unsigned char* smem, Barriers& bars, int head, int kv_head, int batch,
                       int m0, int n_tiles) {
  prefetch_tensor_map(&prm.q_map);
  prefetch_tensor_map(&prm.k_map);
  prefetch_tensor_map(&prm.v_map);
  mbarrier_arrive_expect_tx(&bars.q_full, unsigned(kLayout.q_bytes));
  for (int w = 0; w < kConsumers; ++w)
    for (int a = 0; a < kAtoms; ++a)
      tma_load_4d(smem + kLayout.q_offset + (w * kAtoms + a) * kRowsPerWg * kAtomBytes, &prm.q_map,
                  a * fj_layout::kAtomElems, head, m0 + w * kRowsPerWg, batch, &bars.q_full);
  for (int j = 0; j < n_tiles; ++j) {
    const int stage = j % kStages, round = j / kStages;
    if (round > 0) mbarrier_wait(&bars.k_empty[stage], unsigned(round - 1) & 1u);
    load_tile(&prm.k_map, smem + kLayout.k_offset + stage * kLayout.kv_bytes, j * kBlockN, kv_head, batch,
              &bars.k_full[stage]);
    if (round > 0) mbarrier_wait(&bars.v_empty[stage], unsigned(round - 1) & 1u);
    load_tile(&prm.v_map, smem + kLayout.v_offset + stage * kLayout.kv_bytes, j * kBlockN, kv_head, batch,
              &bars.v_full[stage]);
  }
}

// A consumer warp is done reading a stage: its first lane tells the producer.
FJ_DEVICE void release(unsigned long long* bar, int lane) {
  __syncwarp();
  if (lane == 0) mbarrier_arrive(bar);
}

FJ_DEVICE unsigned pack(float lo, float hi) { return kBf16 ? pack_bf16x2(lo, hi) : pack_f16x2(lo, hi); }

// S = Q.K^T over the head dim: Q and K read K-major from their swizzled tiles; every 4 steps of
// 16 elements (32 bytes) the next 128-byte atom.
FJ_DEVICE void issue_qk(float (&s)[kBlockN / 2], const unsigned char* q_tile, const unsigned char* k_tile) {
#pragma unroll
  for (int k = 0; k < kStepsQK; ++k) {
    const int atom = k / 4, within = (k % 4) * 32;
    const unsigned long long dq =
        matrix_descriptor(q_tile + atom * kRowsPerWg * kAtomBytes + within, 16, kGroupStride, Swizzle::b128);
    const unsigned long long dk =
        matrix_descriptor(k_tile + atom * kBlockN * kAtomBytes + within, 16, kGroupStride, Swizzle::b128);
    Wgmma<kBlockN>::template ss<kBf16, 0>(s, dq, dk, k > 0 ? 1 : 0);
  }
}

// O += P.V: per 16 keys (16 rows of the V tile, read N-major), P's m16n8k16 A fragments.
FJ_DEVICE void issue_pv(float (&o)[kD / 2], const unsigned (&pa)[kStepsPV][4], const unsigned char* v_tile) {
#pragma unroll
  for (int kk = 0; kk < kStepsPV; ++kk) {
    const unsigned long long dv =
        matrix_descriptor(v_tile + kk * 16 * kAtomBytes, unsigned(kBlockN * kAtomBytes), kGroupStride, Swizzle::b128);
    Wgmma<kD>::template rs<kBf16, 1>(o, pa[kk], dv, 1);
  }
}

// The consumers' turns at the tensor cores (two consumers; with one, nothing to order): consumer
// c waits on named barrier kTurnBarrier + c, which the other one's pass() completes.
struct Turns {
  int c;
  FJ_DEVICE explicit Turns(int consumer) : c(consumer) {
    if (kConsumers == 2 && c == 1) named_barrier_arrive(kTurnBarrier, kTurnThreads);  // the first goes first
  }
  FJ_DEVICE void take() const {
    if (kConsumers == 2) named_barrier_sync(kTurnBarrier + c, kTurnThreads);
  }
  // After the last GEMMs the second consumer has no one left to wait for its pass.
  FJ_DEVICE void pass(bool last) const {
    if (kConsumers == 2 && !(last && c == 1)) named_barrier_arrive(kTurnBarrier + (1 - c), kTurnThreads);
  }
};

// S of keys [n0, n0 + kBlockN) with the keys past the sequence's end and past the causal
// diagonal (bottom right) at -inf; only the tiles those cut pay for the per-element test.
FJ_DEVICE float (&masked_scores(float (&s)[kBlockN / 2], int n0, const Sequence& seq, int wg_row0, int row0,
                                 int lane))[1][kBlockN / 8][4] {
  const bool cut = n0 + kBlockN > seq.len_k || (kCausal && n0 + kBlockN - 1 > wg_row0 + seq.offset());
  if (cut) {
#pragma unroll
    for (int nt = 0; nt < kBlockN / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = row0 + (i / 2) * 8, col = n0 + nt * 8 + 2 * (lane % 4) + i % 2;
        if (col >= seq.len_k || (kCausal && col > row + seq.offset())) s[nt * 4 + i] = neg_inf();
      }
  }
  return *reinterpret_cast<float(*)[1][kBlockN / 8][4]>(s);
}

// P as wgmma's register A operand: per 16 keys, the m16n8k16 A fragment of this warp's rows
// (n8 tiles 2kk and 2kk + 1 of the S accumulator).
FJ_DEVICE void pack_probabilities(const float (&s)[kBlockN / 2], unsigned (&pa)[kStepsPV][4]) {
#pragma unroll
  for (int kk = 0; kk < kStepsPV; ++kk) {
    const float* lo = s + 8 * kk;
    const float* hi = lo + 4;
    pa[kk][0] = pack(lo[0], lo[1]);
    pa[kk][1] = pack(lo[2], lo[3]);
    pa[kk][2] = pack(hi[0], hi[1]);
    pa[kk][3] = pack(hi[2], hi[3]);
  }
}

}  // namespace fj::fa3

extern "C" __global__ void __launch_bounds__(fj::fa3::kThreads, fj::fa3::kCtasPerSm)
flashjit_fa3_fwd(const __grid_constant__ FjFa3Params prm) {
  using namespace fj;
  using namespace fj::fa3;
  const FjAttentionParams& p = prm.attn;
  extern __shared__ unsigned char smem_raw[];
  // TMA's 128-byte swizzle repeats every 1024 bytes, and wgmma descriptors assume tiles start on
  // that boundary: round the dynamic shared memory up to it (the layout counts the slack).
  unsigned char* smem = smem_raw + ((fj_layout::kSwizzleAlign - smem_addr(smem_raw) % fj_layout::kSwizzleAlign) %
                                    fj_layout::kSwizzleAlign);
  __shared__ Barriers bars;

  const int tid = threadIdx.x, wg = tid / kWgThreads, warp = (tid % kWgThreads) / 32, lane = tid % 32;
  const int m_block = blockIdx.x, head = blockIdx.y, b = blockIdx.z;
  const int kv_head = head / p.group;
  const Sequence seq = sequence_of<false, false, false>(p, b);
  const int m0 = m_block * kConsumers * kRowsPerWg;
  if (m0 >= seq.len_q) return;

  int key_lo, key_hi;
  key_range<kCausal, false>(seq, m0, kConsumers * kRowsPerWg, 0, 0, key_lo, key_hi);
  const int n_tiles = (key_hi + kBlockN - 1) / kBlockN;  // key_lo is 0 without a window

  if (tid == 0) {
    mbarrier_init(&bars.q_full, 1);
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(&bars.k_full[s], 1);
      mbarrier_init(&bars.v_full[s], 1);
      mbarrier_init(&bars.k_empty[s], kConsumers * 4);  // one arrival per consumer warp
      mbarrier_init(&bars.v_empty[s], kConsumers * 4);
    }
    fence_barrier_init();
  }
  __syncthreads();  // the last CTA-wide barrier: the producer's idle warps leave below

  if (wg == 0) {
    setmaxnreg_dec<kProducerRegs>();
    if (warp == 0 && lane == 0 && n_tiles > 0) produce(prm, smem, bars, head, kv_head, b, m0, n_tiles);
    return;
  }
  setmaxnreg_inc<kConsumerRegs>();
  const int c = wg - 1;  // this consumer

  float o[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) o[i] = 0.f;
  Softmax sm;
  sm.init();
  // This thread's rows (g and g + 8 of its warp's 16) in the sequence.
  const int wg_row0 = m0 + c * kRowsPerWg;
  const int row0 = wg_row0 + warp * 16 + lane / 4;
  const unsigned char* q_tile = smem + kLayout.q_offset + c * kAtoms * kRowsPerWg * kAtomBytes;

  if (n_tiles > 0) {
    mbarrier_wait(&bars.q_full, 0);
    Turns turns(c);
    unsigned pa[kStepsPV][4];  // P of the previous tile, wgmma's register A operand
    // Prologue: S_0 alone. Each step below is straight-line code: ptxas serializes wgmmas whose
    // retirement it cannot follow through branches.
    {
      float s[kBlockN / 2];
      turns.take();
      mbarrier_wait(&bars.k_full[0], 0);
      wgmma_fence();
      issue_qk(s, q_tile, smem + kLayout.k_offset);
      wgmma_commit();
      turns.pass(false);
      wgmma_wait<0>();
      fence_registers(s);
      release(&bars.k_empty[0], lane);
      float alpha[1][2];
      sm.probabilities(masked_scores(s, 0, seq, wg_row0, row0, lane), p.scale_log2, alpha);  // O is 0: no rescale
      pack_probabilities(s, pa);
    }
    // Steady state: S_j, then P_{j-1}.V_{j-1} behind it; the softmax of tile j runs under P.V.
    for (int j = 1; j < n_tiles; ++j) {
      const int stage = j % kStages, prev = (j - 1) % kStages;
      float s[kBlockN / 2];
      turns.take();
      // Both waits before the first wgmma: a wait is a loop, and a branch between wgmmas makes
      // ptxas serialize them.
      mbarrier_wait(&bars.k_full[stage], unsigned(j / kStages) & 1u);
      mbarrier_wait(&bars.v_full[prev], unsigned((j - 1) / kStages) & 1u);
      wgmma_fence();
      issue_qk(s, q_tile, smem + kLayout.k_offset + stage * kLayout.kv_bytes);
      wgmma_commit();
      issue_pv(o, pa, smem + kLayout.v_offset + prev * kLayout.kv_bytes);
      wgmma_commit();
      turns.pass(false);
      wgmma_wait<1>();
      fence_registers(s);
      release(&bars.k_empty[stage], lane);
      float alpha[1][2];
      const bool any_rescale =
          sm.probabilities(masked_scores(s, j * kBlockN, seq, wg_row0, row0, lane), p.scale_log2, alpha);
      wgmma_wait<0>();
      fence_registers(o);
      release(&bars.v_empty[prev], lane);
      sm.rescale(*reinterpret_cast<float(*)[1][kD / 8][4]>(o), alpha, any_rescale);
      pack_probabilities(s, pa);
    }
    // Epilogue: the last tile's P.V.
    {
      const int last = (n_tiles - 1) % kStages;
      turns.take();
      mbarrier_wait(&bars.v_full[last], unsigned((n_tiles - 1) / kStages) & 1u);
      wgmma_fence();
      issue_pv(o, pa, smem + kLayout.v_offset + last * kLayout.kv_bytes);
      wgmma_commit();
      turns.pass(true);
      wgmma_wait<0>();
      fence_registers(o);
      release(&bars.v_empty[last], lane);
    }
  }

  // Rows g and g + 8: normalize, store pairs of columns, and the LSE from the quad's first thread.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + h * 8;
    const float total = quad_sum(sm.row_sum[0][h]);
    const float inv = total > 0.f ? 1.f / total : 0.f;
    if (row >= seq.len_q) continue;
    unsigned short* out = static_cast<unsigned short*>(p.o) + seq.batch * p.o_stride[0] +
                          (seq.q_start + row) * p.o_stride[1] + head * p.o_stride[2];
#pragma unroll
    for (int nt = 0; nt < kD / 8; ++nt) {
      const int col = nt * 8 + 2 * (lane % 4);
      *reinterpret_cast<unsigned*>(out + col) = pack(o[nt * 4 + 2 * h] * inv, o[nt * 4 + 2 * h + 1] * inv);
    }
    if constexpr (kWriteLse) {
      if (lane % 4 == 0) {
        const float mx = sm.row_max[0][h];
        p.lse[seq.batch * p.lse_stride[0] + head * p.lse_stride[1] + (seq.q_start + row) * p.lse_stride[2]] =
            total > 0.f ? (mx * p.scale_log2 + log2f(total)) * kLn2 : neg_inf();
      }
    }
  }
}
