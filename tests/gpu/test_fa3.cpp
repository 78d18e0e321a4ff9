// fa3_sm90 on an sm_90 GPU against the float64 reference, each case run on fa3_sm90 and on
// fa2_sm80 by tiling (dispatch picks fa3_sm90 on sm_90a), so fa3's error can be held to
// fa2's on the same inputs: both 16-bit dtypes, head dims native and padded, Dqk != Dv, causal
// with Sq != Sk (rows that see no key included), GQA, the LSE, and every engine v2 semantic,
// each on both grids (one CTA per tile, persistent); CTAs walking many tiles; and every candidate
// tiling of two variants.
#include <limits>

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

// The variant dispatch picks for the case (its semantics carry the access width the engine derives).
KernelVariant planned(const tools::AttentionCase& c) {
  Fixture& f = Fixture::get();
  auto p = f.engine->plan(c.args(), f.gpu.info().arch);
  REQUIRE(p.ok());
  return p->variant;
}
Semantics semantics_of(const tools::AttentionCase& c) { return planned(c).semantics; }

// The tiling forward() runs untuned: dispatch's choice, which must be fa3_sm90 on sm_90a.
Tiling fa3_default(const tools::AttentionCase& c) {
  const KernelVariant v = planned(c);
  REQUIRE(v.family == "fa3_sm90");
  return v.tiling;
}
Tiling fa2_default(const tools::AttentionCase& c) {
  const Arch arch = Arch::parse(Fixture::get().gpu.info().arch).value();
  return find_family("fa2_sm80")->default_tiling(arch, semantics_of(c), nullptr);
}

struct Errors {
  double rel_l2 = 0, lse = 0;
};

// Runs one case on `tiling` (which names its family) and checks it against the reference.
Errors run(const tools::AttentionCase& c, const Tiling& tiling) {
  const tools::CheckResult r = gpu_test::check_on_tiling(c, tiling);
  if (c.spec().lse) CHECK(r.lse_max_abs <= 1e-2);
  return {r.rel_l2, r.lse_max_abs};
}

// The tiling, the same on the other grid (one CTA per tile, or a persistent one walking many;
// one CTA per tile for a cluster), and in CTA pairs sharing K/V loads where the semantics allow.
std::vector<Tiling> grids_of(Tiling t, const Semantics& s) {
  const int persistent = t.table->index("persistent"), cluster = t.table->index("cluster");
  REQUIRE(persistent >= 0);
  REQUIRE(cluster >= 0);
  std::vector<Tiling> out{t};
  Tiling other = t;
  other[persistent] = 1 - t[persistent];
  if (other[persistent] == 1) other[cluster] = 1;
  out.push_back(other);
  Tiling pair = t;
  pair[persistent] = 0;
  pair[cluster] = 2;
  if (pair != t && find_family("fa3_sm90")->check_tiling(s, pair).ok()) out.push_back(pair);
  return out;
}

// The case on fa3_sm90's default tiling (on both grids) and on fa2_sm80's: fa3 within fa2's
// rounding.
void compare_with_fa2(const CaseSpec& s) {
  INFO(s.describe());
  auto c = tools::AttentionCase::create(Fixture::get().gpu, s);
  REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.error().to_string()));
  const Tiling t3 = fa3_default(*c), t2 = fa2_default(*c);
  for (const Tiling& t : grids_of(t3, semantics_of(*c))) {
    INFO(t.name());
    const Errors fa3 = run(*c, t);
    const Errors fa2 = run(*c, t2);
    std::printf("  %-74s fa3 %s rel_l2 %.2e lse %.1e | fa2 %s %.2e lse %.1e\n", s.describe().c_str(), t.name().c_str(),
                fa3.rel_l2, fa3.lse, t2.name().c_str(), fa2.rel_l2, fa2.lse);
    CHECK(fa3.rel_l2 <= 1.25 * fa2.rel_l2 + 1e-4);  // no worse than fa2_sm80's rounding
  }
}

}  // namespace

TEST_CASE("fa3_sm90: dtypes x head dims 64/128/256 x masks, Sq != Sk, GQA, LSE; error next to fa2_sm80's") {
  if (!on_sm90()) return;
  std::uint64_t seed = 9000;
  for (DType dt : {DType::f16, DType::bf16})
    for (int d : {64, 128, 256})
      for (Mask m : {Mask::none, Mask::causal})
        for (auto [sq, sk] : {std::pair<std::int64_t, std::int64_t>{1000, 1000}, {300, 1000}, {1000, 300}})
          compare_with_fa2(fa3_case(dt, d, m, sq, sk, ++seed));
}

TEST_CASE("fa3_sm90: head dims padded to wgmma's 16 and to TMA's 64-wide atoms, and Dqk != Dv (MLA 192/128)") {
  if (!on_sm90()) return;
  std::uint64_t seed = 9200;
  for (auto [dqk, dv] : {std::pair<int, int>{32, 32}, {40, 40}, {72, 72}, {80, 80}, {96, 96}, {160, 160}, {200, 200},
                         {192, 128}, {128, 64}, {64, 128}})
    for (Mask m : {Mask::none, Mask::causal}) {
      CaseSpec s = fa3_case(DType::bf16, dqk, m, 517, 700, ++seed);
      s.head_dim_v = dv;
      compare_with_fa2(s);
    }
}

TEST_CASE("fa3_sm90: varlen, kv_lens, paged caches, windows, softcap, ALiBi and sinks; error next to fa2_sm80's") {
  if (!on_sm90()) return;
  std::uint64_t seed = 9300;
  for (DType dt : {DType::f16, DType::bf16})
    for (Mask m : {Mask::none, Mask::causal}) {
      CaseSpec v = fa3_case(dt, 128, m, 0, 0, ++seed);
      v.varlen_q = {1, 0, 200, 77, 513, 5, 1000};
      v.varlen_k = {1, 9, 200, 300, 400, 0, 1000};  // Sq > Sk and Sk = 0: rows that see no key
      compare_with_fa2(v);
      CaseSpec kl = fa3_case(dt, 64, m, 300, 900, ++seed);
      kl.kv_lens = {900, 129};
      compare_with_fa2(kl);
      for (auto [left, right] : {std::pair<std::int64_t, std::int64_t>{0, 0}, {5, -1}, {63, 17}, {-1, 40}, {300, 0}}) {
        if (m == Mask::causal && right > 0) continue;
        CaseSpec w = fa3_case(dt, 64, m, 700, 650, ++seed);
        w.window = Window{left, right};
        compare_with_fa2(w);
      }
      CaseSpec sc = fa3_case(dt, 128, m, 600, 600, ++seed);
      sc.softcap = 30.f;
      sc.softmax_scale = 40.f;  // logits of +-1e3 into the cap
      compare_with_fa2(sc);
      CaseSpec al = fa3_case(dt, 128, m, 500, 800, ++seed);
      al.alibi = true;
      al.alibi_per_batch = true;
      compare_with_fa2(al);
      CaseSpec sk = fa3_case(dt, 64, m, 400, 300, ++seed);
      sk.sinks = true;
      sk.sink_mean = 6.f;  // dominant sinks
      compare_with_fa2(sk);
      for (std::int64_t page : {16, 64, 256}) {  // a box a page, several, or a page split over tiles
        CaseSpec pg = fa3_case(dt, 128, m, 333, 1000, ++seed);
        pg.page_size = page;
        pg.kv_lens = {1000, 517};
        compare_with_fa2(pg);
      }
      CaseSpec all = fa3_case(dt, 192, m, 0, 0, ++seed);
      all.head_dim_v = 128;
      all.varlen_q = {300, 1, 640};
      all.varlen_k = {500, 40, 640};
      all.window = Window{200, m == Mask::causal ? 0 : 50};
      all.softcap = 10.f;
      all.alibi = true;
      all.sinks = true;
      compare_with_fa2(all);
    }
}

// A persistent grid has one CTA per SM slot: these cases have 5 to 23 times more tiles than that, so
// each CTA walks many, with barrier rounds, Q refills and the consumers' turns running on across
// tiles of different key counts (causal, windows) and tiles without keys (rows past a short
// sequence, sequences without keys).
TEST_CASE("fa3_sm90: a persistent grid's CTAs walk many tiles of every semantic") {
  if (!on_sm90()) return;
  std::uint64_t seed = 9500;
  std::vector<CaseSpec> cases;
  for (int d : {64, 128, 256})
    for (Mask m : {Mask::none, Mask::causal}) {
      CaseSpec s = fa3_case(d == 128 ? DType::f16 : DType::bf16, d, m, 600, 700, ++seed);
      s.heads_q = 64;
      s.heads_kv = 8;
      cases.push_back(s);
    }
  CaseSpec rich = fa3_case(DType::bf16, 128, Mask::causal, 0, 0, ++seed);
  rich.heads_q = 64;
  rich.heads_kv = 16;
  rich.varlen_q = {700, 0, 1, 513, 1000, 64};
  rich.varlen_k = {900, 40, 0, 513, 1000, 64};
  rich.window = Window{300, 0};
  rich.softcap = 20.f;
  rich.alibi = true;
  rich.sinks = true;
  rich.unowned_fill = std::numeric_limits<float>::quiet_NaN();
  cases.push_back(rich);
  CaseSpec paged = fa3_case(DType::f16, 128, Mask::none, 400, 1024, ++seed);
  paged.heads_q = 64;
  paged.heads_kv = 8;
  paged.batch = 3;
  paged.page_size = 64;
  paged.kv_lens = {1024, 0, 333};
  cases.push_back(paged);
  // Long keys and few heads: 160 tiles, so a persistent grid's CTAs walk an odd round partly
  // (the snake's reversed slots), over tiles ordered by query block across all heads.
  CaseSpec long_keys = fa3_case(DType::bf16, 128, Mask::causal, 2048, 16384, ++seed);
  long_keys.batch = 1;
  long_keys.heads_q = long_keys.heads_kv = 10;
  cases.push_back(long_keys);
  for (const CaseSpec& s : cases) compare_with_fa2(s);
}

TEST_CASE("fa3_sm90: every candidate tiling of two variants gives the reference") {
  if (!on_sm90()) return;
  Fixture& f = Fixture::get();
  const Arch arch = Arch::parse(f.gpu.info().arch).value();
  CaseSpec plain = fa3_case(DType::bf16, 128, Mask::causal, 777, 1234, 9100);
  CaseSpec shared = fa3_case(DType::f16, 128, Mask::none, 777, 1234, 9102);  // clusters too
  CaseSpec rich = fa3_case(DType::f16, 64, Mask::causal, 0, 0, 9101);
  rich.varlen_q = {700, 3, 300};
  rich.varlen_k = {900, 50, 300};
  rich.window = Window{150, 0};
  rich.alibi = true;
  rich.sinks = true;
  for (const CaseSpec& s : {plain, shared, rich}) {
    INFO(s.describe());
    auto c = tools::AttentionCase::create(f.gpu, s);
    REQUIRE(c.ok());
    const auto tilings = find_family("fa3_sm90")->candidate_tilings(arch, semantics_of(*c));
    CHECK(tilings.size() >= 10);
    for (const Tiling& t : tilings) {
      INFO(t.name());
      const Errors e = run(*c, t);
      std::printf("  %-50s %-12s rel_l2 %.2e lse %.1e\n", s.describe().c_str(), t.name().c_str(), e.rel_l2, e.lse);
    }
  }
}

// Small problems for compute-sanitizer (memcheck, racecheck: bench/device_fa3_grid.sh
// SANITIZE=1), each on both grids and, where not causal, in CTA pairs: each default tiling
// shape (three and two consumers, BLOCK_N 80-128), a padded head dim, Dqk != Dv, every semantic
// at once with ragged sequences, a paged cache, a case whose persistent CTAs walk two tiles,
// and pairs over an odd count of query blocks (the last pair's second CTA pads). The varlen,
// paged and kv_lens cases hold NaN in every K/V slot no sequence owns, so the sanitizers also
// see the last tile's V tail zeroed (in CTA pairs too, for kv_lens).
TEST_CASE("fa3_sm90: a small matrix of variants for compute-sanitizer") {
  if (!on_sm90()) return;
  std::vector<CaseSpec> cases;
  std::uint64_t seed = 9400;
  for (int d : {64, 128, 256}) cases.push_back(fa3_case(DType::bf16, d, d == 128 ? Mask::causal : Mask::none, 200, 333, ++seed));
  CaseSpec padded = fa3_case(DType::f16, 72, Mask::causal, 150, 150, ++seed);
  cases.push_back(padded);
  CaseSpec mla = fa3_case(DType::bf16, 192, Mask::causal, 250, 250, ++seed);
  mla.head_dim_v = 128;
  cases.push_back(mla);
  CaseSpec rich = fa3_case(DType::f16, 64, Mask::causal, 0, 0, ++seed);
  rich.varlen_q = {130, 0, 7};
  rich.varlen_k = {260, 5, 0};
  rich.window = Window{100, 0};
  rich.softcap = 20.f;
  rich.alibi = true;
  rich.sinks = true;
  cases.push_back(rich);
  CaseSpec paged = fa3_case(DType::bf16, 128, Mask::causal, 100, 300, ++seed);
  paged.page_size = 32;
  paged.kv_lens = {300, 77};
  paged.unowned_fill = std::numeric_limits<float>::quiet_NaN();
  cases.push_back(paged);
  CaseSpec lens = fa3_case(DType::f16, 128, Mask::none, 300, 400, ++seed);
  lens.kv_lens = {333, 17};
  lens.unowned_fill = std::numeric_limits<float>::quiet_NaN();
  cases.push_back(lens);
  // 256 tiles: on a persistent grid (132 CTAs on an H100) most CTAs walk two, so the sanitizers
  // see Q refilled and the output tile rewritten after a store.
  CaseSpec walk = fa3_case(DType::bf16, 128, Mask::causal, 512, 512, ++seed);
  walk.batch = 1;
  walk.heads_q = 64;
  walk.heads_kv = 8;
  cases.push_back(walk);
  CaseSpec odd_pairs = fa3_case(DType::f16, 128, Mask::none, 333, 250, ++seed);
  odd_pairs.heads_q = 8;
  odd_pairs.heads_kv = 2;
  cases.push_back(odd_pairs);
  for (const CaseSpec& s : cases) {
    INFO(s.describe());
    auto c = tools::AttentionCase::create(Fixture::get().gpu, s);
    REQUIRE(c.ok());
    for (const Tiling& t : grids_of(fa3_default(*c), semantics_of(*c))) {
      const Errors e = run(*c, t);
      std::printf("  %-60s %-10s rel_l2 %.2e\n", s.describe().c_str(), t.name().c_str(), e.rel_l2);
    }
  }
}
