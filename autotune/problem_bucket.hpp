// The tuning key: which stored tuning result a problem uses. The best tiling depends on the
// kernel family, the semantics (head dims, dtype, mask... change register and shared-memory
// pressure) and, more weakly, on the problem's size. Sizes are bucketed so that nearby shapes
// share one result: tuning every distinct sequence length would cost seconds per new length and
// fill the store with near-duplicates, while the best tiling only moves when a size changes by
// about a factor of two (how many blocks fill the GPU, how many K/V tiles each block walks).
//
// Buckets are powers of two, rounded up: a size n belongs to the smallest power of two >= n,
// with the first bucket (2) holding 1 and 2 and the last (65536) holding everything longer:
//   1..2 -> 2, 3..4 -> 4, 5..8 -> 8, ..., 2049..4096 -> 4096, ..., 32769.. -> 65536.
// The same rule buckets seqlen_q, seqlen_k and batch x heads_q (the number of independent
// attention problems, which with seqlen_q sets how many blocks there are).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "flashjit/variant.hpp"
#include "base/problem_shape.hpp"

namespace flashjit::autotune {

// The first bucket: 1 and 2 share it (below that there is nothing to tell apart).
inline constexpr int kSmallestBucket = 2;
// The last bucket: beyond 64K every block is full and the grid saturates any current GPU, so
// longer sizes tune alike.
inline constexpr int kLargestBucket = 65536;

// The bucket of a size (a sequence length or batch x heads), as described above. Sizes below 1
// (which the engine rejects before asking) fall in the first bucket.
int size_bucket(std::int64_t n);

struct TuningKey {
  std::string family;      // kernel family name, e.g. "fa2_sm80"
  Semantics semantics;
  int seq_q_bucket = kSmallestBucket;
  int seq_k_bucket = kSmallestBucket;
  int batch_heads_bucket = kSmallestBucket;

  bool operator==(const TuningKey& o) const;
  bool operator!=(const TuningKey& o) const { return !(*this == o); }

  // Stable, readable and unique per key, e.g. "fa2_sm80/f16-d128-causal-v8/sq4096/sk4096/bh64";
  // the tuning store files records under it, so changing it orphans stored results.
  std::string to_string() const;
};

struct TuningKeyHash {
  std::size_t operator()(const TuningKey& key) const;
};

TuningKey make_tuning_key(const std::string& family, const Semantics& semantics, std::int64_t seqlen_q,
                          std::int64_t seqlen_k, std::int64_t batch_x_heads);

// The shape an offline run times for a bucket: its upper bound, the largest size it holds
// (timing the upper end favours tilings that do well when the GPU is full, where most of the
// time of a bucket's problems goes).
struct BucketShape {
  std::int64_t seqlen_q = 0;
  std::int64_t seqlen_k = 0;
  std::int64_t batch_x_heads = 0;
};
BucketShape representative_shape(const TuningKey& key);

// Query heads per key/value head in the representative problem of a GQA key (a common
// grouping; the ratio barely changes speed, since each query head reads its K/V the same way).
inline constexpr int kRepresentativeGqaGroup = 4;

// The representative shape as a problem the engine can launch: batch 1 with batch x heads
// query heads (the kernel does not tell batch from heads apart when scheduling blocks).
ProblemShape representative_problem(const TuningKey& key);

}  // namespace flashjit::autotune
