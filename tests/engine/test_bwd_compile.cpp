// bwd_sm80 variants (f16/bf16 x head dim 64/128 x causal or not; fp32 exact and tf32 at head dims
// 40, 64, 128, 256 with GQA and the score edits on every candidate; head dim 256 and Dqk = 192 with
// Dv = 128 at their defaults; each of GQA, window, softcap, ALiBi, varlen, kv_lens alone at head
// dim 128; all six at 128 and 256; all four together, where they need the most registers,
// at head dims 1 to 256 and odd pairs), on every candidate tiling and the default, compile through
// the engine's path (check_variant, render_source, NVRTC with the engine's options) for sm_80 and
// sm_90a with no GPU, and its cubin exports the three entry points the launch plan names.
// tests/templates/compile_bwd_check.py adds the register and spill report.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "compile_jobs.hpp"
#include "compiler.hpp"
#include "flashjit/flashjit.hpp"
#include "kernel_family.hpp"
#include "kernel_source.hpp"

using namespace flashjit;

namespace {

const KernelFamily& bwd() { return *find_family("bwd_sm80"); }

Semantics backward_semantics(DType dt, int d, Mask m, int vec = 8, int dv = 0) {
  Semantics s;
  s.dtype = dt;
  s.head_dim_qk = d;
  s.head_dim_v = dv ? dv : d;
  s.mask = m;
  s.vec = vec;
  return s;
}

// The entry points `v`'s launch plan names that its cubin does not export ("" when none).
std::string missing_entry_points(const KernelVariant& v, const CompiledKernel& compiled) {
  std::string missing;
  for (const EntryPoint& e : find_family(v.family)->entry_points(v))
    if (compiled.cubin.find(e.name) == std::string::npos) missing += std::string("no entry point ") + e.name + "; ";
  return missing;
}

// Compiles on two threads (test::compile_jobs); each cubin must export the entry points its
// family's launch plan names.
std::vector<std::string> compile_all(const std::vector<std::pair<KernelVariant, Arch>>& jobs) {
  return test::compile_jobs(jobs, missing_entry_points);
}

}  // namespace

TEST_CASE("bwd_sm80: every variant and candidate tiling compiles for sm_80 and sm_90a") {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::pair<KernelVariant, Arch>> jobs;
  for (const char* arch_name : {"sm_80", "sm_90a"}) {
    const Arch arch = Arch::parse(arch_name).value();
    auto add_all_tilings = [&](const Semantics& s) {
      REQUIRE(bwd().refusal(arch, s, nullptr) == nullptr);
      std::vector<Tiling> tilings = bwd().candidate_tilings(arch, s);
      const Tiling def = bwd().default_tiling(arch, s, nullptr);
      if (std::find(tilings.begin(), tilings.end(), def) == tilings.end()) tilings.push_back(def);
      for (const Tiling& t : tilings) jobs.push_back({{"bwd_sm80", s, t}, arch});
    };
    for (DType dt : {DType::f16, DType::bf16})
      for (int d : {64, 128})
        for (Mask m : {Mask::none, Mask::causal}) add_all_tilings(backward_semantics(dt, d, m));
    // Wide head dims and MLA's pair at their default tilings (every candidate: with all features below).
    for (auto [dqk, dv] : {std::pair{256, 256}, std::pair{192, 128}})
      for (const Semantics& s : {backward_semantics(DType::f16, dqk, Mask::none, 8, dv),
                                 backward_semantics(DType::bf16, dqk, Mask::causal, 8, dv)})
        jobs.push_back({{"bwd_sm80", s, bwd().default_tiling(arch, s, nullptr)}, arch});
    // Each feature alone, at head dim 128's default tiling.
    for (bool Semantics::*feature : {&Semantics::gqa, &Semantics::window, &Semantics::softcap, &Semantics::alibi,
                                     &Semantics::varlen, &Semantics::kv_lens}) {
      Semantics s = backward_semantics(DType::f16, 128, Mask::causal);
      s.*feature = true;
      jobs.push_back({{"bwd_sm80", s, bwd().default_tiling(arch, s, nullptr)}, arch});
    }
    // All of them: the most registers (tests/templates/compile_bwd_check.py reports the spills).
    for (int d : {1, 33, 40, 72, 96, 112, 128})  // every padded width but 32; 33 takes 2-byte copies
      for (Mask m : {Mask::none, Mask::causal}) {
        Semantics s = backward_semantics(DType::bf16, d, m, d % 8 ? 1 : 8);  // the access width dense views allow
        s.gqa = s.window = s.softcap = s.alibi = true;
        add_all_tilings(s);
      }
    // The wide head dims and odd pairs (72/40 pads to 80/48; 200/136 to 224/160), causal only.
    for (auto [dqk, dv] : {std::pair{160, 160}, std::pair{192, 192}, std::pair{256, 256}, std::pair{192, 128},
                           std::pair{72, 40}, std::pair{200, 136}}) {
      Semantics s = backward_semantics(DType::bf16, dqk, Mask::causal, 8, dv);
      s.gqa = s.window = s.softcap = s.alibi = true;
      add_all_tilings(s);
    }
    // Ragged batches and per-sequence key counts with everything else, at head dims 128 and 256.
    for (Mask m : {Mask::none, Mask::causal}) {
      Semantics s = backward_semantics(DType::f16, 128, m);
      s.gqa = s.window = s.softcap = s.alibi = s.varlen = s.kv_lens = true;
      add_all_tilings(s);
    }
    {
      Semantics s = backward_semantics(DType::f16, 256, Mask::causal);
      s.gqa = s.window = s.softcap = s.alibi = s.varlen = s.kv_lens = true;
      add_all_tilings(s);
    }
    // fp32, exact and tf32: every candidate at head dims 64, 128 and 256 with the score edits and
    // GQA (the most registers), and at 40 (an odd count of 16-column steps), 4-element accesses.
    for (Fp32Math math : {Fp32Math::exact, Fp32Math::tf32})
      for (int d : {40, 64, 128, 256}) {
        Semantics s = backward_semantics(DType::f32, d, Mask::causal, 4);
        s.fp32_math = math;
        s.gqa = s.window = s.softcap = s.alibi = true;
        add_all_tilings(s);
      }
    // Narrow accesses (a strided head dim; 4-byte aligned views) take the copies' other paths.
    for (int vec : {1, 2}) {
      const Semantics s = backward_semantics(DType::bf16, 64, Mask::causal, vec);
      jobs.push_back({{"bwd_sm80", s, bwd().default_tiling(arch, s, nullptr)}, arch});
    }
  }
  const auto failures = compile_all(jobs);
  for (const auto& f : failures) ADD_FAIL_CHECK_AT(__FILE__, __LINE__, f);
  CHECK(failures.empty());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("bwd_sm80: compiled %zu variants in %.1f s (2 threads)\n", jobs.size(), s);
}

TEST_CASE("bwd_sm90: every variant (dtypes, head dims, masks, GQA, tilings) compiles for sm_90a without spills, exporting the three entry points") {
  const KernelFamily& f = *find_family("bwd_sm90");
  const Arch arch = Arch::parse("sm_90a").value();
  std::vector<std::pair<KernelVariant, Arch>> jobs;
  for (DType dt : {DType::f16, DType::bf16})
    for (int d : {64, 128})
      for (Mask m : {Mask::none, Mask::causal})
        for (bool gqa : {false, true}) {
          Semantics s = backward_semantics(dt, d, m);
          s.gqa = gqa;
          REQUIRE(f.refusal(arch, s, nullptr) == nullptr);
          for (const Tiling& t : f.candidate_tilings(arch, s)) jobs.push_back({{"bwd_sm90", s, t}, arch});
        }
  CHECK(jobs.size() == 32);  // 2 dtypes x 2 masks x GQA or not x (3 tilings at head dim 64, 1 at 128)
  // ptxas -v's report of each of the three kernels: no spills, and no wgmma serialized (its
  // "Performance Loss" advisory), as fa3_sm90's test asks of every candidate.
  setenv("FLASHJIT_NVRTC_OPTIONS", "-Xptxas=-v", 1);
  const auto failures = test::compile_jobs(jobs, [](const KernelVariant& v, const CompiledKernel& compiled) {
    std::string why = missing_entry_points(v, compiled);
    const auto count = [&](const char* text) {
      std::size_t n = 0;
      for (std::size_t at = compiled.log.find(text); at != std::string::npos; at = compiled.log.find(text, at + 1)) ++n;
      return n;
    };
    if (count("spill stores") != 3 || count("0 bytes spill stores, 0 bytes spill loads") != 3)
      why += "spills (or no ptxas report) in: " + compiled.log + "; ";
    if (count("Performance Loss")) why += "wgmma serialized: " + compiled.log + "; ";
    return why;
  });
  unsetenv("FLASHJIT_NVRTC_OPTIONS");
  for (const auto& failure : failures) ADD_FAIL_CHECK_AT(__FILE__, __LINE__, failure);
  CHECK(failures.empty());
}

TEST_CASE("bwd_sm80: Engine::compile builds the variant plan_backward names, without a GPU") {
  EngineOptions o;
  o.disk_cache = false;
  auto engine = Engine::create(o).value();
  BackwardArgs b;
  auto fake = [](std::uintptr_t slot) { return reinterpret_cast<const void*>(0x7f0000000000ull + (slot << 32)); };
  b.forward.q = TensorView::bshd(fake(1), DType::f16, 1, 33, 2, 128);
  b.forward.k = TensorView::bshd(fake(2), DType::f16, 1, 50, 2, 128);
  b.forward.v = TensorView::bshd(fake(3), DType::f16, 1, 50, 2, 128);
  b.forward.o = TensorView::bshd(fake(4), DType::f16, 1, 33, 2, 128);
  b.forward.lse = LseView::contiguous(reinterpret_cast<float*>(const_cast<void*>(fake(5))), 1, 2, 33);
  b.forward.mask = Mask::causal;
  b.dout = TensorView::bshd(fake(6), DType::f16, 1, 33, 2, 128);
  b.dq = TensorView::bshd(fake(7), DType::f16, 1, 33, 2, 128);
  b.dk = TensorView::bshd(fake(8), DType::f16, 1, 50, 2, 128);
  b.dv = TensorView::bshd(fake(9), DType::f16, 1, 50, 2, 128);
  auto plan = engine->plan_backward(b, "sm_80");
  REQUIRE_MESSAGE(plan.ok(), (plan.ok() ? "" : plan.error().to_string()));
  CHECK(plan->variant.family == "bwd_sm80");
  auto r = engine->compile(plan->variant, "sm_80");
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().to_string()));
  CHECK(r->cubin_bytes > 1000);
}
