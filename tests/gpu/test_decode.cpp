// The decode family and paged caches on a real GPU against the float64 reference: decode shapes
// (1-16 queries) across GQA ratios, dtypes and cache lengths up to 100k; per-sequence lengths;
// page pools of 1 to 256 keys a page with shuffled block tables; split and unsplit keys give the
// same answer, and a split run repeats bit for bit; chunked prefill over a paged cache; a
// captured decode step replays with new lengths in the same buffers.
#include <random>

#include "gpu_fixture.hpp"
#include "kernel_family.hpp"

using namespace flashjit;
using flashjit::gpu_test::Fixture;
using flashjit::gpu_test::run_and_check_all;
using tools::CaseSpec;

namespace {

CaseSpec decode_case(DType dt, std::int64_t batch, std::int64_t hq, std::int64_t hkv, std::int64_t sq, std::int64_t sk,
                     std::uint64_t seed) {
  CaseSpec s;
  s.dtype = dt;
  s.batch = batch;
  s.heads_q = hq;
  s.heads_kv = hkv;
  s.seqlen_q = sq;
  s.seqlen_k = sk;
  s.head_dim_qk = s.head_dim_v = 128;
  s.seed = seed;
  s.lse = true;
  return s;
}

// Random lengths in [1, cap] per sequence, one of them the full cache.
std::vector<std::int64_t> random_lens(std::int64_t n, std::int64_t cap, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> lens;
  for (std::int64_t i = 0; i < n; ++i) lens.push_back(1 + std::int64_t(rng() % std::uint64_t(cap)));
  lens[0] = cap;
  return lens;
}

std::string family_of(const CaseSpec& s) {
  Fixture& f = Fixture::get();
  auto c = tools::AttentionCase::create(f.gpu, s);
  REQUIRE(c.ok());
  auto p = f.engine->plan(c->args(), f.gpu.info().arch);
  REQUIRE(p.ok());
  return p->variant.family;
}

}  // namespace

TEST_CASE("decode shapes run on decode_sm80, prefill shapes on the arch's prefill family") {
  const bool hopper = Fixture::get().gpu.info().arch == "sm_90a";
  CHECK(family_of(decode_case(DType::bf16, 2, 32, 8, 1, 4096, 1)) == "decode_sm80");
  CHECK(family_of(decode_case(DType::bf16, 2, 32, 8, 16, 4096, 1)) == "decode_sm80");
  CHECK(family_of(decode_case(DType::bf16, 2, 32, 8, 17, 4096, 1)) == (hopper ? "fa3_sm90" : "fa2_sm80"));
}

TEST_CASE("decode: GQA 1/4/8/16 x queries 1..16 x every dtype") {
  std::vector<CaseSpec> cases;
  std::uint64_t seed = 8000;
  const DType dts[] = {DType::f16, DType::bf16, DType::f32};
  for (int group : {1, 4, 8, 16})
    for (std::int64_t sq : {1, 2, 5, 16}) {
      ++seed;  // first: the dtype and the seed come from the same count on every compiler
      CaseSpec c = decode_case(dts[seed % 3], 2, 2 * group, 2, sq, 777 + 97 * sq, seed);
      c.mask = sq > 1 && seed % 2 ? Mask::causal : Mask::none;
      cases.push_back(c);
    }
  CaseSpec tf32 = decode_case(DType::f32, 3, 8, 2, 3, 2000, 77);
  tf32.fp32_math = Fp32Math::tf32;
  cases.push_back(tf32);
  run_and_check_all(cases);
}

TEST_CASE("decode: caches from 1 to 100k keys, and per-sequence lengths") {
  std::vector<CaseSpec> cases;
  std::uint64_t seed = 8100;
  for (std::int64_t sk : {1, 17, 64, 1000, 4097, 33000}) cases.push_back(decode_case(DType::bf16, 2, 8, 2, 1, sk, ++seed));
  cases.push_back(decode_case(DType::f16, 1, 8, 1, 1, 100000, ++seed));
  CaseSpec lens = decode_case(DType::bf16, 6, 16, 4, 4, 5000, ++seed);
  lens.mask = Mask::causal;
  lens.kv_lens = random_lens(6, 5000, seed);
  lens.kv_lens[1] = 0;     // an empty cache: zeros and LSE -inf
  lens.kv_lens[2] = 9999;  // past the cache: clamped to it
  cases.push_back(lens);
  run_and_check_all(cases);
}

TEST_CASE("decode with every semantic: window, softcap, ALiBi, sinks, varlen, Dqk != Dv") {
  std::vector<CaseSpec> cases;
  std::uint64_t seed = 8200;
  CaseSpec w = decode_case(DType::bf16, 3, 16, 4, 4, 3000, ++seed);
  w.mask = Mask::causal;
  w.window = Window{500, 0};
  cases.push_back(w);
  CaseSpec cap = decode_case(DType::f16, 2, 8, 2, 2, 2000, ++seed);
  cap.softcap = 30.f;
  cap.alibi = true;
  cap.sinks = true;
  cases.push_back(cap);
  CaseSpec vl = decode_case(DType::bf16, 1, 8, 2, 1, 1, ++seed);
  vl.varlen_q = {1, 3, 0, 16};
  vl.varlen_k = {900, 1, 40, 5000};
  vl.sinks = true;
  cases.push_back(vl);
  CaseSpec mla = decode_case(DType::bf16, 2, 16, 1, 2, 1500, ++seed);  // MQA with Dqk 192, Dv 128
  mla.head_dim_qk = 192;
  cases.push_back(mla);
  CaseSpec d256 = decode_case(DType::f32, 2, 4, 2, 1, 1000, ++seed);
  d256.head_dim_qk = d256.head_dim_v = 256;
  cases.push_back(d256);
  run_and_check_all(cases);
}

TEST_CASE("paged caches: page sizes 1, 16, 64, 256 with shuffled block tables, decode and chunked prefill") {
  std::vector<CaseSpec> cases;
  std::uint64_t seed = 8300;
  for (std::int64_t page : {1, 16, 64, 256})
    for (std::int64_t sq : {1, 4, 200}) {  // 200 queries: chunked prefill (fa3_sm90 on sm_90a for pages of 8k keys)
      ++seed;
      CaseSpec c = decode_case(seed % 2 ? DType::bf16 : DType::f16, 3, 8, 2, sq, 1100, seed);
      c.mask = sq > 1 ? Mask::causal : Mask::none;
      c.page_size = page;
      c.kv_lens = random_lens(3, 1100, seed);
      for (auto& l : c.kv_lens) l = std::max(l, sq);  // causal prefill chunks sit at each cache's end
      cases.push_back(c);
    }
  // Varlen prefill chunks against paged caches (each sequence's own length), with a window.
  CaseSpec chunked = decode_case(DType::bf16, 1, 8, 2, 1, 1, ++seed);
  chunked.varlen_q = {64, 1, 300};
  chunked.varlen_k = {640, 2000, 300};
  chunked.kv_lens = {640, 1500, 300};
  chunked.page_size = 16;
  chunked.mask = Mask::causal;
  chunked.window = Window{256, 0};
  cases.push_back(chunked);
  run_and_check_all(cases);
}

TEST_CASE("split and unsplit keys give the same answer; a split run repeats bit for bit") {
  Fixture& f = Fixture::get();
  CaseSpec s = decode_case(DType::bf16, 1, 32, 8, 1, 32768, 8400);
  s.sinks = true;
  auto c = tools::AttentionCase::create(f.gpu, s);
  REQUIRE(c.ok());
  const auto* knobs = family_knobs("decode_sm80");
  REQUIRE(knobs);
  auto run = [&](int splits) {
    Tiling t = parse_tiling("decode_sm80", "r1w4k16s3p0").value();
    t[knobs->index("splits")] = splits;
    const tools::CheckResult r = gpu_test::check_on_tiling(*c, t);
    std::printf("  splits %-3d rel_l2 %.2e lse_err %.2e\n", splits, r.rel_l2, r.lse_max_abs);
    return r.rel_l2;
  };
  const double one = run(1), many = run(32), again = run(32);
  CHECK(std::abs(one - many) < 5e-4);  // the same function, rounded in another order
  CHECK(many == again);                // a fixed merge order: the same bits every run
}

TEST_CASE("a captured decode step replays with new lengths and values in the same buffers") {
  Fixture& f = Fixture::get();
  const DriverLibrary& drv = f.gpu.driver();
  CUstream stream = nullptr;
  REQUIRE(drv.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  CaseSpec s = decode_case(DType::bf16, 4, 32, 8, 1, 8192, 8500);
  s.page_size = 64;
  s.kv_lens = {8192, 5000, 17, 2049};
  auto c = tools::AttentionCase::create(f.gpu, s);
  REQUIRE(c.ok());
  REQUIRE(f.engine->forward(c->args(), stream).ok());  // warm: compiled, planned, workspace sized
  REQUIRE(drv.cuStreamSynchronize(stream) == CUDA_SUCCESS);
  gpu_test::CapturedForward graph;
  gpu_test::capture_forward(c.value(), stream, graph);
  // Each step: one more key per sequence (as a decode loop appends), new values.
  std::vector<std::int64_t> lens{3000, 5001, 18, 4000};
  for (int step = 0; step < 3; ++step) {
    for (auto& l : lens) l = std::min<std::int64_t>(l + 1, 8192);
    REQUIRE(c->set_kv_lens(lens).ok());
    REQUIRE(c->refill(8600 + step).ok());
    REQUIRE(c->poison().ok());
    REQUIRE(drv.cuGraphLaunch(graph.exec, stream) == CUDA_SUCCESS);
    REQUIRE(drv.cuStreamSynchronize(stream) == CUDA_SUCCESS);
    auto r = c->check().value();
    std::printf("  replay %d: rel_l2 %.2e\n", step, r.rel_l2);
    CHECK(r.unwritten == 0);
    CHECK(r.rel_l2 <= gpu_test::tolerance(s));
    CHECK(r.lse_bad == 0);
  }
  drv.cuStreamDestroy(stream);
}
