// fa3_sm90 on an sm_90 GPU against the float64 reference, by name (dispatch does not pick it
// yet): both 16-bit dtypes, head dims 64/128/256, causal or not with Sq != Sk (rows that see no
// key included), GQA, LSE, every candidate tiling of one variant; and its error next to
// fa2_sm80's on the same inputs.
#include "gpu_fixture.hpp"
#include "kernel_family.hpp"

using namespace flashjit;
using flashjit::gpu_test::Fixture;
using tools::CaseSpec;

namespace {

bool on_sm90() {
  Fixture& f = Fixture::get();
  if (f.gpu.info().arch.rfind("sm_90", 0) == 0) return true;
  MESSAGE("SKIPPED: fa3_sm90 needs an sm_90 GPU, this one is " << f.gpu.info().arch);
  return false;
}

CaseSpec fa3_case(DType dt, int d, Mask m, std::int64_t sq, std::int64_t sk, std::uint64_t seed) {
  CaseSpec s;
  s.dtype = dt;
  s.head_dim_qk = s.head_dim_v = d;
  s.mask = m;
  s.batch = 2;
  s.heads_q = 8;
  s.heads_kv = 2;
  s.seqlen_q = sq;
  s.seqlen_k = sk;
  s.lse = true;
  s.seed = seed;
  return s;
}

// The case's semantics as the engine derives them (the access width included).
Semantics semantics_of(const tools::AttentionCase& c) {
  Fixture& f = Fixture::get();
  auto p = f.engine->plan(c.args(), f.gpu.info().arch);
  REQUIRE(p.ok());
  return p->variant.semantics;
}

struct Errors {
  double rel_l2 = 0, lse = 0;
};

// Runs one case on `tiling` (a default-dispatch run when null) and checks it.
Errors run(const tools::AttentionCase& c, const Tiling* tiling) {
  Fixture& f = Fixture::get();
  REQUIRE(c.poison().ok());
  auto st = tiling ? f.engine->forward_with_tiling(c.args(), *tiling) : f.engine->forward(c.args(), nullptr);
  REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.error().to_string()));
  REQUIRE(f.gpu.driver().cuCtxSynchronize() == CUDA_SUCCESS);
  auto r = c.check();
  REQUIRE(r.ok());
  CHECK(r->unwritten == 0);
  CHECK(r->rel_l2 <= gpu_test::tolerance(c.spec()));
  CHECK(r->lse_bad == 0);
  return {r->rel_l2, r->lse_max_abs};
}

}  // namespace

TEST_CASE("fa3_sm90: dtypes x head dims 64/128/256 x masks, Sq != Sk, GQA, LSE; error next to fa2_sm80's") {
  if (!on_sm90()) return;
  Fixture& f = Fixture::get();
  const Arch arch = Arch::parse(f.gpu.info().arch).value();
  std::uint64_t seed = 9000;
  for (DType dt : {DType::f16, DType::bf16})
    for (int d : {64, 128, 256})
      for (Mask m : {Mask::none, Mask::causal})
        for (auto [sq, sk] : {std::pair<std::int64_t, std::int64_t>{1000, 1000}, {300, 1000}, {1000, 300}}) {
          const CaseSpec s = fa3_case(dt, d, m, sq, sk, ++seed);
          INFO(s.describe());
          auto c = tools::AttentionCase::create(f.gpu, s);
          REQUIRE(c.ok());
          const Tiling t = find_family("fa3_sm90")->default_tiling(arch, semantics_of(*c));
          const Errors fa3 = run(*c, &t);
          const Errors fa2 = run(*c, nullptr);
          std::printf("  %-60s fa3 %s rel_l2 %.2e lse %.1e | fa2 %.2e lse %.1e\n", s.describe().c_str(),
                      t.name().c_str(), fa3.rel_l2, fa3.lse, fa2.rel_l2, fa2.lse);
          CHECK(fa3.rel_l2 <= 1.25 * fa2.rel_l2 + 1e-4);  // no worse than fa2_sm80's rounding
        }
}

TEST_CASE("fa3_sm90: every candidate tiling of bf16 D=128 causal gives the reference") {
  if (!on_sm90()) return;
  Fixture& f = Fixture::get();
  const Arch arch = Arch::parse(f.gpu.info().arch).value();
  const CaseSpec s = fa3_case(DType::bf16, 128, Mask::causal, 777, 1234, 9100);
  auto c = tools::AttentionCase::create(f.gpu, s);
  REQUIRE(c.ok());
  for (const Tiling& t : find_family("fa3_sm90")->candidate_tilings(arch, semantics_of(*c))) {
    INFO(t.name());
    const Errors e = run(*c, &t);
    std::printf("  %-14s rel_l2 %.2e lse %.1e\n", t.name().c_str(), e.rel_l2, e.lse);
  }
}
