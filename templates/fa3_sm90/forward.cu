// fa3_sm90, first form: attention forward on Hopper's instructions, before warp specialization.
// Each of the CTA's warpgroups owns 64 query rows; thread 0 streams K and V tiles by TMA into a
// ring of kStages stages, each guarded by an mbarrier that counts the tile's bytes. Per tile:
// S = Q.K^T by wgmma (Q and K read K-major from their swizzled tiles), the online softmax on
// the accumulators (the m16n8 C layout per warp: common/online_softmax.cuh serves as is), then
// O += P.V by wgmma with P from registers and V read N-major. A stage is refilled once every
// warpgroup has finished the tile in it (a CTA barrier).
// Not yet: a producer warpgroup with setmaxnreg, ping-pong between consumers, P.V of one tile
// overlapped with Q.K^T of the next, a persistent scheduler, TMA stores, the other semantics.
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
constexpr int kBlockM = kWarpgroups * kRowsPerWg;
constexpr int kThreads = kWarpgroups * 128;
constexpr int kStepsQK = kD / 16;      // wgmma k-steps of S = Q.K^T
constexpr int kStepsPV = kBlockN / 16;  // and of O += P.V
constexpr int kAtomBytes = fj_layout::kAtomElems * 2;  // one swizzled row: 128 bytes
constexpr unsigned kGroupStride = 8 * kAtomBytes;       // 8 rows: the swizzle's repeat
constexpr fj_layout::Fa3Layout kLayout = fj_layout::fa3_layout(kD, kWarpgroups, kBlockN, kStages);
static_assert(kD % fj_layout::kAtomElems == 0 && kHeadDimQK == kHeadDimV, "the host refuses other head dims");

constexpr float kLn2 = 0.69314718056f;  // the LSE leaves log2 units

using Softmax = OnlineSoftmax<1, kBlockN / 8, kD / 8>;

// Thread 0: the tile of keys [n0, n0 + kBlockN) of one key/value head into stage `stage`.
FJ_DEVICE void load_kv(const FjFa3Params& prm, unsigned char* smem, int stage, int n0, int kv_head, int batch,
                       unsigned long long* bar) {
  mbarrier_arrive_expect_tx(bar, 2u * unsigned(kLayout.kv_bytes));
  unsigned char* k = smem + kLayout.k_offset + stage * kLayout.kv_bytes;
  unsigned char* v = smem + kLayout.v_offset + stage * kLayout.kv_bytes;
  for (int a = 0; a < kAtoms; ++a) {
    const int atom_bytes = kBlockN * kAtomBytes;
    tma_load_4d(k + a * atom_bytes, &prm.k_map, a * fj_layout::kAtomElems, kv_head, n0, batch, bar);
    tma_load_4d(v + a * atom_bytes, &prm.v_map, a * fj_layout::kAtomElems, kv_head, n0, batch, bar);
  }
}

FJ_DEVICE unsigned pack(float lo, float hi) { return kBf16 ? pack_bf16x2(lo, hi) : pack_f16x2(lo, hi); }

}  // namespace fj::fa3

extern "C" __global__ void __launch_bounds__(fj::fa3::kThreads, 1)
flashjit_fa3_fwd(const __grid_constant__ FjFa3Params prm) {
  using namespace fj;
  using namespace fj::fa3;
  const FjAttentionParams& p = prm.attn;
  extern __shared__ unsigned char smem_raw[];
  // TMA's 128-byte swizzle repeats every 1024 bytes, and wgmma descriptors assume tiles start on
  // that boundary: round the dynamic shared memory up to it (the layout counts the slack).
  unsigned char* smem = smem_raw + ((fj_layout::kSwizzleAlign - smem_addr(smem_raw) % fj_layout::kSwizzleAlign) %
                                    fj_layout::kSwizzleAlign);
  __shared__ alignas(8) unsigned long long q_bar;
  __shared__ alignas(8) unsigned long long kv_bar[kStages];

  const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int m_block = blockIdx.x, head = blockIdx.y, b = blockIdx.z;
  const int kv_head = head / p.group;
  const Sequence seq = sequence_of<false, false, false>(p, b);
  const int m0 = m_block * kBlockM;
  if (m0 >= seq.len_q) return;

  int key_lo, key_hi;
  key_range<kCausal, false>(seq, m0, kBlockM, 0, 0, key_lo, key_hi);
  const int n_tiles = (key_hi + kBlockN - 1) / kBlockN;  // key_lo is 0 without a window

  if (tid == 0) {
    mbarrier_init(&q_bar, 1);
    for (int s = 0; s < kStages; ++s) mbarrier_init(&kv_bar[s], 1);
    fence_barrier_init();
  }
  __syncthreads();
  if (tid == 0) {
    prefetch_tensor_map(&prm.q_map);
    prefetch_tensor_map(&prm.k_map);
    prefetch_tensor_map(&prm.v_map);
    mbarrier_arrive_expect_tx(&q_bar, unsigned(kLayout.q_bytes));
    for (int w = 0; w < kWarpgroups; ++w)
      for (int a = 0; a < kAtoms; ++a)
        tma_load_4d(smem + kLayout.q_offset + (w * kAtoms + a) * kRowsPerWg * kAtomBytes, &prm.q_map,
                    a * fj_layout::kAtomElems, head, m0 + w * kRowsPerWg, b, &q_bar);
    for (int s = 0; s < kStages && s < n_tiles; ++s) load_kv(prm, smem, s, s * kBlockN, kv_head, b, &kv_bar[s]);
  }

  float o[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) o[i] = 0.f;
  Softmax sm;
  sm.init();
  // This thread's rows (g and g + 8 of its warp's 16) in the sequence.
  const int row0 = m0 + wg * kRowsPerWg + warp * 16 + lane / 4;
  const unsigned char* q_tile = smem + kLayout.q_offset + wg * kAtoms * kRowsPerWg * kAtomBytes;
  mbarrier_wait(&q_bar, 0);

  for (int j = 0; j < n_tiles; ++j) {
    const int stage = j % kStages;
    mbarrier_wait(&kv_bar[stage], unsigned(j / kStages) & 1u);
    const unsigned char* k_tile = smem + kLayout.k_offset + stage * kLayout.kv_bytes;
    const unsigned char* v_tile = smem + kLayout.v_offset + stage * kLayout.kv_bytes;

    float s[kBlockN / 2];
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < kStepsQK; ++k) {
      // 16 elements (32 bytes) along the head dim; every 4 steps the next 128-byte atom.
      const int atom = k / 4, within = (k % 4) * 32;
      const unsigned long long dq =
          matrix_descriptor(q_tile + atom * kRowsPerWg * kAtomBytes + within, 16, kGroupStride, Swizzle::b128);
      const unsigned long long dk =
          matrix_descriptor(k_tile + atom * kBlockN * kAtomBytes + within, 16, kGroupStride, Swizzle::b128);
      Wgmma<kBlockN>::template ss<kBf16, 0>(s, dq, dk, k > 0 ? 1 : 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(s);

    // The sequence's end and the causal diagonal (bottom right), per element.
    const int n0 = j * kBlockN;
#pragma unroll
    for (int nt = 0; nt < kBlockN / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = row0 + (i / 2) * 8, col = n0 + nt * 8 + 2 * (lane % 4) + i % 2;
        const bool hidden = col >= seq.len_k || (kCausal && col > row + seq.offset());
        if (hidden) s[nt * 4 + i] = neg_inf();
      }
    sm.update(*reinterpret_cast<float(*)[1][kBlockN / 8][4]>(s), *reinterpret_cast<float(*)[1][kD / 8][4]>(o),
              p.scale_log2);

    // P as wgmma's register A operand: per 16 keys, the m16n8k16 A fragment of this warp's rows.
    unsigned pa[kStepsPV][4];
#pragma unroll
    for (int kk = 0; kk < kStepsPV; ++kk) {
      const float* lo = s + 8 * kk;  // keys 16kk .. 16kk+7: n8 tile 2kk
      const float* hi = lo + 4;      // keys 16kk+8 .. 16kk+15
      pa[kk][0] = pack(lo[0], lo[1]);
      pa[kk][1] = pack(lo[2], lo[3]);
      pa[kk][2] = pack(hi[0], hi[1]);
      pa[kk][3] = pack(hi[2], hi[3]);
    }
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kStepsPV; ++kk) {
      // 16 keys = 16 rows of the V tile; the head dim crosses atoms kBlockN rows apart.
      const unsigned long long dv = matrix_descriptor(v_tile + kk * 16 * kAtomBytes,
                                                      unsigned(kBlockN * kAtomBytes), kGroupStride, Swizzle::b128);
      Wgmma<kD>::template rs<kBf16, 1>(o, pa[kk], dv, 1);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(o);

    __syncthreads();  // every warpgroup is done with this stage: it may take tile j + kStages
    if (tid == 0 && j + kStages < n_tiles) load_kv(prm, smem, stage, (j + kStages) * kBlockN, kv_head, b, &kv_bar[stage]);
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
