#include "autotune/problem_bucket.hpp"

#include <doctest/doctest.h>

#include <unordered_set>

using namespace flashjit;
using namespace flashjit::autotune;

namespace {

Semantics causal_f16_d128() {
  Semantics s;
  s.dtype = DType::f16;
  s.head_dim_qk = s.head_dim_v = 128;
  s.mask = Mask::causal;
  s.vec = 8;
  return s;
}

}  // namespace

TEST_CASE("problem_bucket: sizes round up to powers of two between the first and last bucket") {
  CHECK(size_bucket(-5) == 2);
  CHECK(size_bucket(0) == 2);
  CHECK(size_bucket(1) == 2);
  CHECK(size_bucket(2) == 2);
  CHECK(size_bucket(3) == 4);
  CHECK(size_bucket(4) == 4);
  CHECK(size_bucket(5) == 8);
  CHECK(size_bucket(1000) == 1024);
  CHECK(size_bucket(1024) == 1024);
  CHECK(size_bucket(1025) == 2048);
  CHECK(size_bucket(4096) == 4096);
  CHECK(size_bucket(8192) == 8192);
  CHECK(size_bucket(16383) == 16384);
  CHECK(size_bucket(32769) == 65536);
  CHECK(size_bucket(65536) == 65536);
  CHECK(size_bucket(1 << 20) == 65536);
  CHECK(size_bucket(std::int64_t(1) << 40) == 65536);
}

TEST_CASE("problem_bucket: shapes in one bucket share a key and its hash") {
  const Semantics s = causal_f16_d128();
  TuningKey a = make_tuning_key("fa2_sm80", s, 3000, 3000, 40);
  TuningKey b = make_tuning_key("fa2_sm80", s, 4096, 2049, 64);
  CHECK(a == b);
  CHECK(TuningKeyHash{}(a) == TuningKeyHash{}(b));
  CHECK(a.seq_q_bucket == 4096);
  CHECK(a.seq_k_bucket == 4096);
  CHECK(a.batch_heads_bucket == 64);

  CHECK(make_tuning_key("fa2_sm80", s, 4097, 4096, 64) != a);  // seq_q crosses a boundary
  CHECK(make_tuning_key("fa2_sm80", s, 4096, 4097, 64) != a);
  CHECK(make_tuning_key("fa2_sm80", s, 4096, 4096, 65) != a);
}

TEST_CASE("problem_bucket: different semantics or family never share a key") {
  const Semantics base = causal_f16_d128();
  const TuningKey k = make_tuning_key("fa2_sm80", base, 1024, 1024, 32);
  std::vector<Semantics> others;
  for (int i = 0; i < 8; ++i) others.push_back(base);
  others[0].dtype = DType::bf16;
  others[1].head_dim_qk = others[1].head_dim_v = 64;
  others[2].head_dim_v = 64;
  others[3].mask = Mask::none;
  others[4].gqa = true;
  others[5].write_lse = true;
  others[6].vec = 4;
  others[7].dtype = DType::f32;
  others[7].vec = 4;

  std::unordered_set<std::string> names{k.to_string()};
  for (const Semantics& s : others) {
    TuningKey o = make_tuning_key("fa2_sm80", s, 1024, 1024, 32);
    CHECK(o != k);
    CHECK(names.insert(o.to_string()).second);  // the string form tells them apart too
  }
  TuningKey other_family = make_tuning_key("fa3_sm90", base, 1024, 1024, 32);
  CHECK(other_family != k);
  CHECK(other_family.to_string() != k.to_string());
}

TEST_CASE("problem_bucket: the string form is stable") {
  CHECK(make_tuning_key("fa2_sm80", causal_f16_d128(), 4000, 4096, 64).to_string() ==
        "fa2_sm80/f16-dqk128-dv128-causal-vec8/sq4096/sk4096/bh64");
  Semantics s;
  s.dtype = DType::bf16;
  s.head_dim_qk = 64;
  s.head_dim_v = 64;
  s.gqa = true;
  s.write_lse = true;
  s.vec = 8;
  CHECK(make_tuning_key("fa2_sm80", s, 1, 100000, 3).to_string() == "fa2_sm80/bf16-dqk64-dv64-gqa-lse-vec8/sq2/sk65536/bh4");
}

TEST_CASE("problem_bucket: the representative shape is the bucket's upper bound") {
  TuningKey k = make_tuning_key("fa2_sm80", causal_f16_d128(), 3000, 500, 40);
  BucketShape b = representative_shape(k);
  CHECK(b.seqlen_q == 4096);
  CHECK(b.seqlen_k == 512);
  CHECK(b.batch_x_heads == 64);
  // Every size of the bucket maps back to it.
  CHECK(make_tuning_key("fa2_sm80", k.semantics, b.seqlen_q, b.seqlen_k, b.batch_x_heads) == k);

  ProblemShape p = representative_problem(k);
  CHECK(p.batch == 1);
  CHECK(p.seqlen_q == 4096);
  CHECK(p.seqlen_k == 512);
  CHECK(p.heads_q == 64);
  CHECK(p.heads_kv == 64);

  k.semantics.gqa = true;
  p = representative_problem(k);
  CHECK(p.heads_q == 64);
  CHECK(p.heads_kv == 64 / kRepresentativeGqaGroup);
  k.batch_heads_bucket = 2;
  p = representative_problem(k);
  CHECK(p.heads_kv == 1);
  CHECK(p.heads_q % p.heads_kv == 0);
}
