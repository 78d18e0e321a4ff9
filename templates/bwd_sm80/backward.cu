// bwd_sm80 main kernel: FlashAttention-2's backward on sm_80 tensor cores (mma.sync, ldmatrix,
// cp.async). One CTA per (BLOCK_N keys, KV head, batch) keeps its K and V tiles in shared memory
// and dK, dV in registers, and walks the q-heads of its GQA/MQA group (outer loop: dK and dV of
// the KV head are summed over the whole group in registers, so K/V are never expanded) and, per
// q-head, the Q blocks that see any of its keys. For each Q block (BLOCK_M rows of Q and dO,
// their LSE and D), in three phases split by two barriers:
//   1. S = Q K^T and dP = dO V^T, each warp a 2-D tile of the BLOCK_M x BLOCK_N block (config.cuh:
//      kSdpRows x kSdpKeys); the forward's softcap and ALiBi on S, then its mask;
//      P = exp2(S * scale_log2 - LSE * log2 e), dS = P (dP - D) softcap' (bwd_sm80/score_grad.cuh);
//      P and dS into shared memory ([query row][key]), rounded to 16 bits (fp32 inputs: kept fp32);
//   2. (barrier) dV += P^T dO and dK += dS^T Q, each warp kDkvKeys keys x its share of the head
//      dims (so a thread holds BLOCK_N * (Dqk + Dv) / threads accumulators, not 16 keys' whole
//      rows); dQ = dS K, each warp kDqRows rows x kDqCols columns, added atomically to the fp32
//      accumulator in register order (bwd_sm80/dq_store.cuh), times the softmax scale; in
//      deterministic mode, in a fixed order of K/V blocks (bwd_sm80/dq_order.cuh);
//   3. the next Q block's copies: with two stages issued at the top of this step, under all of
//      it; with one, after a barrier at its end.
// Every product is bwd_sm80/gemm.cuh's warp_gemm, each with its own warp grid, so each warp's
// fragments serve all the mmas of its tile. At the end dK (times the scale) and dV are staged
// through the K and V tiles and stored.
//
// fp32 inputs (exact 3xTF32 or tf32) run the same kernel with fp32 tiles and gemm_fp32.cuh's
// m16n8k8 tf32 product.
//
// Not yet covered (docs/design/backward.md has the plan for each):
//   - paged K/V, kv_starts (refused by the host);
#include "bwd_sm80/dq_order.cuh"
#include "bwd_sm80/dq_store.cuh"
#include "bwd_sm80/elem.cuh"
#include "bwd_sm80/gemm.cuh"
#include "bwd_sm80/score_grad.cuh"
#include "bwd_sm80/tile_walk.cuh"
#include "common/sequence.cuh"
#include "common/tile_io.cuh"
#include "common/tile_verbs.cuh"

namespace fj::bwd {

// Writes a register tile (m16n8 C layout; rows row0 + mt*16 + g (+8), columns col0 + 2t (+1) of
// every n8 tile) times x into a shared tile of the element type at shared-space address `tile`
// (row stride kStride elements; kSwizzle: a swizzled tile, row0 a multiple of 8), a pair of
// elements a store (16-bit: rounded, packed in one word; fp32: as they are, 8 bytes); 32-bit
// address arithmetic as gemm.cuh's.
template <int kStride, bool kSwizzle, int kMTiles, int kNTiles>
FJ_DEVICE void stage_tile(unsigned tile, const float (&acc)[kMTiles][kNTiles][4], int row0, int col0, int lane,
                          float x = 1.f) {
  const Frag f{lane};
  constexpr unsigned kBytes = sizeof(Elem);
  const unsigned at = tile + (unsigned(row0 + f.g()) * kStride + col0 + 2 * f.t()) * kBytes;
  const unsigned phase16 = unsigned(f.g()) << kSwizzleChunkShift;  // every row below is g plus a multiple of 8
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        const unsigned to = shared_at<kSwizzle>(at, ((mt * 16 + h * 8) * kStride + nt * 8) * kBytes, phase16);
        if constexpr (k16Bit)
          st_shared_b32(to, Mma16::pack16(acc[mt][nt][2 * h] * x, acc[mt][nt][2 * h + 1] * x));
        else
          st_shared_v2_f32(to, acc[mt][nt][2 * h] * x, acc[mt][nt][2 * h + 1] * x);
      }
}

// A Q block's tile of Q or dO (kBlockM rows): load_tile_async's unrolled copy where each thread
// keeps one column (no per-access offsets), else the rolled one (common/tile_io.cuh says why).
template <int kCols, int kSmemStride, bool kSwizzle>
FJ_DEVICE void load_q_rows(Elem* smem, const Elem* gmem, long long row_stride, long long col_stride, int rows_valid,
                           int tid) {
  // (An unpredicated copy for whole Q blocks, branching on rows_valid, measured 1-4% slower on
  // an H200 at S = 4K: bench/NOTES.md entry 30.)
  if constexpr (kThreads % (kCols / kVec) == 0)
    load_tile_async<Elem, kBlockM, kCols, kSmemStride, kVec, kThreads, kSwizzle>(smem, gmem, row_stride, col_stride,
                                                                                 rows_valid, tid);
  else
    load_tile_async_rolled<Elem, kBlockM, kCols, kSmemStride, kVec, kThreads, kSwizzle>(smem, gmem, row_stride,
                                                                                        col_stride, rows_valid, tid);
}

// One stage's buffers: a Q block's Q and dO tiles (as pointers for the copies, as shared-space
// addresses for the products), its rows' LSE (as P's exponent takes it) and D.
struct QBlockTiles {
  Elem* q;
  Elem* dout;
  float* lse;
  float* dsum;
  unsigned q_at, dout_at;
};
FJ_DEVICE QBlockTiles stage_tiles(unsigned char* smem, int stage) {
  const unsigned at = smem_addr(smem);
  return {reinterpret_cast<Elem*>(smem + kLayout.q + stage * kLayout.q_stage),
          reinterpret_cast<Elem*>(smem + kLayout.dout + stage * kLayout.dout_stage),
          reinterpret_cast<float*>(smem + kLayout.lse + stage * kLayout.rows_stage),
          reinterpret_cast<float*>(smem + kLayout.dpsum + stage * kLayout.rows_stage),
          at + kLayout.q + stage * kLayout.q_stage, at + kLayout.dout + stage * kLayout.dout_stage};
}

// The workspace's first row of q-head `head` of sequence z (dQ accumulator rows and D).
FJ_DEVICE long long workspace_head(const FjBackwardParams& p, int z, int head) {
  return (static_cast<long long>(z) * p.fwd.heads_q + head) * p.seqlen_q_rounded;
}

constexpr int kFloatsPer16B = 4;  // LSE and D copies: 16-byte cp.async chunks (the workspace rows are 64-byte aligned)

// Starts the copies of Q block m0 of q-head `head` into `dst`: rows past the sequence load as
// zeros (Q, dO; preprocess gave their LSE +inf and their D 0). read false: nothing is read and
// the whole stage zero-fills (a valid block's addresses still given), so a caller need not
// branch around the copies.
FJ_DEVICE void load_q_block(const QBlockTiles& dst, const FjBackwardParams& p, const Sequence& seq, int head, int m0,
                            int tid, bool read = true) {
  const FjAttentionParams& f = p.fwd;
  const int rows_q = read ? seq.len_q - m0 : 0;
  const int row_stat_bytes = read ? 16 : 0;
  load_q_rows<kHeadDimQK, kStrideQK, kSwizzleQK>(dst.q, row_at(static_cast<const Elem*>(f.q), f.q_stride, seq.batch, seq.q_start + m0, head),
                                     f.q_stride[1], f.q_stride[3], rows_q, tid);
  load_q_rows<kHeadDimV, kStrideV, kSwizzleV>(dst.dout,
                                   row_at(static_cast<const Elem*>(p.dout), p.dout_stride, seq.batch, seq.q_start + m0, head),
                                   p.dout_stride[1], p.dout_stride[3], rows_q, tid);
  // preprocess wrote both for every workspace row.
  const long long ws_row = workspace_head(p, blockIdx.z, head) + m0;
  for (int c = tid; c < kBlockM / kFloatsPer16B; c += kThreads) {
    cp_async<16>(dst.lse + c * kFloatsPer16B, p.lse_log2 + ws_row + c * kFloatsPer16B, row_stat_bytes);
    cp_async<16>(dst.dsum + c * kFloatsPer16B, p.dpsum + ws_row + c * kFloatsPer16B, row_stat_bytes);
  }
}

// A Q block's per-row value (LSE or D, in shared memory as row_stat_slot orders it) for this
// lane's rows of its S/dP tile, row0 + mt * 16 + h * 8 (row0 = the tile's first row + g): they
// sit at slots row_stat_slot(row0) + 2 mt + h, so they load as 16-byte vectors (the slot is a
// multiple of 2 kSdpMTiles from a 16-byte aligned base), not one broadcast word each.
FJ_DEVICE void load_row_stats(float (&out)[kSdpMTiles][2], const float* stats, int row0) {
  constexpr int kN = 2 * kSdpMTiles;
  constexpr int kVecFloats = kN % 4 == 0 ? 4 : 2;  // kSdpMTiles >= 1
  const float* src = stats + row_stat_slot(row0);
  float v[kN];
#pragma unroll
  for (int i = 0; i < kN; i += kVecFloats) {
    if constexpr (kVecFloats == 4) {
      const float4 x = *reinterpret_cast<const float4*>(src + i);
      v[i] = x.x, v[i + 1] = x.y, v[i + 2] = x.z, v[i + 3] = x.w;
    } else {
      const float2 x = *reinterpret_cast<const float2*>(src + i);
      v[i] = x.x, v[i + 1] = x.y;
    }
  }
#pragma unroll
  for (int mt = 0; mt < kSdpMTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) out[mt][h] = v[2 * mt + h];
}

// acc *= x over a whole register tile.
template <int kMTiles, int kNTiles>
FJ_DEVICE void scale_tile(float (&acc)[kMTiles][kNTiles][4], float x) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] *= x;
}

}  // namespace fj::bwd

extern "C" __global__ void __launch_bounds__(fj::bwd::kThreads)
flashjit_bwd_main(const __grid_constant__ FjBackwardParams p) {
  using namespace fj;
  using namespace fj::bwd;
  // 128-byte aligned: the swizzle (layout.cuh) works on shared addresses, and every region starts
  // at a multiple of 128 bytes from here.
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Elem* sK = reinterpret_cast<Elem*>(smem_raw + kLayout.k);
  Elem* sV = reinterpret_cast<Elem*>(smem_raw + kLayout.v);
  // The products' operands and the P/dS stores by shared-space address (gemm.cuh says why).
  const unsigned smem_at = smem_addr(smem_raw);
  const unsigned sK_at = smem_at + kLayout.k, sV_at = smem_at + kLayout.v;
  const unsigned sP_at = smem_at + kLayout.p, sdS_at = smem_at + kLayout.ds;
  constexpr unsigned kB = sizeof(Elem);  // bytes an element: the addresses' unit

  const FjAttentionParams& f = p.fwd;
  // P formed between the S and dP products, or both P and dS after them (score_grad.cuh says when).
  constexpr bool kProbsFirst = !kSoftcap && !kCausal && !kWindow;
  // Two stages: the next Q block's copies issued without a branch (the last step zero-fills the
  // idle stage from this block's addresses), so ptxas schedules their address arithmetic among
  // the S product's instructions: D 128 +0.4-2.6%, D 256 +0.4-1.2%; with the S product's 4 k
  // steps at D 64, 1-6% slower (bench/NOTES.md entry 37).
  constexpr bool kNextCopiesBranchFree = kDQK >= 128;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const Frag fr{lane};
  const int k_block = k_block_of(blockIdx.x);
  const int n0 = k_block * kBlockN;
  const int kv_head = blockIdx.y;
  const int group = kGqa ? f.group : 1;  // q-heads kv_head * group ... + group - 1 read this K/V
  const Sequence seq = sequence_of(f, blockIdx.z);
  const int left = f.window_left, right = window_right_of(f);
  // This warp's tile of each product (config.cuh): S/dP rows and keys; dK/dV keys and columns;
  // dQ rows and columns.
  const int sdp_row0 = warp % kSdpWarpsM * kSdpRows, sdp_key0 = warp / kSdpWarpsM * kSdpKeys;
  const int dkv_key0 = warp % kDkvWarpsN * kDkvKeys;
  const int dk_col0 = warp / kDkvWarpsN * kDkColsWarp, dv_col0 = warp / kDkvWarpsN * kDvColsWarp;
  const int dq_row0 = warp % kDqWarpsM * kDqRows, dq_col0 = warp / kDqWarpsM * kDqCols;

  // The workspace holds seqlen_q_rounded rows a (sequence, head): a varlen sequence longer than
  // max_seqlen_q (prefix sums the host did not check) is cut there, as its forward was.
  const QBlocks walk = q_blocks_of(seq, n0, left, right, p.seqlen_q_rounded);
  const int first_m = walk.first, end_m = walk.end;

  // The head dims' padding columns, which the mma steps read but no copy writes: zeroed once.
  zero_columns<Elem, kBlockN, kHeadDimQK, kDQK, kStrideQK, kThreads, kSwizzleQK>(sK, tid);
  zero_columns<Elem, kBlockN, kHeadDimV, kDV, kStrideV, kThreads, kSwizzleV>(sV, tid);
#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    const QBlockTiles t = stage_tiles(smem_raw, s);
    zero_columns<Elem, kBlockM, kHeadDimQK, kDQK, kStrideQK, kThreads, kSwizzleQK>(t.q, tid);
    zero_columns<Elem, kBlockM, kHeadDimV, kDV, kStrideV, kThreads, kSwizzleV>(t.dout, tid);
  }

  // K and V of this block stay for the whole CTA; keys past the sequence's end become zeros.
  load_tile_async<Elem, kBlockN, kHeadDimQK, kStrideQK, kVec, kThreads, kSwizzleQK>(
      sK, key_row<Elem>(f.k, f.k_stride, seq, kv_head, n0), f.k_stride[1], f.k_stride[3], seq.len_k - n0, tid);
  load_tile_async<Elem, kBlockN, kHeadDimV, kStrideV, kVec, kThreads, kSwizzleV>(
      sV, key_row<Elem>(f.v, f.v_stride, seq, kv_head, n0), f.v_stride[1], f.v_stride[3], seq.len_k - n0, tid);

  // One walk over (q-head of the group, Q block), q-heads outer: every q-head meets the same
  // Q blocks (the mask does not depend on the head). Counters, not step / m_blocks: the
  // division's registers cost ptxas a spill at D = 128 with every feature on (first cut).
  const int steps = group * (end_m - first_m);
  int head = kv_head * group, m_block = first_m;
  if (steps > 0) load_q_block(stage_tiles(smem_raw, 0), p, seq, head, first_m * kBlockM, tid);
  cp_async_commit();

  int* turn_to_pass = nullptr;  // deterministic: the last step's Q block, whose turn passes on after a barrier

  float dk[kDkvMTiles][kDkColsWarp / 8][4];
  float dv[kDkvMTiles][kDvColsWarp / 8][4];
  zero_tile(dk);
  zero_tile(dv);

  for (int step = 0; step < steps; ++step) {
    const QBlockTiles cur = stage_tiles(smem_raw, kStages == 2 ? step & 1 : 0);
    const int m0 = m_block * kBlockM;
    int next_head = head, next_m = m_block + 1;
    if (next_m == end_m) next_m = first_m, ++next_head;

    // This Q block has landed; every warp is done with the last step's P, dS and (two stages)
    // the other stage's buffers, which the next Q block's copies overwrite now.
    cp_async_wait<0>();
    __syncthreads();
    if constexpr (kDeterministic) {
      if (turn_to_pass) pass_dq_turn(turn_to_pass, k_block, tid);
    }
    if constexpr (kStages == 2) {
      const bool more = step + 1 < steps;
      if (kNextCopiesBranchFree || more)
        load_q_block(stage_tiles(smem_raw, (step + 1) & 1), p, seq, more ? next_head : head,
                     (more ? next_m : m_block) * kBlockM, tid, more);
      cp_async_commit();
    }

    // ---- S and dP for this warp's tile, P and dS element by element (score_grad.cuh's two
    // orders), to shared memory.
    {
      float s[kSdpMTiles][kSdpNTiles][4];
      zero_tile(s);
      warp_gemm<kSdpMTiles, kSdpNTiles, kDQK / 16, false, kStrideQK, false, kStrideQK, kSwizzleQK, kSwizzleQK>(
          s, cur.q_at + sdp_row0 * kStrideQK * kB, sK_at + sdp_key0 * kStrideQK * kB, lane);
      // Each row's LSE and D are read where they are used: loaded together before the dP
      // product, they cost ptxas 4-16 B of spills at the defaults (entry 37).
      float lse[kSdpMTiles][2], dsum[kSdpMTiles][2];
      float dp[kSdpMTiles][kSdpNTiles][4];
      // The ALiBi slope is read where P is formed, not with the head: live across the products,
      // it cost ptxas a spill at D = 128 with window, softcap and ALiBi together (first cut).
      // P and dS round to 16 bits as they are staged, as FA2's do, for the products that read
      // them (fp32 inputs keep them fp32: the products' tf32 split is where they round, if anywhere).
      if constexpr (kProbsFirst) {
        load_row_stats(lse, cur.lse, sdp_row0 + fr.g());
        form_probs<false, kSdpRows, kSdpKeys>(s, dp, lse, dsum, m0 + sdp_row0, n0 + sdp_key0, fr, seq, left, right, f,
                                              alibi_slope_of(f, blockIdx.z, head));
      }
      zero_tile(dp);
      warp_gemm<kSdpMTiles, kSdpNTiles, kDV / 16, false, kStrideV, false, kStrideV, kSwizzleV, kSwizzleV>(
          dp, cur.dout_at + sdp_row0 * kStrideV * kB, sV_at + sdp_key0 * kStrideV * kB, lane);
      load_row_stats(dsum, cur.dsum, sdp_row0 + fr.g());
      // (P staged before dS is formed: staged after, the first order measured 2.5% slower at
      // D 64, entry 37.)
      if constexpr (kProbsFirst) {
        stage_tile<kStridePS, false>(sP_at, s, sdp_row0, sdp_key0, lane);
        probs_to_grads(s, dp, dsum);
      } else {
        load_row_stats(lse, cur.lse, sdp_row0 + fr.g());
        form_probs<true, kSdpRows, kSdpKeys>(s, dp, lse, dsum, m0 + sdp_row0, n0 + sdp_key0, fr, seq, left, right, f,
                                             alibi_slope_of(f, blockIdx.z, head));
        stage_tile<kStridePS, false>(sP_at, s, sdp_row0, sdp_key0, lane);
      }
      stage_tile<kStridePS, false>(sdS_at, dp, sdp_row0, sdp_key0, lane);
    }
    __syncthreads();

    // ---- dV and dK for this warp's keys and columns, over the Q block's rows.
    warp_gemm<kDkvMTiles, kDvColsWarp / 8, kBlockM / 16, true, kStridePS, true, kStrideV, false, kSwizzleV>(
        dv, sP_at + dkv_key0 * kB, cur.dout_at + dv_col0 * kB, lane);
    warp_gemm<kDkvMTiles, kDkColsWarp / 8, kBlockM / 16, true, kStridePS, true, kStrideQK, false, kSwizzleQK>(
        dk, sdS_at + dkv_key0 * kB, cur.q_at + dk_col0 * kB, lane);
    // ---- dQ for this warp's rows and columns, over the CTA's keys, into the accumulator.
    {
      float dq[kDqMTiles][kDqNTiles][4];
      zero_tile(dq);
      warp_gemm<kDqMTiles, kDqNTiles, kBlockN / 16, false, kStridePS, true, kStrideQK, false, kSwizzleQK>(
          dq, sdS_at + dq_row0 * kStridePS * kB, sK_at + dq_col0 * kB, lane);
      if constexpr (kDeterministic) {
        // Recomputed here, not kept from the start: registers live across the loop cost spills.
        turn_to_pass = dq_turn_of(p, blockIdx.z, head, m_block);
        wait_dq_turn(turn_to_pass, k_block, q_blocks_of(seq, n0 + kBlockN, left, right, p.seqlen_q_rounded).has(m_block));
      }
      add_dq(p.dq_accum + (workspace_head(p, blockIdx.z, head) + m0) * kDQK, dq, p.scale, tid);
    }

    if constexpr (kStages == 1) {
      __syncthreads();  // every warp is done with the one stage's Q and dO
      if (step + 1 < steps) load_q_block(stage_tiles(smem_raw, 0), p, seq, next_head, next_m * kBlockM, tid);
      cp_async_commit();
    }
    head = next_head;
    m_block = next_m;
  }

  // ---- epilogue: dK (times the scale) and dV through the K and V tiles, then stored. Keys no
  // query row sees still get their zeros written, and so do the rows past kv_lens up to the
  // sequence's capacity (cap_k): none of the next sequence's (varlen) rows.
  cp_async_wait<0>();  // with no Q block, the K/V copies may still be in flight
  __syncthreads();     // and every warp is done reading K (dQ) and V (dP), and adding its dQ
  if constexpr (kDeterministic) {
    if (turn_to_pass) pass_dq_turn(turn_to_pass, k_block, tid);
  }
  scale_tile(dk, p.scale);
  stage_tile<kStrideQK, kSwizzleQK>(sK_at, dk, dkv_key0, dk_col0, lane);
  stage_tile<kStrideV, kSwizzleV>(sV_at, dv, dkv_key0, dv_col0, lane);
  __syncthreads();
  // cap_k read again here rather than kept from the start: live across the loop, it cost ptxas
  // spills at D = 128 with every feature on (first cut).
  const int rows_k = min(kBlockN, sequence_of(f, blockIdx.z).cap_k - n0);
  if (rows_k <= 0) return;
  store_tile<Elem, kBlockN, kHeadDimQK, kStrideQK, kVec, kThreads, kSwizzleQK>(
      row_at(static_cast<Elem*>(p.dk), p.dk_stride, seq.batch, seq.k_start + n0, kv_head), p.dk_stride[1],
      p.dk_stride[3], sK, rows_k, tid);
  store_tile<Elem, kBlockN, kHeadDimV, kStrideV, kVec, kThreads, kSwizzleV>(
      row_at(static_cast<Elem*>(p.dv), p.dv_stride, seq.batch, seq.k_start + n0, kv_head), p.dv_stride[1],
      p.dv_stride[3], sV, rows_k, tid);
}
