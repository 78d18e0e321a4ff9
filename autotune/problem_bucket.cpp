#include "autotune/problem_bucket.hpp"

#include <algorithm>
#include <functional>

namespace flashjit::autotune {

int size_bucket(std::int64_t n) {
  if (n <= kSmallestBucket) return kSmallestBucket;
  if (n >= kLargestBucket) return kLargestBucket;
  return int(std::uint64_t(1) << (64 - __builtin_clzll(std::uint64_t(n - 1))));  // next power of two >= n
}

bool TuningKey::operator==(const TuningKey& o) const {
  return family == o.family && semantics == o.semantics && seq_q_bucket == o.seq_q_bucket &&
         seq_k_bucket == o.seq_k_bucket && batch_heads_bucket == o.batch_heads_bucket;
}

std::string TuningKey::to_string() const {
  return family + "/" + semantics.name() + "/sq" + std::to_string(seq_q_bucket) + "/sk" +
         std::to_string(seq_k_bucket) + "/bh" + std::to_string(batch_heads_bucket);
}

std::size_t TuningKeyHash::operator()(const TuningKey& key) const {
  // Buckets are powers of two: their logs pack into a few bits each. A collision only costs an
  // equality check.
  auto log2 = [](int bucket) {
    std::uint64_t l = 0;
    while ((1 << l) < bucket) ++l;
    return l;
  };
  const std::uint64_t buckets = (log2(key.seq_q_bucket) << 20) ^ (log2(key.seq_k_bucket) << 10) ^ log2(key.batch_heads_bucket);
  const std::size_t f = std::hash<std::string>{}(key.family) ^ key.semantics.fast_hash();
  const std::uint64_t golden = 0x9E3779B97F4A7C15ull;  // odd constant that spreads bits (Fibonacci hashing)
  return f ^ (buckets * golden + golden + (f << 6) + (f >> 2));
}

TuningKey make_tuning_key(const std::string& family, const Semantics& semantics, std::int64_t seqlen_q,
                          std::int64_t seqlen_k, std::int64_t batch_x_heads) {
  TuningKey key;
  key.family = family;
  key.semantics = semantics;
  key.seq_q_bucket = size_bucket(seqlen_q);
  key.seq_k_bucket = size_bucket(seqlen_k);
  key.batch_heads_bucket = size_bucket(batch_x_heads);
  return key;
}

BucketShape representative_shape(const TuningKey& key) {
  return BucketShape{key.seq_q_bucket, key.seq_k_bucket, key.batch_heads_bucket};
}

ProblemShape representative_problem(const TuningKey& key) {
  const BucketShape b = representative_shape(key);
  ProblemShape p;
  p.batch = 1;
  p.seqlen_q = b.seqlen_q;
  p.seqlen_k = b.seqlen_k;
  p.heads_q = b.batch_x_heads;
  p.heads_kv = key.semantics.gqa ? std::max<std::int64_t>(1, b.batch_x_heads / kRepresentativeGqaGroup)
                                 : b.batch_x_heads;
  return p;
}

}  // namespace flashjit::autotune
