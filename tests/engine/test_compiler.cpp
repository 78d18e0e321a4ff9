// NVRTC compiles every template variant of a matrix for sm_80 and sm_90a, with no GPU.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "compiler.hpp"
#include "kernel_family.hpp"

using namespace flashjit;

namespace {

Semantics sem(DType dt, int dqk, int dv, Mask m, bool gqa, bool lse, int vec, Fp32Math fm = Fp32Math::exact) {
  Semantics s;
  s.dtype = dt;
  s.fp32_math = fm;
  s.head_dim_qk = dqk;
  s.head_dim_v = dv;
  s.mask = m;
  s.gqa = gqa;
  s.write_lse = lse;
  s.vec = vec;
  return s;
}

void compile_ok(const KernelVariant& v, const Arch& arch) {
  INFO(v.name() << " for " << arch.name());
  REQUIRE(check_variant(v, arch).ok());
  auto r = compile_cubin({v.name(), render_source(*find_family(v.family), v), arch});
  if (!r.ok()) FAIL(r.error().to_string());
  CHECK(r->cubin.size() > 1000);
  // ptxas warnings (spills are fine, errors are not) surface in the log; none expected.
  CHECK(r->log.find("error") == std::string::npos);
}

int vec_for(DType dt, int dqk, int dv) {
  for (int v = dt == DType::f32 ? 4 : 8; v > 1; v /= 2)
    if (dqk % v == 0 && dv % v == 0) return v;
  return 1;
}

}  // namespace

TEST_CASE("NVRTC compiles the default variant matrix for sm_80 and sm_90a") {
  const auto t0 = std::chrono::steady_clock::now();
  int count = 0;
  for (const char* arch_name : {"sm_80", "sm_90a"}) {
    const Arch arch = Arch::parse(arch_name).value();
    for (DType dt : {DType::f16, DType::bf16, DType::f32})
      for (int d : {1, 48, 64, 80, 96, 128, 200, 256})
        for (Mask m : {Mask::none, Mask::causal}) {
          const bool odd = d % 2 == 1;
          const Semantics s = sem(dt, d, d, m, /*gqa=*/m == Mask::causal, /*lse=*/m == Mask::none, vec_for(dt, d, d));
          auto family = choose_family(arch, s);
          REQUIRE(family.ok());
          compile_ok({family.value()->name(), s, family.value()->default_tiling(arch, s)}, arch);
          ++count;
          (void)odd;
        }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("compiled %d default variants in %.1f s (%.2f s each)\n", count, s, s / count);
}
