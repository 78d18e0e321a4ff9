// Kernel arguments of the fa3_sm90 family: the common attention params plus one TMA tensor map
// per input, encoded by the host's launch plan. Shared verbatim by the host and NVRTC.
#pragma once

#include "common/attention_params.cuh"

// CUtensorMap's size and alignment, without cuda.h (the host static_asserts they agree).
struct alignas(64) FjTensorMap {
  unsigned long long words[16];
};

struct FjFa3Params {
  FjAttentionParams attn;
  FjTensorMap q_map;  // [batch, seq, head, dim] boxes of 64 dims x 64 query rows of one head
  FjTensorMap k_map;  // boxes of 64 dims x BLOCK_N keys (paged: kv_box_rows) of one key/value head
  FjTensorMap v_map;
  FjTensorMap o_map;  // like q_map; encoded only when the layout stages O for a TMA store
  // Paged caches: keys of one K/V box, the gcd of the page size and BLOCK_N (a multiple of 8), so
  // no box crosses a page; k_map and v_map then view the [pages, page_size, heads, dim] pools.
  int kv_box_rows;
  // Heads (of all sequences) whose tiles the walk interleaves (fa3_sm90/tile_walk.cuh): 1 on a
  // grid of one CTA per tile; on a persistent one, as many as the launch plan finds balance the
  // rounds and still share L2.
  int section_heads;
};
