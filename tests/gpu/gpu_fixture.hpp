// Shared state of the GPU suite: one context and one engine for all test cases.
#pragma once

#include <doctest/doctest.h>

#include <atomic>
#include <cstdio>
#include <set>
#include <thread>
#include <vector>

#include "common/attention_case.hpp"

namespace flashjit::gpu_test {

struct Fixture {
  tools::GpuContext gpu;
  std::unique_ptr<Engine> engine;
  static Fixture& get() {
    static Fixture f{tools::GpuContext::open(0).value(), Engine::create().value()};
    return f;
  }
};

// Bound on relative L2 error against the float64 reference, by dtype. fp16 keeps 11 bits and
// bf16 8 bits of the probabilities fed to the second product; tf32 has fp16's mantissa.
inline double tolerance(const tools::CaseSpec& s) {
  switch (s.dtype) {
    case DType::f16: return 2e-3;
    case DType::bf16: return 1e-2;
    case DType::f32: return s.fp32_math == Fp32Math::tf32 ? 2e-3 : 1e-5;
  }
  return 0;
}

// Compiles `variants` for this GPU on every core at once, into the disk cache, so the cases
// themselves only load them (a suite of hundreds of variants would otherwise compile one at a
// time).
inline void compile_variants(const std::vector<KernelVariant>& variants) {
  Fixture& f = Fixture::get();
  const std::string arch = f.gpu.info().arch;
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < std::max(1u, std::thread::hardware_concurrency()); ++t)
    pool.emplace_back([&] {
      for (std::size_t i; (i = next++) < variants.size();) (void)f.engine->compile(variants[i], arch);
    });
  for (auto& th : pool) th.join();
}

// Compiles the variants `cases` will run (compile_variants).
inline void precompile(const std::vector<tools::AttentionCase>& cases) {
  Fixture& f = Fixture::get();
  const std::string arch = f.gpu.info().arch;
  std::vector<KernelVariant> variants;
  std::set<std::string> seen;
  for (const auto& c : cases)
    if (auto p = f.engine->plan(c.args(), arch); p.ok() && seen.insert(p->variant.name()).second)
      variants.push_back(p->variant);
  compile_variants(variants);
}

void check_one(const tools::AttentionCase& c);

// Poisons the output, runs the engine, checks every element against the reference.
inline void run_and_check(const tools::CaseSpec& spec) {
  Fixture& f = Fixture::get();
  INFO(spec.describe());
  auto c = tools::AttentionCase::create(f.gpu, spec);
  REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.error().to_string()));
  check_one(c.value());
}

// run_and_check over many cases, their variants compiled in parallel first.
inline void run_and_check_all(const std::vector<tools::CaseSpec>& specs) {
  Fixture& f = Fixture::get();
  std::vector<tools::AttentionCase> cases;
  for (const auto& spec : specs) {
    auto c = tools::AttentionCase::create(f.gpu, spec);
    REQUIRE_MESSAGE(c.ok(), (spec.describe() + ": " + (c.ok() ? std::string() : c.error().to_string())));
    cases.push_back(std::move(c).value());
  }
  precompile(cases);
  for (const auto& c : cases) {
    INFO(c.spec().describe());
    check_one(c);
  }
}

inline void check_one(const tools::AttentionCase& c) {
  Fixture& f = Fixture::get();
  const tools::CaseSpec& spec = c.spec();
  REQUIRE(c.poison().ok());
  auto st = f.engine->forward(c.args(), nullptr);
  REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.error().to_string()));
  REQUIRE(f.gpu.driver().cuCtxSynchronize() == CUDA_SUCCESS);
  auto r = c.check();
  REQUIRE(r.ok());
  const double tol = tolerance(spec);
  std::printf("  %-70s rel_l2 %.2e (bound %.0e) max_abs %.2e%s\n", spec.describe().c_str(), r->rel_l2, tol, r->max_abs,
              spec.lse ? (" lse_err " + std::to_string(r->lse_max_abs)).c_str() : "");
  CHECK(r->unwritten == 0);
  CHECK(r->rel_l2 <= tol);
  if (spec.lse) {
    CHECK(r->lse_bad == 0);
    CHECK(r->lse_max_abs <= (spec.dtype == DType::f32 && spec.fp32_math == Fp32Math::exact ? 1e-4 : 1e-2));
  }
}

// Poisons the output, runs `c` on `tiling` (which names its family) and checks it against the
// reference: every element written, within the dtype's bound, no bad LSE entry.
inline tools::CheckResult check_on_tiling(const tools::AttentionCase& c, const Tiling& tiling) {
  Fixture& f = Fixture::get();
  REQUIRE(c.poison().ok());
  auto st = f.engine->forward_with_tiling(c.args(), tiling);
  REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.error().to_string()));
  REQUIRE(f.gpu.driver().cuCtxSynchronize() == CUDA_SUCCESS);
  auto r = c.check();
  REQUIRE(r.ok());
  CHECK(r->unwritten == 0);
  CHECK(r->rel_l2 <= tolerance(c.spec()));
  if (c.spec().lse) CHECK(r->lse_bad == 0);
  return r.value();
}

// One forward() of a warm variant captured on `stream` into an instantiated graph, freed with it.
struct CapturedForward {
  const DriverLibrary* drv = nullptr;
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  CapturedForward() = default;
  CapturedForward(const CapturedForward&) = delete;
  CapturedForward& operator=(const CapturedForward&) = delete;
  ~CapturedForward() {
    if (exec) drv->cuGraphExecDestroy(exec);
    if (graph) drv->cuGraphDestroy(graph);
  }
};

inline void capture_forward(const tools::AttentionCase& c, CUstream stream, CapturedForward& out) {
  Fixture& f = Fixture::get();
  const DriverLibrary& drv = f.gpu.driver();
  out.drv = &drv;
  REQUIRE(drv.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  auto st = f.engine->forward(c.args(), stream);
  REQUIRE(drv.cuStreamEndCapture(stream, &out.graph) == CUDA_SUCCESS);
  REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.error().to_string()));
  REQUIRE(drv.cuGraphInstantiateWithFlags(&out.exec, out.graph, 0) == CUDA_SUCCESS);
}

}  // namespace flashjit::gpu_test
