// Correctness of the forward kernels on a real GPU against a float64 CPU reference.
#include <atomic>
#include <thread>

#include "gpu_fixture.hpp"
#include "kernel_family.hpp"

using namespace flashjit;
using flashjit::gpu_test::run_and_check;
using flashjit::gpu_test::run_and_check_all;
using tools::CaseSpec;
using tools::Layout;

namespace {

CaseSpec spec(DType dt, std::int64_t sq, std::int64_t sk, std::int64_t d, Mask m, std::uint64_t seed) {
  CaseSpec s;
  s.dtype = dt;
  s.batch = 2;
  s.heads_q = s.heads_kv = 2;
  s.seqlen_q = sq;
  s.seqlen_k = sk;
  s.head_dim_qk = s.head_dim_v = d;
  s.mask = m;
  s.seed = seed;
  return s;
}

struct DtypeCase {
  DType dtype;
  Fp32Math math;
};
const DtypeCase kDtypes[] = {{DType::f16, Fp32Math::exact}, {DType::bf16, Fp32Math::exact},
                             {DType::f32, Fp32Math::exact}, {DType::f32, Fp32Math::tf32}};

}  // namespace

TEST_CASE("every dtype, head dim and short sequence length, causal and not") {
  std::vector<CaseSpec> cases;
  std::uint64_t seed = 100;
  for (const auto& dc : kDtypes)
    for (std::int64_t d : {48, 80, 96, 128, 200, 256})
      for (std::int64_t s : {1, 3, 127, 1000})
        for (Mask m : {Mask::none, Mask::causal}) {
          CaseSpec c = spec(dc.dtype, s, s, d, m, ++seed);
          c.fp32_math = dc.math;
          c.lse = (seed % 3) == 0;
          cases.push_back(c);
        }
  run_and_check_all(cases);
}

TEST_CASE("long sequences: S = 4096") {
  std::vector<CaseSpec> cases;
  for (const auto& dc : kDtypes)
    for (std::int64_t d : {64, 128})
      for (Mask m : {Mask::none, Mask::causal}) {
        CaseSpec c = spec(dc.dtype, 4096, 4096, d, m, 7 + d);
        c.batch = 1;
        c.fp32_math = dc.math;
        c.lse = true;
        cases.push_back(c);
      }
  run_and_check_all(cases);
}

TEST_CASE("GQA 8:1 and MQA") {
  std::vector<CaseSpec> cases;
  for (DType dt : {DType::f16, DType::bf16}) {
    CaseSpec c = spec(dt, 333, 333, 128, Mask::causal, 11);
    c.heads_q = 8;
    c.heads_kv = 1;
    c.lse = true;
    cases.push_back(c);
    c.heads_q = 16;
    c.heads_kv = 2;  // 8:1 with two groups
    c.mask = Mask::none;
    cases.push_back(c);
  }
  run_and_check_all(cases);
}

TEST_CASE("cross attention and causal with Sq != Sk (bottom-right aligned)") {
  std::vector<CaseSpec> cases;
  for (DType dt : {DType::f16, DType::f32}) {
    for (auto [sq, sk] : {std::pair<std::int64_t, std::int64_t>{127, 1000}, {1000, 127}, {1, 4096}, {300, 77}})
      for (Mask m : {Mask::none, Mask::causal}) {
        CaseSpec c = spec(dt, sq, sk, 64, m, 21 + sq);
        c.lse = true;  // rows that see no key: zeros and lse = -inf
        cases.push_back(c);
      }
  }
  run_and_check_all(cases);
}

TEST_CASE("odd and unequal head dims") {
  std::vector<CaseSpec> cases;
  for (DType dt : {DType::f16, DType::bf16, DType::f32})
    for (auto [dq, dv] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {3, 5}, {33, 33}, {192, 128}, {64, 200}, {256, 32}}) {
      CaseSpec c = spec(dt, 257, 190, dq, Mask::causal, 31 + dq);
      c.head_dim_v = dv;
      c.lse = true;
      cases.push_back(c);
    }
  run_and_check_all(cases);
}

TEST_CASE("strided views: [B,H,S,D], padded and misaligned rows, strided head dim, packed QKV") {
  std::vector<CaseSpec> cases;
  for (DType dt : {DType::f16, DType::bf16, DType::f32})
    for (Layout l : {Layout::bhsd, Layout::padded, Layout::strided_d, Layout::packed_qkv})
      for (Mask m : {Mask::none, Mask::causal}) {
        CaseSpec c = spec(dt, 200, 200, 64, m, 41);
        c.layout = l;
        cases.push_back(c);
      }
  run_and_check_all(cases);
}

TEST_CASE("softmax scale and repeated calls compile once") {
  auto& f = gpu_test::Fixture::get();
  CaseSpec s = spec(DType::f16, 129, 129, 64, Mask::none, 51);
  auto c = tools::AttentionCase::create(f.gpu, s);
  REQUIRE(c.ok());
  const auto before = f.engine->stats();
  for (int i = 0; i < 5; ++i) REQUIRE(f.engine->forward(c->args(), nullptr).ok());
  const auto after = f.engine->stats();
  CHECK(after.module_loads - before.module_loads <= 1);
  CHECK(after.plan_hits - before.plan_hits >= 4);
}

TEST_CASE("zero keys give zeros and -inf lse") {
  std::vector<CaseSpec> cases;
  CaseSpec s = spec(DType::f16, 64, 0, 64, Mask::none, 61);
  s.lse = true;
  cases.push_back(s);
  run_and_check_all(cases);
}

TEST_CASE("every candidate tiling the tuner may pick computes the same attention") {
  auto& f = gpu_test::Fixture::get();
  const Arch arch = Arch::parse(f.gpu.info().arch).value();
  struct Pick {
    DType dt;
    int d;
    Mask m;
  };
  for (const Pick& pick : {Pick{DType::f16, 64, Mask::causal}, Pick{DType::bf16, 128, Mask::none},
                           Pick{DType::f16, 96, Mask::causal}, Pick{DType::f32, 64, Mask::none}}) {
    CaseSpec s = spec(pick.dt, 300, 517, pick.d, pick.m, 71 + pick.d);
    s.mask = pick.m;
    auto c = tools::AttentionCase::create(f.gpu, s);
    REQUIRE(c.ok());
    const KernelVariant variant = f.engine->plan(c->args(), arch.name()).value().variant;
    const auto tilings = find_family(variant.family)->candidate_tilings(arch, variant.semantics);
    // Compile all candidates on every core first (into the disk cache), then run each.
    std::atomic<std::size_t> next{0};
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < std::max(1u, std::thread::hardware_concurrency()); ++t)
      pool.emplace_back([&] {
        for (std::size_t i; (i = next++) < tilings.size();) {
          KernelVariant v = variant;
          v.tiling = tilings[i];
          (void)f.engine->compile(v, arch.name());
        }
      });
    for (auto& th : pool) th.join();
    for (const Tiling& t : tilings) {
      INFO(s.describe() << " tiling " << t.name());
      REQUIRE(c->poison().ok());
      auto st = f.engine->forward_with_tiling(c->args(), t);
      REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.error().to_string()));
      REQUIRE(f.gpu.driver().cuCtxSynchronize() == CUDA_SUCCESS);
      auto r = c->check().value();
      CHECK(r.unwritten == 0);
      CHECK(r.rel_l2 <= gpu_test::tolerance(s));
    }
    std::printf("  %zu tilings checked for %s\n", tilings.size(), s.describe().c_str());
  }
}

// Issue 21 G5: sm_86 and sm_89 give a block 99 KiB of shared memory, so fp32 at large head dims
// runs a smaller tiling there than on sm_80 or sm_90. Runs that tiling on whatever GPU is here,
// prefill and decode shapes (decode_sm80 does not fit there: fa2_sm80 takes both).
TEST_CASE("fp32 head dims 200 and 256 with the tiling sm_86 chooses") {
  auto& f = gpu_test::Fixture::get();
  const Arch sm86 = Arch::parse("sm_86").value();
  std::uint64_t seed = 2100;
  for (Fp32Math math : {Fp32Math::exact, Fp32Math::tf32})
    for (std::int64_t d : {200, 256})
      for (std::int64_t sq : {1, 300}) {
        CaseSpec s = spec(DType::f32, sq, 517, d, sq == 1 ? Mask::none : Mask::causal, ++seed);
        s.fp32_math = math;
        s.lse = sq == 1;
        auto c = tools::AttentionCase::create(f.gpu, s);
        REQUIRE(c.ok());
        auto plan = f.engine->plan(c->args(), sm86.name());
        REQUIRE_MESSAGE(plan.ok(), (plan.ok() ? "" : plan.error().to_string()));
        const KernelVariant& v = plan->variant;
        INFO(s.describe() << " " << v.name());
        CHECK(variant_smem_bytes(v) <= arch_smem_limit(sm86));
        REQUIRE(c->poison().ok());
        auto st = f.engine->forward_with_tiling(c->args(), v.tiling);
        REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.error().to_string()));
        REQUIRE(f.gpu.driver().cuCtxSynchronize() == CUDA_SUCCESS);
        auto r = c->check().value();
        CHECK(r.unwritten == 0);
        CHECK(r.rel_l2 <= gpu_test::tolerance(s));
      }
}
