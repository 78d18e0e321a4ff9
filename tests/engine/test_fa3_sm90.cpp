// The fa3_sm90 family without a GPU: what it refuses, and what ptxas says of its kernels. Its
// speed rests on wgmmas that stay asynchronous; ptxas silently serializes them (an "info", not
// a warning) when accumulator registers are touched inside a pipeline stage or a branch sits
// between wgmmas, which once cost 20-40% here. So every candidate tiling is compiled with
// ptxas -v and its log must carry no serialization advisory and no spills.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "compiler.hpp"
#include "kernel_family.hpp"
#include "kernel_source.hpp"
#include "templates/fa3_sm90/layout.cuh"

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

TEST_CASE("fa3_sm90 refuses sm_80, fp32, pages of other than 8k keys and what TMA cannot address, and serves 16-bit Hopper problems") {
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
  ProblemShape no_keys{2, 64, 0, 8, 2}, no_queries{2, 0, 64, 8, 2};
  CHECK(f->refusal(sm90, s, &no_keys) != nullptr);
  CHECK(f->refusal(sm90, s, &no_queries) != nullptr);
  // Paged caches: boxes of a multiple of 8 keys, so pages of 16 serve and pages of 12 do not.
  Semantics paged = s;
  paged.paged = paged.kv_lens = true;
  CHECK(f->refusal(sm90, paged, nullptr) == nullptr);
  ProblemShape pages16{2, 1024, 4096, 8, 2, 16}, pages12{2, 1024, 4096, 8, 2, 12};
  CHECK(f->refusal(sm90, paged, &pages16) == nullptr);
  CHECK(f->refusal(sm90, paged, &pages12) != nullptr);
  // Everything else the engine serves: Dqk != Dv, padded head dims and the v2 semantics.
  Semantics rich = s;
  rich.head_dim_qk = 192;
  rich.head_dim_v = 72;
  rich.varlen = rich.window = rich.softcap = rich.alibi = rich.sinks = rich.kv_lens = true;
  CHECK(f->refusal(sm90, rich, nullptr) == nullptr);
  // Dispatch of a prefill shape: fa3_sm90 on sm_90a, fa2_sm80 for what it refuses.
  const ProblemShape prefill{2, 1024, 1024, 8, 2};
  CHECK(std::string(pick_family(sm90, s, &prefill)->name()) == "fa3_sm90");
  CHECK(std::string(pick_family(sm90, narrow, &prefill)->name()) == "fa2_sm80");
  CHECK(std::string(pick_family(sm80, s, &prefill)->name()) == "fa2_sm80");
  CHECK(std::string(pick_family(sm90, paged, &pages16)->name()) == "fa3_sm90");
  CHECK(std::string(pick_family(sm90, paged, &pages12)->name()) == "fa2_sm80");
  // Key starts: contiguous and varlen caches here; paged ones on fa2_sm80 (a tile from an
  // arbitrary slot would straddle the page boxes).
  Semantics starts = s, paged_starts = paged;
  starts.kv_lens = starts.kv_starts = paged_starts.kv_starts = true;
  CHECK(std::string(pick_family(sm90, starts, &prefill)->name()) == "fa3_sm90");
  const char* why = f->refusal(sm90, paged_starts, nullptr);
  CHECK((why && std::string(why).find("kv_starts") != std::string::npos));
  CHECK(std::string(pick_family(sm90, paged_starts, &pages16)->name()) == "fa2_sm80");
}

TEST_CASE("fa3_sm90 tilings: the knobs' ranges and the consumers' register budget, named in the error") {
  const KernelFamily* f = find_family("fa3_sm90");
  REQUIRE(f != nullptr);
  const Arch sm90 = Arch::parse("sm_90a").value();
  const Semantics d64 = fa3_semantics(DType::f16, 64, Mask::none), d256 = fa3_semantics(DType::f16, 256, Mask::none);
  auto tiling = [&](int g, int n, int st, int persistent = 0, int cluster = 1) {
    return Tiling(f->knobs(), {g, n, st, persistent, cluster});
  };
  CHECK(f->check_tiling(d64, tiling(3, 112, 2)).ok());
  CHECK(f->check_tiling(d64, tiling(4, 64, 2)).error().message().find("warpgroups") != std::string::npos);
  CHECK(f->check_tiling(d64, tiling(1, 72, 2)).error().message().find("multiple of 16") != std::string::npos);
  CHECK(f->check_tiling(d64, tiling(1, 64, 5)).error().message().find("stages") != std::string::npos);
  CHECK(f->check_tiling(d64, tiling(1, 64, 2, 2)).error().message().find("persistent") != std::string::npos);
  CHECK(f->check_tiling(d64, tiling(1, 64, 2, 0, 3)).error().message().find("cluster") != std::string::npos);
  // A cluster shares K/V tiles between adjacent query blocks: only where both see the same keys,
  // and only one tile per CTA pair.
  CHECK(f->check_tiling(d64, tiling(3, 112, 2, 0, 2)).ok());
  CHECK(f->check_tiling(d64, tiling(3, 112, 2, 1, 2)).error().message().find("persistent") != std::string::npos);
  for (auto edit : {+[](Semantics& s) { s.mask = Mask::causal; }, +[](Semantics& s) { s.window = true; },
                    +[](Semantics& s) { s.varlen = true; }, +[](Semantics& s) { s.paged = true; }}) {
    Semantics s = d64;
    edit(s);
    CHECK(f->check_tiling(s, tiling(3, 112, 2, 0, 2)).error().message().find("same keys") != std::string::npos);
  }
  // Three consumers hold 160 registers each: O, S and P of D = 256 do not fit.
  CHECK(f->check_tiling(d256, tiling(3, 64, 2)).error().message().find("registers") != std::string::npos);
  CHECK(f->check_tiling(d256, tiling(2, 128, 2)).error().message().find("registers") != std::string::npos);
  // D = 64 takes one consumer for short sequences (the 1K bucket and below), three otherwise, in
  // CTA pairs past 8K queries; a warm-up compiles all three.
  const ProblemShape short_seq{16, 1024, 1024, 32, 32}, long_seq{1, 1025, 1025, 32, 32};
  CHECK(f->default_tiling(sm90, d64, &short_seq)[0] == 1);
  CHECK(f->default_tiling(sm90, d64, &long_seq)[0] == 3);
  CHECK(f->default_tiling(sm90, d64, nullptr)[0] == 3);
  CHECK(f->default_tilings(sm90, d64).size() == 3);
  // Short causal sequences walk a persistent grid at D <= 128; D = 128 takes 128 keys there.
  const int persistent = f->knobs().index("persistent");
  Semantics d64_causal = d64;
  d64_causal.mask = Mask::causal;
  CHECK(f->default_tiling(sm90, d64_causal, &short_seq)[persistent] == 1);
  CHECK(f->default_tiling(sm90, d64_causal, &long_seq)[persistent] == 0);
  CHECK(f->default_tiling(sm90, d64, &short_seq)[persistent] == 0);
  CHECK(f->default_tiling(sm90, d256, &short_seq)[persistent] == 0);
  CHECK(f->default_tilings(sm90, d256).size() == 2);
  // D = 128 non-causal takes 128 keys up to the 4K bucket (176 would leave 4K a partial tile), 176
  // beyond; up to the 8K bucket of keys on a persistent grid; past 8K queries in CTA pairs
  // sharing each K/V load (a warm-up compiles all five, with 176 keys for 16K keys behind 4K
  // queries).
  Semantics d128 = d64;
  d128.head_dim_qk = d128.head_dim_v = 128;
  const ProblemShape four_k{4, 4096, 4096, 16, 16}, eight_k{2, 4097, 4097, 16, 16}, sixteen_k{1, 8193, 8193, 16, 16};
  const int block_n = f->knobs().index("block_n");
  CHECK(f->default_tiling(sm90, d128, &four_k)[block_n] == 128);
  CHECK(f->default_tiling(sm90, d128, &four_k)[persistent] == 1);
  CHECK(f->default_tiling(sm90, d128, &eight_k)[block_n] == 176);
  CHECK(f->default_tiling(sm90, d128, &eight_k)[persistent] == 1);
  CHECK(f->default_tiling(sm90, d128, &sixteen_k)[block_n] == 176);
  CHECK(f->default_tiling(sm90, d128, &sixteen_k)[persistent] == 0);
  CHECK(f->default_tiling(sm90, d128, nullptr)[block_n] == 176);
  CHECK(f->default_tilings(sm90, d128).size() == 5);
  // Pairs only where every query block sees the same keys, and only past 8K queries (fewer
  // blocks would pad an odd count with a whole one).
  const int cluster = f->knobs().index("cluster");
  CHECK(f->default_tiling(sm90, d128, &sixteen_k)[cluster] == 2);
  CHECK(f->default_tiling(sm90, d128, nullptr)[cluster] == 2);
  CHECK(f->default_tiling(sm90, d128, &eight_k)[cluster] == 1);
  CHECK(f->default_tiling(sm90, d64, &sixteen_k)[cluster] == 2);
  CHECK(f->default_tiling(sm90, d64, &long_seq)[cluster] == 1);
  CHECK(f->default_tiling(sm90, d256, &sixteen_k)[cluster] == 2);
  CHECK(f->default_tiling(sm90, d256, &four_k)[cluster] == 1);
  const ProblemShape cross{1, 4096, 16384, 16, 16};
  CHECK(f->default_tiling(sm90, d128, &cross)[cluster] == 1);
  Semantics d128_causal = d128, d128_paged = d128;
  d128_causal.mask = Mask::causal;
  d128_paged.paged = true;
  CHECK(f->default_tiling(sm90, d128_causal, &sixteen_k)[cluster] == 1);
  CHECK(f->default_tiling(sm90, d128_paged, &sixteen_k)[cluster] == 1);
  for (const Semantics& s : {d64, d128, d256, d128_causal, d128_paged})
    for (const Tiling& t : f->default_tilings(sm90, s)) CHECK(f->check_tiling(s, t).ok());
  for (const Semantics& s : {d64, d256}) {
    CHECK(f->check_tiling(s, f->default_tiling(sm90, s, nullptr)).ok());
    const auto candidates = f->candidate_tilings(sm90, s);
    CHECK(candidates.size() >= 4);
    for (const Tiling& t : candidates) CHECK(f->check_tiling(s, t).ok());
    // Every shape is a candidate on both grids, and the grid is the plan's alone: one kernel;
    // where the semantics allow (not causal), also in pairs of CTAs.
    const int persistent = f->knobs().index("persistent"), cluster = f->knobs().index("cluster");
    REQUIRE(persistent >= 0);
    REQUIRE(cluster >= 0);
    auto count = [&](int knob, int value) {
      return std::count_if(candidates.begin(), candidates.end(), [&](const Tiling& t) { return t[knob] == value; });
    };
    CHECK(count(persistent, 1) * 3 == int(candidates.size()));
    CHECK(count(cluster, 2) == count(persistent, 1));
    Semantics causal = s;
    causal.mask = Mask::causal;
    for (const Tiling& t : f->candidate_tilings(sm90, causal)) CHECK(t[cluster] == 1);
    Tiling one = candidates.front(), walking = one;
    walking[persistent] = 1 - one[persistent];
    CHECK(KernelVariant{f->name(), s, one}.content_hash() == KernelVariant{f->name(), s, walking}.content_hash());
    CHECK(one.name() != walking.name());
  }
}

TEST_CASE("ptxas keeps fa3_sm90's wgmmas asynchronous and spill-free for every candidate tiling") {
  setenv("FLASHJIT_NVRTC_OPTIONS", "-Xptxas=-v", 1);
  const KernelFamily* f = find_family("fa3_sm90");
  REQUIRE(f != nullptr);
  const Arch arch = Arch::parse("sm_90a").value();
  // Every candidate of the three common head dims, and the default tiling of semantics that add
  // per-score work (transforms, masks at both window edges), padded head dims and Dqk != Dv.
  std::vector<KernelVariant> variants;
  for (int d : {64, 128, 256})
    for (Mask m : {Mask::none, Mask::causal}) {
      const Semantics s = fa3_semantics(d == 128 ? DType::f16 : DType::bf16, d, m);
      for (const Tiling& t : f->candidate_tilings(arch, s)) variants.push_back({f->name(), s, t});
    }
  for (auto [dqk, dv] : {std::pair<int, int>{192, 128}, {96, 96}, {72, 72}, {32, 32}, {200, 200}}) {
    Semantics s = fa3_semantics(DType::f16, dqk, Mask::causal);
    s.head_dim_v = dv;
    s.varlen = s.window = s.softcap = s.alibi = s.sinks = s.kv_lens = true;
    s.paged = dqk == 192;  // one paged variant: the producer's per-page boxes
    variants.push_back({f->name(), s, f->default_tiling(arch, s, nullptr)});
  }
  int compiled = 0;
  std::set<std::string> seen;  // tilings that differ in plan-only knobs share one kernel
  for (const KernelVariant& v : variants) {
    if (!seen.insert(v.content_hash()).second) continue;
    auto r = compile_cubin({v.name(), render_source(*f, v), arch});
    REQUIRE_MESSAGE(r.ok(), v.name() << ": " << (r.ok() ? "" : r.error().to_string()));
    INFO(v.name() << "\n" << r->log);
    CHECK(r->log.find("Used ") != std::string::npos);  // ptxas -v spoke: the checks below mean something
    CHECK(r->log.find("Performance Loss") == std::string::npos);
    CHECK(r->log.find("0 bytes spill stores, 0 bytes spill loads") != std::string::npos);
    ++compiled;
  }
  unsetenv("FLASHJIT_NVRTC_OPTIONS");
  CHECK(compiled >= 100);
}

TEST_CASE("fa3_sm90 layout: O leaves through shared memory and TMA where its tiles fit, never with varlen") {
  using fj_layout::fa3_layout;
  // D = 128, two consumers, 112 keys, 2 stages: 144 KiB of rings, room for 32 KiB of output.
  const auto d128 = fa3_layout(128, 128, 2, 112, 2, true);
  CHECK(d128.o_bytes == 2 * 64 * 128 * 2);
  CHECK(d128.o_offset % fj_layout::kSwizzleAlign == 0);
  CHECK(d128.smem_bytes <= fj_layout::kSmemPerCtaMax);
  CHECK(fa3_layout(128, 128, 2, 112, 2, false).o_bytes == 0);  // varlen: sequences share rows
  // D = 256, 80 keys: the rings take 224 KiB, so O stays in registers.
  CHECK(fa3_layout(256, 256, 2, 80, 2, true).o_bytes == 0);
  // One consumer at D = 64 keeps its two CTAs an SM with the output tile.
  const auto d64 = fa3_layout(64, 64, 1, 128, 2, true);
  CHECK(d64.o_bytes > 0);
  CHECK(fj_layout::fa3_ctas_per_sm(1, d64.smem_bytes) == 2);
  // ... but not at 192 keys, where the output tile would cost the second CTA.
  CHECK(fj_layout::fa3_ctas_per_sm(1, fa3_layout(64, 64, 1, 192, 2, false).smem_bytes) == 2);
  CHECK(fa3_layout(64, 64, 1, 192, 2, true).o_bytes == 0);
}
