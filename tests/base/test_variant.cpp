#include <doctest/doctest.h>

#include "flashjit/variant.hpp"
#include "kernel_family.hpp"
#include "template_store.hpp"

using namespace flashjit;

TEST_CASE("variant names are readable and distinguish every field") {
  KernelVariant v{"fa2_sm80", {}, {}};
  v.semantics.mask = Mask::causal;
  v.semantics.write_lse = true;
  CHECK(v.name() == "fa2_sm80-f16-d128-causal-lse-v8-m128n64w4s2");
  KernelVariant w = v;
  CHECK(w == v);
  CHECK(w.content_hash() == v.content_hash());
  CHECK(w.fast_hash() == v.fast_hash());

  // Each single-field change alters equality, name and content hash.
  std::vector<KernelVariant> changed(10, v);
  changed[0].semantics.dtype = DType::bf16;
  changed[1].semantics.head_dim_qk = 96;
  changed[2].semantics.head_dim_v = 64;
  changed[3].semantics.mask = Mask::none;
  changed[4].semantics.gqa = true;
  changed[5].semantics.write_lse = false;
  changed[6].semantics.vec = 4;
  changed[7].tiling.block_n = 128;
  changed[8].tiling.stages = 3;
  changed[9].tiling.warps = 8;
  for (const auto& c : changed) {
    CHECK(c != v);
    CHECK(c.name() != v.name());
    CHECK(c.content_hash() != v.content_hash());
  }
  KernelVariant f32 = v;
  f32.semantics.dtype = DType::f32;
  KernelVariant tf32 = f32;
  tf32.semantics.fp32_math = Fp32Math::tf32;
  CHECK(f32.name() != tf32.name());
  CHECK(f32.content_hash() != tf32.content_hash());
  CHECK(v.content_hash().size() == 32);
}

TEST_CASE("semantics check names the rule") {
  Semantics s;
  s.head_dim_qk = 0;
  auto st = s.check();
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message().find("head_dim_qk must be in [1, 256]") != std::string::npos);
  s.head_dim_qk = 257;
  CHECK_FALSE(s.check().ok());
  s.head_dim_qk = 100;
  s.vec = 8;  // 100 is not a multiple of 8
  CHECK_FALSE(s.check().ok());
  s.vec = 4;
  CHECK(s.check().ok());
  s.dtype = DType::f32;
  s.vec = 8;  // 32 bytes: too wide
  CHECK_FALSE(s.check().ok());
}

TEST_CASE("arch names parse and round-trip") {
  for (const char* n : {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100a"}) {
    auto a = Arch::parse(n);
    REQUIRE(a.ok());
    CHECK(a->name() == n);
  }
  CHECK(Arch::parse("sm_90a")->suffix == 'a');
  for (const char* n : {"", "sm", "sm_", "sm_9", "compute_90", "sm_90b", "sm_90aa", "../sm_90", "sm_90/"})
    CHECK_FALSE(Arch::parse(n).ok());
}

TEST_CASE("rendering puts both kinds of constants into the source") {
  KernelVariant v{"fa2_sm80", {}, {}};
  v.semantics.dtype = DType::bf16;
  v.semantics.head_dim_qk = 200;
  v.semantics.head_dim_v = 72;
  v.tiling = {64, 32, 4, 3};
  const std::string src = render_source(*find_family("fa2_sm80"), v);
  for (const char* want : {"kDtype = 1", "kHeadDimQK = 200", "kHeadDimV = 72", "kCausal = false", "kBlockM = 64",
                           "kBlockN = 32", "kWarps = 4", "kStages = 3", "#include \"fa2_sm80/forward.cu\""})
    CHECK_MESSAGE(src.find(want) != std::string::npos, want);
  CHECK(src.find(v.name()) != std::string::npos);
}

TEST_CASE("templates are embedded and hashed") {
  const auto& store = TemplateStore::instance();
  CHECK(store.find("fa2_sm80/forward.cu") != nullptr);
  CHECK(store.find("common/ptx.cuh") != nullptr);
  CHECK(store.find("no/such.cuh") == nullptr);
  CHECK(store.content_hash().size() == 32);
}

TEST_CASE("tiling rules and shared-memory pruning") {
  const KernelFamily* f = find_family("fa2_sm80");
  REQUIRE(f);
  Semantics s;
  CHECK(f->check_tiling(s, {128, 64, 4, 2}).ok());
  CHECK_FALSE(f->check_tiling(s, {128, 64, 16, 2}).ok());  // too many warps
  CHECK_FALSE(f->check_tiling(s, {48, 64, 4, 2}).ok());    // 48 rows over 4 warps
  CHECK_FALSE(f->check_tiling(s, {128, 40, 4, 2}).ok());   // BLOCK_N not a multiple of 16
  CHECK_FALSE(f->check_tiling(s, {128, 64, 4, 1}).ok());   // needs a second stage
  s.head_dim_qk = s.head_dim_v = 256;
  const Arch sm86 = Arch::parse("sm_86").value();
  const Arch sm90 = Arch::parse("sm_90a").value();
  for (const Tiling& t : f->candidate_tilings(sm86, s)) CHECK(f->smem_bytes(s, t) <= arch_smem_limit(sm86));
  CHECK(f->candidate_tilings(sm90, s).size() > f->candidate_tilings(sm86, s).size());
  for (const Arch& a : {sm86, sm90}) {
    const Tiling t = f->default_tiling(a, s);
    CHECK(f->check_tiling(s, t).ok());
    CHECK(f->smem_bytes(s, t) <= arch_smem_limit(a));
  }
}
