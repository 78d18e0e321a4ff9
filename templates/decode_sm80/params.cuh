// Kernel arguments of the decode_sm80 family: the common attention params plus the split-KV
// workspace. Shared verbatim by the host and NVRTC.
#pragma once

#include "common/attention_params.cuh"

struct FjDecodeParams {
  FjAttentionParams attn;
  // splits > 1: each split's rows, normalized within the split, and their log-sum-exp in log2
  // units (-inf for a split that saw no key): [splits][batch][heads_q][seqlen_q] (x dv for o).
  float* partial_o;
  float* partial_lse;
  // One ticket per (sequence, key/value head, row block): each split takes one after writing its
  // partial; the last merges them all and sets the ticket back to 0 (the workspace starts zeroed).
  unsigned* tickets;
  int splits;      // key ranges per (sequence, key/value head, row block); 1 writes o directly
  int row_blocks;  // CTAs along one key/value head's rows
};
