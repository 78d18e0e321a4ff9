// The fa3_sm90 family without a GPU: what it refuses, and what ptxas says of its kernels. Its
// speed rests on wgmmas that stay asynchronous; ptxas silently serializes them (an "info", not
// a warning) when accumulator registers are touched inside a pipeline stage or a branch sits
// between wgmmas, which once cost 20-40% here. So every candidate tiling is compiled with
// ptxas -v and its log must carry no serialization advisory and no spills.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "compiler.hpp"
#include "kernel_family.hpp"
#include "kernel_source.hpp"

using namespace flashjit;

namespace {

Semantics fa3_semantics(DType dt, int d, Mask m) {
  Semantics s;
  s.dtype = dt;
  s.head_dim_qk = s.head_dim_v = d;
  s.mask = m;
  s.gqa = true;
  s.write_lse = true;
  s.vec = 8;
  return s;
}

}  // namespace

TEST_CASE("fa3_sm90 refuses sm_80, fp32 and what TMA cannot address, and serves 16-bit Hopper problems") {
  const KernelFamily* f = find_family("fa3_sm90");
  REQUIRE(f != nullptr);
  const Arch sm80 = Arch::parse("sm_80").value(), sm90 = Arch::parse("sm_90a").value();
  Semantics s = fa3_semantics(DType::bf16, 128, Mask::causal);
  CHECK(f->refusal(sm80, s, nullptr) != nullptr);
  CHECK(f->refusal(Arch::parse("sm_90").value(), s, nullptr) != nullptr);  // wgmma needs the "a" target
  CHECK(f->refusal(sm90, s, nullptr) == nullptr);
  Semantics narrow = s;
  narrow.vec = 4;  // an 8-byte aligned stride: the copy engine needs 16
  CHECK(f->refusal(sm90, narrow, nullptr) != nullptr);
  Semantics fp32 = s;
  fp32.dtype = DType::f32;
  CHECK(f->refusal(sm90, fp32, nullptr) != nullptr);
  ProblemShape no_keys{2, 64, 0, 8, 2};
  CHECK(f->refusal(sm90, s, &no_keys) != nullptr);
  // Dispatch of a prefill shape: fa3_sm90 on sm_90a, fa2_sm80 for what it refuses.
  const ProblemShape prefill{2, 1024, 1024, 8, 2};
  CHECK(std::string(pick_family(sm90, s, &prefill)->name()) == "fa3_sm90");
  CHECK(std::string(pick_family(sm90, narrow, &prefill)->name()) == "fa2_sm80");
  CHECK(std::string(pick_family(sm80, s, &prefill)->name()) == "fa2_sm80");
}

TEST_CASE("ptxas keeps fa3_sm90's wgmmas asynchronous and spill-free for every candidate tiling") {
  setenv("FLASHJIT_NVRTC_OPTIONS", "-Xptxas=-v", 1);
  const KernelFamily* f = find_family("fa3_sm90");
  REQUIRE(f != nullptr);
  const Arch arch = Arch::parse("sm_90a").value();
  int compiled = 0;
  for (int d : {64, 128, 256})
    for (Mask m : {Mask::none, Mask::causal}) {
      const Semantics s = fa3_semantics(d == 128 ? DType::f16 : DType::bf16, d, m);
      for (const Tiling& t : f->candidate_tilings(arch, s)) {
        const KernelVariant v{f->name(), s, t};
        auto r = compile_cubin({v.name(), render_source(*f, v), arch});
        REQUIRE_MESSAGE(r.ok(), v.name() << ": " << (r.ok() ? "" : r.error().to_string()));
        INFO(v.name() << "\n" << r->log);
        CHECK(r->log.find("Used ") != std::string::npos);  // ptxas -v spoke: the checks below mean something
        CHECK(r->log.find("Performance Loss") == std::string::npos);
        CHECK(r->log.find("0 bytes spill stores, 0 bytes spill loads") != std::string::npos);
        ++compiled;
      }
    }
  unsetenv("FLASHJIT_NVRTC_OPTIONS");
  CHECK(compiled >= 30);
}
