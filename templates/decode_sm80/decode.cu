// decode_sm80: attention for a few query tokens per sequence against a long key/value cache
// (decode, speculative decoding), bound by reading K and V once. Three choices make it so:
//   - GQA packing: a CTA's rows are (query token, query head) pairs of one key/value head, so
//     every K/V tile is read once for the whole group, not once per query head;
//   - the warps of a CTA split each key tile between them instead of splitting rows (a decode
//     CTA has as few as 1 row), and merge their partial results at the end;
//   - split-KV: the key range is cut into `splits` parts run by different CTAs, so a small batch
//     still fills the GPU; the last part of a row block to finish merges them in a fixed order
//     (an atomic ticket picks it), so the call stays one launch.
#include "common/attention_params.cuh"
#include "common/paged_kv.cuh"
#include "common/sequence.cuh"
#include "common/sm80_mainloop.cuh"
#include "common/tile_io.cuh"
#include "decode_sm80/config.cuh"
#include "decode_sm80/merge.cuh"
#include "decode_sm80/params.cuh"
#include "decode_sm80/rows.cuh"

extern "C" __global__ void __launch_bounds__(fj::dec::kThreads)
flashjit_decode_fwd(const __grid_constant__ FjDecodeParams dp) {
  using namespace fj;
  using namespace fj::dec;
  const FjAttentionParams& p = dp.attn;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Elem* sQ = reinterpret_cast<Elem*>(smem_raw);
  const KvRing ring{sQ + kLayout.q_elems};

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int split = blockIdx.x;
  const int kv_head = blockIdx.y % p.heads_kv, row_block = blockIdx.y / p.heads_kv;
  const int b = blockIdx.z;
  const Sequence seq = sequence_of(p, b);
  const int group = p.group;
  const int rows_total = seq.len_q * group;
  const int row0 = row_block * kRows;
  if (row0 >= rows_total) return;  // partials of rows that do not exist are never read
  const int rows = min(kRows, rows_total - row0);

  // The keys any of the CTA's tokens sees, in whole tiles, and this split's share of them.
  const int right = kWindow ? p.window_right : 0;
  int key_lo, key_hi;
  key_range<kCausal, kWindow>(seq, row0 / group, (row0 + rows - 1) / group - row0 / group + 1, p.window_left, right,
                              key_lo, key_hi);
  const int first_tile = key_lo / kTileKeys;
  const int all_tiles = key_hi > key_lo ? (key_hi + kTileKeys - 1) / kTileKeys - first_tile : 0;
  const int per_split = (all_tiles + dp.splits - 1) / dp.splits;
  const int my_first = first_tile + split * per_split;
  const int n_tiles = max(0, min(per_split, all_tiles - split * per_split));

  zero_columns<Elem, kRows, kHeadDimQK, kDQK, kStrideQK, kThreads>(sQ, tid);
  for (int s = 0; s < kStages; ++s) {
    zero_columns<Elem, kTileKeys, kHeadDimQK, kDQK, kStrideQK, kThreads>(ring.base + s * kStageElems, tid);
    zero_columns<Elem, kTileKeys, kHeadDimV, kDV, kStrideV, kThreads>(
        ring.base + s * kStageElems + kTileKeys * kStrideQK, tid);
  }
  // The CTA's query rows: the group's heads for each token, gathered row by row.
  load_rows_async<Elem, kRows, kHeadDimQK, kStrideQK, kVec, kThreads>(
      sQ,
      [&](int r) {
        const int row = row0 + r;
        return static_cast<const Elem*>(p.q) + seq.batch * p.q_stride[0] + (seq.q_start + row / group) * p.q_stride[1] +
               (kv_head * group + row % group) * p.q_stride[2];
      },
      p.q_stride[3], rows, tid);
  cp_async_commit();

  const Elem* gK = kPaged ? nullptr : key_row<Elem>(p.k, p.k_stride, seq, kv_head, 0);
  const Elem* gV = kPaged ? nullptr : key_row<Elem>(p.v, p.v_stride, seq, kv_head, 0);
  // Paged: the pages of the next tile to copy, fetched a tile ahead (K and V rows share pages but
  // may be split differently between threads when their head dims differ).
  TilePages<kTileKeys, kHeadDimQK / kVec, kThreads> k_pages;
  TilePages<kTileKeys, kHeadDimV / kVec, kThreads> v_pages;
  // Equal head dims split K and V rows alike between threads: one list serves both.
  constexpr bool kSharedPages = kHeadDimQK == kHeadDimV;
  auto fetch_pages = [&](int t) {
    if constexpr (kPaged) {
      k_pages.fetch(p, b, seq.k_start + (my_first + t) * kTileKeys, tid);
      if constexpr (!kSharedPages) v_pages.fetch(p, b, seq.k_start + (my_first + t) * kTileKeys, tid);
    }
  };
  auto load_kv = [&](int t) {
    const KvRing::Slot kv = ring.slot(t);
    Elem* sK = kv.k;
    const int n0 = (my_first + t) * kTileKeys;
    const int valid = seq.len_k - n0;
    if constexpr (kPaged) {
      load_paged_tile_async<Elem, kTileKeys, kHeadDimQK, kStrideQK, kVec, kThreads>(sK, p.k, p.k_stride, kv_head,
                                                                                      k_pages, valid, tid);
      load_paged_tile_async<Elem, kTileKeys, kHeadDimV, kStrideV, kVec, kThreads>(
          kv.v, p.v, p.v_stride, kv_head, pages_for_v<kSharedPages>(k_pages, v_pages), valid,
          tid);
    } else {
      load_tile_async<Elem, kTileKeys, kHeadDimQK, kStrideQK, kVec, kThreads>(
          sK, gK + n0 * p.k_stride[1], p.k_stride[1], p.k_stride[3], valid, tid);
      load_tile_async<Elem, kTileKeys, kHeadDimV, kStrideV, kVec, kThreads>(
          kv.v, gV + n0 * p.v_stride[1], p.v_stride[1], p.v_stride[3], valid, tid);
    }
  };
  ring.prologue(n_tiles, [&](int s) {
    fetch_pages(s);
    load_kv(s);
  });
  if (kStages - 1 < n_tiles) fetch_pages(kStages - 1);

  const RowMap rm = map_rows(row0, rows_total, group, kv_head, lane);
  float slope[kRowTiles][2];
  alibi_slopes(slope, rm, p, b);
  const float score_scale = kScoresInLog2 ? 1.f : p.scale_log2;

  float o[kRowTiles][kNTilesO][4];
  zero_tile(o);
  Softmax sm;
  sm.init();
  unsigned qreg[kQInRegisters ? kDQK / 16 : 1][kRowTiles][4];

  for (int t = 0; t < n_tiles; ++t) {
    ring.wait();
    if constexpr (kQInRegisters) {
      if (t == 0) sm80::load_q_regs<Gemm>(qreg, sQ, 0, lane);
    }
    ring.issue_ahead(t, n_tiles, [&](int ahead) {
      load_kv(ahead);
      if (ahead + 1 < n_tiles) fetch_pages(ahead + 1);  // used by the next iteration's copies
    });

    // This warp's slice of the tile: keys [warp * kWarpKeys, (warp + 1) * kWarpKeys).
    const KvRing::Slot kv = ring.slice(t, warp * kWarpKeys);
    const Elem* sK = kv.k;
    const Elem* sV = kv.v;
    sm80::attend<Gemm, kNTilesS, k16Bit, kQInRegisters>(
        o, sm, qreg, sQ, sK, sV, 0, lane, score_scale, [&](float (&s)[kRowTiles][kNTilesS][4]) {
          scores(s, rm, slope, (my_first + t) * kTileKeys + warp * kWarpKeys + 2 * (lane & 3), seq, p, right);
        });
  }

  // Merge the warps: each row's max (log2 units) and sum per warp, then the outputs rescaled to
  // the largest max and added. The stages are free once every warp is past its last tile.
  ring.drain();
  const MergedRows mg = merge_warps(o, sm, score_scale, smem_raw, tid, warp, lane);
  if (dp.splits == 1) {
    store_rows(p, seq, mg, row0, rows, kv_head, tid);
  } else {
    store_partials(dp, mg, split, b, row0, rows, kv_head, tid);
    // The last split of this row block to finish merges all of them: no second launch.
    __shared__ unsigned ticket;
    __threadfence();  // this CTA's partials are visible before its ticket is taken
    __syncthreads();
    unsigned* my_ticket = dp.tickets + ((long long)b * p.heads_kv + kv_head) * dp.row_blocks + row_block;
    if (tid == 0) ticket = atomicAdd(my_ticket, 1u);
    __syncthreads();
    if (ticket != unsigned(dp.splits - 1)) return;
    __threadfence();  // every other split's partials are visible to the reads below
    merge_splits(dp, seq, b, kv_head, row0, rows, reinterpret_cast<float*>(smem_raw), tid);
    if (tid == 0) *my_ticket = 0u;  // ready for the next call (and a graph's next replay)
  }
}
