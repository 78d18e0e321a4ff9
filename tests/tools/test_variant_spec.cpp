// What warmup is asked for: dtype/mask/tiling parsing, named sets, flags, JSON files, byte sizes,
// and the plan over archs and tilings (no NVRTC work: planning compiles nothing).
#include <doctest/doctest.h>

#include <fstream>
#include <set>
#include <type_traits>

#include "byte_size.hpp"
#include "cli_test_util.hpp"
#include "kernel_family.hpp"
#include "variant_spec.hpp"
#include "warmup_plan.hpp"

using namespace flashjit;
using namespace flashjit::tools;
using flashjit::tools::test::contains;

TEST_CASE("dtype and mask parsing name the option and the rule") {
  CHECK(parse_dtype("bf16", "--dtype")->dtype == DType::bf16);
  CHECK(parse_dtype("tf32", "--dtype")->fp32_math == Fp32Math::tf32);
  auto bad = parse_dtype("f8", "--dtype");
  REQUIRE(!bad.ok());
  CHECK(contains(bad.error().message(), "--dtype"));
  CHECK(contains(bad.error().message(), "'f8'"));

  CHECK(parse_mask("causal", "--mask").value() == Mask::causal);
  CHECK(!parse_mask("sliding", "--mask").ok());

  CHECK(parse_passes("both", "--pass").value() == std::vector<Pass>{Pass::forward, Pass::backward});
  CHECK(parse_passes("backward", "--pass").value() == std::vector<Pass>{Pass::backward});
  CHECK(contains(parse_passes("Forward", "--pass").error().message(), "--pass: must be forward, backward or both"));

}

TEST_CASE("boolean semantics fields each have a flag, from the field list") {
  std::vector<std::string> flags;
  Semantics{}.visit([&](const SemanticsField& f, const auto& v) {
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, bool>) flags.push_back(bool_field_flag(f));
  });
  CHECK(flags == std::vector<std::string>{"--gqa", "--lse", "--varlen", "--window", "--softcap", "--alibi", "--sinks",
                                          "--kv-lens", "--kv-starts", "--paged", "--deterministic"});
}

TEST_CASE("widest_vec follows the head dims and the dtype's 16-byte limit") {
  CHECK(widest_vec(DType::f16, 128, 128) == 8);
  CHECK(widest_vec(DType::f32, 128, 128) == 4);
  CHECK(widest_vec(DType::f16, 36, 36) == 4);
  CHECK(widest_vec(DType::bf16, 130, 64) == 2);
  CHECK(widest_vec(DType::f16, 33, 33) == 1);
}

TEST_CASE("named sets have the documented sizes and are all valid") {
  CHECK(variant_set("default")->size() == 8);
  CHECK(variant_set("prefill")->size() == 40);
  CHECK(variant_set("all-dims")->size() == 60);
  CHECK(variant_set("training")->size() == 32);
  const auto training = variant_set("training");
  for (const auto& v : training.value()) {
    CHECK(v.semantics.write_lse);  // what the backward reads
    CHECK(v.passes == std::vector<Pass>{Pass::forward, Pass::backward});
  }
  const auto prefill = variant_set("prefill");
  for (const auto& v : prefill.value()) CHECK(v.passes == std::vector<Pass>{Pass::forward});
  for (const auto& s : variant_sets()) {
    const auto set = variant_set(s.name);
    for (const auto& v : set.value()) CHECK_MESSAGE(v.semantics.check().ok(), v.semantics.name());
  }
  auto bad = variant_set("everything");
  REQUIRE(!bad.ok());
  CHECK(contains(bad.error().message(), "--set"));
  CHECK(contains(bad.error().message(), "prefill"));
}

TEST_CASE("flags give the cross product of dtypes, head dims and masks") {
  VariantFlags f;
  CHECK(!f.any());
  f.dtypes = {"f16", "bf16"};
  f.head_dims = {64, 96};
  f.masks = {"none", "causal"};
  f.features["write_lse"] = true;
  CHECK(f.any());
  auto specs = variants_from_flags(f);
  REQUIRE(specs.ok());
  CHECK(specs->size() == 8);
  for (const auto& s : specs.value()) CHECK(s.semantics.write_lse);

  VariantFlags g;
  g.head_dims = {128};
  g.head_dim_v = 64;
  g.tiling = "m64n64w4s2";
  g.features["gqa"] = true;
  g.features["sinks"] = true;
  auto one = variants_from_flags(g);
  REQUIRE(one.ok());
  REQUIRE(one->size() == 1);
  CHECK(one->front().semantics.head_dim_v == 64);
  CHECK(one->front().semantics.gqa);
  CHECK(one->front().semantics.sinks);
  CHECK(one->front().tiling == "m64n64w4s2");
  CHECK(one->front().semantics.dtype == DType::f16);  // the default

  VariantFlags no_dim;
  no_dim.dtypes = {"f16"};
  CHECK(contains(variants_from_flags(no_dim).error().message(), "--head-dim"));
  VariantFlags big;
  big.head_dims = {512};
  CHECK(contains(variants_from_flags(big).error().message(), "--head-dim: must be in [1, 256]"));
  VariantFlags vec;
  vec.head_dims = {36};
  vec.vec = 8;
  CHECK(contains(variants_from_flags(vec).error().message(), "--vec"));
}

TEST_CASE("JSON variant lists: fields, defaults and errors that point at the entry") {
  auto doc = nlohmann::json::parse(R"([
    {"dtype": "bf16", "head_dim": 128, "mask": "causal", "lse": true},
    {"head_dim": 64, "head_dim_v": 32, "gqa": true, "tiling": "m64n64w4s2", "vec": 4},
    {"dtype": "tf32", "head_dim_qk": 192, "head_dim_v": 128, "varlen": true, "window": true, "softcap": true,
     "alibi": true, "sinks": true, "write_lse": true, "family": "fa2_sm80"}
  ])");
  auto specs = variants_from_json(doc, "v.json");
  REQUIRE(specs.ok());
  REQUIRE(specs->size() == 3);
  CHECK((*specs)[0].semantics.name() == "bf16-dqk128-dv128-causal-lse-vec8");
  CHECK((*specs)[1].semantics.name() == "f16-dqk64-dv32-gqa-vec4");
  CHECK((*specs)[1].tiling == "m64n64w4s2");
  CHECK((*specs)[2].semantics.name() == "f32-tf32-dqk192-dv128-lse-varlen-window-softcap-alibi-sinks-vec4");
  CHECK((*specs)[2].family == "fa2_sm80");
  CHECK((*specs)[1].origin == "v.json[1]");
  CHECK(variants_from_json(nlohmann::json::parse(R"({"variants": [{"head_dim": 64}]})"), "v.json")->size() == 1);

  auto err = [](const char* text) { return variants_from_json(nlohmann::json::parse(text), "v.json").error().message(); };
  CHECK(contains(err(R"([{"head_dim": 64}, {"hed_dim": 64}])"), "v.json[1]: unknown field 'hed_dim'"));
  CHECK(contains(err(R"([{"head_dim": "64"}])"), "v.json[0].head_dim: must be an integer"));
  CHECK(contains(err(R"([{"head_dim": 64, "dtype": "f8"}])"), "v.json[0].dtype"));
  CHECK(contains(err(R"([{"dtype": "f16"}])"), "v.json[0]: needs a head_dim"));
  CHECK(contains(err(R"([{"head_dim": 64, "tiling": 5}])"), "v.json[0].tiling: must be a string"));
  CHECK(contains(err(R"([{"head_dim": 64, "lse": true, "write_lse": true}])"), "not both"));
  // Integers out of range are refused, never narrowed (4294967360 would become 64).
  CHECK(contains(err(R"([{"head_dim": 4294967360}])"), "v.json[0].head_dim: must be an integer in [1, 256]"));
  CHECK(contains(err(R"([{"head_dim": 64, "vec": 4294967304}])"), "v.json[0].vec: must be an integer in [1, 8]"));
  CHECK(contains(err(R"({"head_dim": 64})"), "list"));
}

TEST_CASE("variants_from_file reads a file and refuses bad JSON") {
  test::TempDir dir;
  std::ofstream(dir / "ok.json") << R"([{"head_dim": 64}])";
  std::ofstream(dir / "bad.json") << "[{";
  CHECK(variants_from_file(dir / "ok.json")->size() == 1);
  CHECK(contains(variants_from_file(dir / "bad.json").error().message(), "not valid JSON"));
  CHECK(contains(variants_from_file(dir / "missing.json").error().message(), "--variants"));
}

TEST_CASE("byte sizes: suffixes in, readable sizes out") {
  CHECK(parse_byte_size("1048576", "--max-bytes").value() == 1048576);
  CHECK(parse_byte_size("512M", "--max-bytes").value() == 512ull << 20);
  CHECK(parse_byte_size("2G", "--max-bytes").value() == 2ull << 30);
  CHECK(parse_byte_size("2GiB", "--max-bytes").value() == 2ull << 30);
  CHECK(parse_byte_size("1.5k", "--max-bytes").value() == 1536);
  CHECK(parse_byte_size("100B", "--max-bytes").value() == 100);
  CHECK(parse_byte_size("0", "--max-bytes").value() == 0);
  // Found by fuzz_env_values: adding 0.5 before truncating rounded odd counts above 2^63 up.
  CHECK(parse_byte_size("9999999999999999999", "--max-bytes").value() == 9999999999999999999ull);
  CHECK(parse_byte_size("18446744073709551614", "--max-bytes").value() == 18446744073709551614ull);
  for (const char* bad : {"", "G", "12X", "1.5", "1..5G", "2GB2", "-1", "99999999999T"}) {
    auto r = parse_byte_size(bad, "--max-bytes");
    CHECK_MESSAGE(!r.ok(), bad);
    if (!r.ok()) CHECK(contains(r.error().message(), "--max-bytes"));
  }
  auto raw = parse_byte_size("2\x1b[2JG", "FLASHJIT_CACHE_MAX_BYTES");
  REQUIRE(!raw.ok());
  CHECK(contains(raw.error().message(), "'2\\x1b[2JG'"));
  CHECK(format_bytes(812) == "812 B");
  CHECK(format_bytes(4096) == "4.00 KiB");
  CHECK(format_bytes(1536ull << 20) == "1.50 GiB");
}

TEST_CASE("plan: specs x archs, fixed tilings, every candidate with --all-tilings, no duplicates") {
  auto engine = Engine::create().value();
  const std::vector<Arch> archs{Arch::parse("sm_80").value(), Arch::parse("sm_90a").value()};
  VariantFlags f;
  f.head_dims = {64};
  auto specs = variants_from_flags(f).value();
  specs.push_back(specs.front());  // a duplicate is compiled once

  auto every = plan_warmup(specs, archs, false);
  REQUIRE(every.ok());
  // Every family that serves it, per arch: fa2_sm80 and decode_sm80 on both, fa3_sm90 on sm_90a
  // with its three default tilings at D = 64 (short sequences, long ones, long ones in CTA pairs).
  REQUIRE(every->size() == 2 * 2 + 3);
  specs[0].family = specs[1].family = "fa2_sm80";
  auto jobs = plan_warmup(specs, archs, false);
  REQUIRE(jobs.ok());
  REQUIRE(jobs->size() == 2);
  CHECK((*jobs)[0].arch.name() == "sm_80");
  CHECK((*jobs)[1].arch.name() == "sm_90a");
  CHECK((*jobs)[0].variant.family == "fa2_sm80");

  auto all = plan_warmup(specs, {archs[0]}, true);
  REQUIRE(all.ok());
  const auto candidates = find_family("fa2_sm80")->candidate_tilings(archs[0], specs[0].semantics);
  bool default_among = false;
  for (const auto& t : candidates) default_among |= t == (*jobs)[0].variant.tiling;
  CHECK(all->size() == candidates.size() + (default_among ? 0 : 1));
  CHECK(all->front().variant == (*jobs)[0].variant);  // the default first
  // fa3_sm90's candidates come on both grids (a plan-only knob): one job per compiled kernel.
  specs[0].family = specs[1].family = "fa3_sm90";
  auto fa3_all = plan_warmup(specs, {archs[1]}, true);
  REQUIRE(fa3_all.ok());
  std::set<std::string> kernels;
  for (const auto& j : *fa3_all) kernels.insert(j.variant.code_name());
  CHECK(kernels.size() == fa3_all->size());
  std::set<std::string> expected;
  const KernelFamily* fa3 = find_family("fa3_sm90");
  for (const Tiling& t : fa3->candidate_tilings(archs[1], specs[0].semantics)) expected.insert(t.code_name());
  for (const Tiling& t : fa3->default_tilings(archs[1], specs[0].semantics)) expected.insert(t.code_name());
  CHECK(fa3_all->size() == expected.size());
  CHECK(fa3_all->size() < fa3->candidate_tilings(archs[1], specs[0].semantics).size());
  specs[0].family = specs[1].family = "fa2_sm80";

  specs[0].tiling = "m128n256w4s4";  // far more shared memory than any arch has
  auto bad = plan_warmup(specs, archs, false);
  REQUIRE(!bad.ok());
  CHECK(contains(bad.error().message(), "--dtype/--head-dim"));
  CHECK(contains(bad.error().message(), "shared memory"));
  specs[0].tiling = "m128n64";  // not a tiling of the family
  CHECK(contains(plan_warmup(specs, archs, false).error().message(), "m<block_m>n<block_n>w<warps>s<stages>"));
  specs[0].tiling.clear();
  specs[0].family = "fa9";
  CHECK(contains(plan_warmup(specs, archs, false).error().message(), "unknown kernel family 'fa9'"));
}

TEST_CASE("plan: a backward pass adds the backward family's variants, named as Engine::backward() names them") {
  const std::vector<Arch> archs{Arch::parse("sm_80").value(), Arch::parse("sm_90a").value()};
  VariantFlags f;
  f.head_dims = {64};
  f.features["write_lse"] = true;
  auto specs = variants_from_flags(f).value();
  const auto forward_only = plan_warmup(specs, archs, false);
  REQUIRE(forward_only.ok());
  specs[0].passes = {Pass::forward, Pass::backward};
  auto both = plan_warmup(specs, archs, false);
  REQUIRE(both.ok());
  REQUIRE(both->size() == forward_only->size() + 2);  // one backward kernel per arch
  std::vector<WarmupJob> backward;
  for (const auto& j : *both)
    if (j.pass == Pass::backward) backward.push_back(j);
  REQUIRE(backward.size() == 2);
  for (const auto& j : backward) {
    // What Engine::backward() runs: bwd_sm90 on sm_90a (serving every shape there), else bwd_sm80.
    const std::string family = j.arch.name() == "sm_90a" ? "bwd_sm90" : "bwd_sm80";
    CHECK(j.variant.family == family);
    CHECK(j.variant.semantics == backward_semantics(specs[0].semantics));
    CHECK(!j.variant.semantics.write_lse);
    CHECK(j.variant.tiling == find_family(family)->default_tiling(j.arch, j.variant.semantics, nullptr));
  }
  for (const auto& j : *both)
    if (j.pass == Pass::forward) CHECK(j.variant.semantics.write_lse);

  specs[0].passes = {Pass::backward};
  auto all = plan_warmup(specs, {archs[0]}, true);
  REQUIRE(all.ok());
  const auto candidates = find_family("bwd_sm80")->candidate_tilings(archs[0], backward[0].variant.semantics);
  CHECK(all->size() == candidates.size());  // the default is among the candidates
  specs[0].tiling = "m64n64w4q1";
  auto fixed = plan_warmup(specs, {archs[0]}, false);
  REQUIRE(fixed.ok());
  REQUIRE(fixed->size() == 1);
  CHECK(fixed->front().variant.tiling.name() == "m64n64w4q1");
  specs[0].tiling = "m64n64w4s2";  // a forward tiling
  CHECK(contains(plan_warmup(specs, {archs[0]}, false).error().message(), "not a tiling of any backward family"));
  specs[0].tiling.clear();
  specs[0].family = "decode_sm80";
  CHECK(contains(plan_warmup(specs, {archs[0]}, false).error().message(),
                 "decode_sm80 is a forward family, but backward kernels were asked for"));
  specs[0].family.clear();
  specs[0].semantics.head_dim_qk = 192;  // head dims past 128, Dqk != Dv: served
  specs[0].semantics.head_dim_v = 128;
  auto wide = plan_warmup(specs, {archs[0]}, false);
  REQUIRE(wide.ok());
  REQUIRE(wide->size() == 1);
  CHECK(wide->front().variant.family == "bwd_sm80");
  specs[0].semantics.dtype = DType::f32;  // fp32: served too
  specs[0].semantics.vec = 4;
  auto fp32 = plan_warmup(specs, {archs[0]}, false);
  REQUIRE(fp32.ok());
  CHECK(fp32->front().variant.family == "bwd_sm80");
  specs[0].semantics.paged = true;  // no training through a KV cache
  auto paged = plan_warmup(specs, {archs[0]}, false);
  REQUIRE(!paged.ok());
  CHECK(contains(paged.error().message(), "backward on sm_80: no backward kernel family serves"));
}

TEST_CASE("JSON integers are range-checked before narrowing (issue 6, defect 6)") {
  auto err = [](const char* text) {
    auto r = variants_from_json(nlohmann::json::parse(text), "v.json");
    return r.ok() ? std::string("OK: ") + r->front().semantics.name() : r.error().message();
  };
  // 4294967360 = 2^32 + 64 and 4294967304 = 2^32 + 8 used to become 64 and 8.
  CHECK(err(R"([{"head_dim": 4294967360}])") == "v.json[0].head_dim: must be an integer in [1, 256], got 4294967360");
  CHECK(err(R"([{"head_dim": 64, "head_dim_v": 4294967360}])") ==
        "v.json[0].head_dim_v: must be an integer in [1, 256], got 4294967360");
  CHECK(err(R"([{"head_dim": 64, "vec": 4294967304}])") == "v.json[0].vec: must be an integer in [1, 8], got 4294967304");
  CHECK(err(R"([{"head_dim": -4294967232}])") == "v.json[0].head_dim: must be an integer in [1, 256], got -4294967232");
  CHECK(err(R"([{"head_dim": 18446744073709551615}])") ==
        "v.json[0].head_dim: must be an integer in [1, 256], got 18446744073709551615");
  CHECK(err(R"([{"head_dim": 64.0}])") == "v.json[0].head_dim: must be an integer in [1, 256], got 64");
  CHECK(err(R"([{"head_dim": 64, "vec": 0}])") == "v.json[0].vec: must be an integer in [1, 8], got 0");
  CHECK(err(R"([{"head_dim": 64, "vec": 3}])") == "v.json[0]: vec must be 1, 2, 4 or 8, got 3");
  CHECK(err(R"([{"head_dim": 64, "vec": 4}])") == "OK: f16-dqk64-dv64-vec4");
}

TEST_CASE("JSON files: nesting is bounded before parsing, names and strings are echoed safely") {
  test::TempDir dir;
  std::ofstream(dir / "deep.json") << std::string(200000, '[') << std::string(200000, ']');
  auto deep = variants_from_file(dir / "deep.json");
  REQUIRE_FALSE(deep.ok());
  CHECK(contains(deep.error().message(), "--variants"));
  CHECK(contains(deep.error().message(), "nested deeper than 64 levels"));
  // Brackets inside strings are text, not nesting.
  std::ofstream(dir / "brackets.json") << R"([{"head_dim": 64, "dtype": "f16"}, )" << "{\"head_dim\": 32, \"mask\": \"none\", "
                                       << "\"tiling\": \"" << std::string(100, '[') << "\"}]";
  auto brackets = variants_from_file(dir / "brackets.json");
  REQUIRE_FALSE(brackets.ok());
  CHECK(contains(brackets.error().message(), ".tiling"));

  auto raw = variants_from_json(nlohmann::json::parse("[{\"head_dim\": 64, \"dtype\": \"f\\u001b[2J\"}]"), "v.json");
  REQUIRE_FALSE(raw.ok());
  CHECK(contains(raw.error().message(), "'f\\x1b[2J'"));
  auto key = variants_from_json(nlohmann::json::parse("[{\"head_dim\": 64, \"\\u001b]0;x\\u0007\": 1}]"), "v.json");
  REQUIRE_FALSE(key.ok());
  CHECK(contains(key.error().message(), "unknown field '\\x1b]0;x\\x07'"));
  CHECK(contains(variants_from_file(dir / "\xff.json").error().message(), "\\xff.json"));
}
