// Variants from the one semantics field list and a knob table: names, equality, hashes, tiling
// names, arch names.
#include <doctest/doctest.h>

#include "flashjit/variant.hpp"

using namespace flashjit;

namespace {
const KnobTable kKnobs{"test_family",
                       {{"block_m", "m", "kBlockM", ""}, {"block_n", "n", "kBlockN", ""},
                        {"warps", "w", "kWarps", ""}, {"stages", "s", "kStages", ""}}};
}  // namespace

TEST_CASE("variant names are readable and distinguish every field") {
  KernelVariant v{"test_family", {}, Tiling(kKnobs, {128, 64, 4, 2})};
  v.semantics.mask = Mask::causal;
  v.semantics.write_lse = true;
  CHECK(v.name() == "test_family-f16-dqk128-dv128-causal-lse-vec8-m128n64w4s2");
  KernelVariant w = v;
  CHECK(w == v);
  CHECK(w.content_hash() == v.content_hash());
  CHECK(w.fast_hash() == v.fast_hash());

  // Each single-field change alters equality, name and content hash: every field of the list
  // and every knob of the table.
  std::vector<KernelVariant> changed(19, v);
  changed[0].semantics.dtype = DType::bf16;
  changed[1].semantics.head_dim_qk = 96;
  changed[2].semantics.head_dim_v = 64;
  changed[3].semantics.mask = Mask::none;
  changed[4].semantics.gqa = true;
  changed[5].semantics.write_lse = false;
  changed[6].semantics.vec = 4;
  changed[7].semantics.varlen = true;
  changed[8].semantics.window = true;
  changed[9].semantics.softcap = true;
  changed[10].semantics.alibi = true;
  changed[11].semantics.sinks = true;
  changed[12].tiling[1] = 128;
  changed[13].tiling[3] = 3;
  changed[14].tiling[2] = 8;
  changed[15].tiling[0] = 64;
  changed[16].semantics.kv_lens = true;
  changed[17].semantics.paged = true;
  changed[18].semantics.kv_starts = true;
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
  CHECK(tf32.name().find("-tf32-") != std::string::npos);
  CHECK(f32.content_hash() != tf32.content_hash());
  CHECK(v.content_hash().size() == 32);
}

TEST_CASE("every semantics field is visited once, in declaration order, with its constant") {
  std::vector<std::string> names, constants;
  Semantics{}.visit([&](const SemanticsField& f, const auto&) {
    names.push_back(f.name);
    constants.push_back(f.constant);
  });
  CHECK(names.front() == "dtype");
  CHECK(names.back() == "vec");
  CHECK(names.size() == 17);
  for (std::size_t i = 0; i < names.size(); ++i)
    for (std::size_t j = i + 1; j < names.size(); ++j) {
      CHECK(names[i] != names[j]);
      CHECK(constants[i] != constants[j]);
    }
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
  s.vec = 4;
  s.dtype = DType::f16;
  s.fp32_math = Fp32Math::tf32;
  CHECK(s.check().error().message().find("tf32 applies to f32") != std::string::npos);
}

TEST_CASE("tiling names round-trip through their family's knob table") {
  const Tiling t(kKnobs, {64, 32, 4, 3});
  CHECK(t.name() == "m64n32w4s3");
  CHECK(t.size() == 4);
  auto back = Tiling::parse(kKnobs, "m64n32w4s3");
  REQUIRE(back.ok());
  CHECK(back.value() == t);
  for (const char* text : {"m64n32w4", "m64n32w4s3x", "64n32w4s3", "m064n32w4s3", "", "n32m64w4s3", "m9999999n1w1s1"}) {
    auto r = Tiling::parse(kKnobs, text);
    CHECK_MESSAGE(!r.ok(), text);
    if (!r.ok()) CHECK(r.error().message().find("m<block_m>n<block_n>w<warps>s<stages>") != std::string::npos);
  }
  // The knob whose number is wrong is named with the digits as typed (issue 21 G6).
  auto big = Tiling::parse(kKnobs, "m4294967424n64w4s2");
  REQUIRE(!big.ok());
  CHECK(big.error().message() ==
        "a test_family tiling looks like m<block_m>n<block_n>w<warps>s<stages>, got 'm4294967424n64w4s2': "
        "block_m 4294967424 has more than 6 digits");
  auto zero = Tiling::parse(kKnobs, "m64n032w4s2");
  REQUIRE(!zero.ok());
  CHECK(zero.error().message().find("block_n 032 has a leading zero") != std::string::npos);
  CHECK(kKnobs.form() == "m<block_m>n<block_n>w<warps>s<stages>");
  // Tilings of different tables never compare equal, whatever their values.
  const KnobTable other{"other_family", kKnobs.knobs};
  CHECK(Tiling(other, {64, 32, 4, 3}) != t);
  CHECK(kKnobs.index("warps") == 2);
  CHECK(kKnobs.index("splits") == -1);
}

TEST_CASE("plan-only knobs name the tiling but leave the compiled code's hash alone") {
  const KnobTable knobs{"split_family", {{"block_n", "n", "kBlockN", ""}, {"splits", "p", nullptr, "launch only"}}};
  const KernelVariant a{"split_family", {}, Tiling(knobs, {64, 0})}, b{"split_family", {}, Tiling(knobs, {64, 8})};
  CHECK(a != b);
  CHECK(a.name() != b.name());
  CHECK(a.fast_hash() != b.fast_hash());
  CHECK(a.content_hash() == b.content_hash());  // one compiled kernel serves both
  const KernelVariant c{"split_family", {}, Tiling(knobs, {128, 0})};
  CHECK(c.content_hash() != a.content_hash());
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
