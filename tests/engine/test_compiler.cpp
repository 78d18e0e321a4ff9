// NVRTC compiles every template variant of a matrix for sm_80 and sm_90a, with no GPU.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "compile_jobs.hpp"
#include "compiler.hpp"
#include "kernel_family.hpp"
#include "kernel_source.hpp"

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

int vec_for(DType dt, int dqk, int dv) {
  for (int v = dt == DType::f32 ? 4 : 8; v > 1; v /= 2)
    if (dqk % v == 0 && dv % v == 0) return v;
  return 1;
}

// Compiles jobs (test::compile_jobs), each cubin at least a plausible size; reports every failure.
void compile_all(const std::vector<std::pair<KernelVariant, Arch>>& jobs, const char* what) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto failures = test::compile_jobs(jobs, [](const KernelVariant&, const CompiledKernel& compiled) {
    return compiled.cubin.size() < 1000 ? std::string("suspiciously small cubin") : std::string();
  });
  for (const auto& f : failures) ADD_FAIL_CHECK_AT(__FILE__, __LINE__, f);
  CHECK(failures.empty());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s: compiled %zu variants in %.1f s (%.2f s each, 2 threads)\n", what, jobs.size(), s, s / jobs.size());
}

// Every registered family, for each arch it builds for: the variant it would run.
void add_for_families(std::vector<std::pair<KernelVariant, Arch>>& jobs, const Arch& arch, const Semantics& s) {
  for (const KernelFamily* f : families_for(arch, s)) jobs.push_back({{f->name(), s, f->default_tiling(arch, s, nullptr)}, arch});
}

const char* const kArchs[] = {"sm_80", "sm_90a"};

// The boolean semantics the engine v2 added: each alone, and all together.
void set_feature(Semantics& s, int which) {
  switch (which) {
    case 0: s.varlen = true; break;
    case 1: s.window = true; break;
    case 2: s.softcap = true; break;
    case 3: s.alibi = true; break;
    case 4: s.sinks = true; break;
    case 5: s.kv_lens = true; break;
    case 6: s.paged = true; break;
    case 7: s.kv_lens = s.kv_starts = true; break;
    default: s.varlen = s.window = s.softcap = s.alibi = s.sinks = s.kv_lens = s.kv_starts = s.paged = true;
  }
}
constexpr int kFeatureCases = 9;

}  // namespace

TEST_CASE("NVRTC compiles every dtype x head dim (odd ones too) x mask x GQA/LSE for sm_80 and sm_90a") {
  std::vector<std::pair<KernelVariant, Arch>> jobs;
  for (const char* arch_name : kArchs) {
    const Arch arch = Arch::parse(arch_name).value();
    for (DType dt : {DType::f16, DType::bf16, DType::f32})
      for (int d : {1, 3, 48, 64, 80, 96, 128, 200, 256})
        for (Mask m : {Mask::none, Mask::causal})
          add_for_families(jobs, arch, sem(dt, d, d, m, /*gqa=*/m == Mask::causal, /*lse=*/m == Mask::none, vec_for(dt, d, d)));
    // tf32 and unequal head dims.
    for (auto [dq, dv] : {std::pair<int, int>{192, 128}, {64, 200}, {33, 7}}) {
      add_for_families(jobs, arch, sem(DType::f32, dq, dv, Mask::causal, true, true, vec_for(DType::f32, dq, dv), Fp32Math::tf32));
      add_for_families(jobs, arch, sem(DType::bf16, dq, dv, Mask::none, false, true, vec_for(DType::bf16, dq, dv)));
    }
  }
  compile_all(jobs, "semantics matrix");
}

TEST_CASE("NVRTC compiles varlen, window, softcap, ALiBi, sinks, kv_lens, kv_starts and paged, alone and together, every dtype and mask") {
  std::vector<std::pair<KernelVariant, Arch>> jobs;
  for (const char* arch_name : kArchs) {
    const Arch arch = Arch::parse(arch_name).value();
    for (DType dt : {DType::f16, DType::bf16, DType::f32})
      for (Mask m : {Mask::none, Mask::causal})
        for (int which = 0; which < kFeatureCases; ++which) {
          // Head dims alternate so each feature meets a small, a large and an odd one.
          const int d = which % 3 == 0 ? 64 : which % 3 == 1 ? 256 : 72;
          Semantics s = sem(dt, d, d, m, which % 2 == 0, which >= 3, vec_for(dt, d, d));
          set_feature(s, which);
          add_for_families(jobs, arch, s);
        }
    // Everything at once with unequal head dims (K and V rows then split differently between
    // threads), in tf32 and in bf16; and paged alone with unequal head dims.
    Semantics s = sem(DType::f32, 192, 128, Mask::causal, true, true, 4, Fp32Math::tf32);
    set_feature(s, kFeatureCases - 1);
    add_for_families(jobs, arch, s);
    Semantics b = sem(DType::bf16, 192, 128, Mask::none, true, false, 8);
    set_feature(b, kFeatureCases - 1);
    add_for_families(jobs, arch, b);
    Semantics pg = sem(DType::f16, 192, 128, Mask::causal, true, true, 8);
    pg.paged = true;
    add_for_families(jobs, arch, pg);
  }
  compile_all(jobs, "engine v2 semantics");
}

TEST_CASE("NVRTC compiles every candidate tiling the autotuner may pick, for every family") {
  std::vector<std::pair<KernelVariant, Arch>> jobs;
  for (const KernelFamily* f : kernel_families())
    for (const char* arch_name : kArchs) {
      const Arch arch = Arch::parse(arch_name).value();
      std::vector<Semantics> sems;
      for (int d : {64, 128, 256}) sems.push_back(sem(DType::f16, d, d, Mask::causal, false, false, 8));
      sems.push_back(sem(DType::f32, 128, 128, Mask::none, false, false, 4));
      for (const Semantics& s : sems) {
        if (f->refusal(arch, s, nullptr)) continue;
        for (const Tiling& t : f->candidate_tilings(arch, s)) jobs.push_back({{f->name(), s, t}, arch});
      }
    }
  compile_all(jobs, "tiling matrix");
}

// Issue 21 G5: sm_86 and sm_89 give a block 99 KiB of shared memory, where the usual tilings of
// large fp32 head dims do not fit. Every head dim's default is checked without compiling
// (tests/engine/test_kernel_family.cpp); here each distinct default tiling compiles once, at
// the largest head dim that picks it (the most shared memory and registers it meets).
TEST_CASE("NVRTC compiles every family's default tiling for sm_86 and sm_89, head dims 1-256, every dtype") {
  std::vector<std::pair<KernelVariant, Arch>> jobs;
  for (const char* arch_name : {"sm_86", "sm_89"}) {
    const Arch arch = Arch::parse(arch_name).value();
    std::map<std::string, KernelVariant> largest;  // by family, dtype and tiling
    for (DType dt : {DType::f16, DType::bf16, DType::f32})
      for (int d = 1; d <= 256; ++d) {
        const Semantics s = sem(dt, d, d, Mask::causal, false, false, vec_for(dt, d, d));
        for (const KernelFamily* f : families_for(arch, s))
          for (const Tiling& t : f->default_tilings(arch, s))
            largest.insert_or_assign(std::string(f->name()) + dtype_name(dt) + t.name(), KernelVariant{f->name(), s, t});
      }
    for (const auto& [key, v] : largest) jobs.push_back({v, arch});
  }
  compile_all(jobs, "sm_86 and sm_89 default tilings");
}
