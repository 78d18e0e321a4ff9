// JSON of semantics and tilings, generated from the field list and knob tables: round trips,
// unknown keys, types and ranges checked before narrowing.
#include <doctest/doctest.h>

#include "base/variant_json.hpp"

using namespace flashjit;
using nlohmann::json;

namespace {
const KnobTable kKnobs{"test_family", {{"block_m", "m", "kBlockM", ""}, {"stages", "s", "kStages", ""}}};
bool has(const Error& e, const char* text) { return e.message().find(text) != std::string::npos; }
}  // namespace

TEST_CASE("semantics round-trip through JSON, every field by its name") {
  Semantics s;
  s.dtype = DType::bf16;
  s.head_dim_qk = 192;
  s.head_dim_v = 128;
  s.mask = Mask::causal;
  s.varlen = s.window = s.softcap = s.alibi = s.sinks = s.write_lse = s.gqa = true;
  const json j = to_json(s);
  CHECK(j["dtype"] == "bf16");
  CHECK(j["mask"] == "causal");
  CHECK(j["head_dim_qk"] == 192);
  CHECK(j["sinks"] == true);
  auto back = semantics_from_json(j, "x");
  REQUIRE(back.ok());
  CHECK(back.value() == s);
  // Absent fields keep their defaults.
  CHECK(semantics_from_json(json::object(), "x").value() == Semantics{});
}

TEST_CASE("semantics JSON errors name the place and the rule") {
  CHECK(has(semantics_from_json(json{{"hed_dim_qk", 64}}, "v[1]").error(), "v[1]: unknown field 'hed_dim_qk'"));
  CHECK(has(semantics_from_json(json{{"head_dim_qk", "64"}}, "v").error(), "v.head_dim_qk: must be an integer"));
  CHECK(has(semantics_from_json(json{{"dtype", "f8"}}, "v").error(), "v.dtype: must be one of f16, bf16, f32"));
  CHECK(has(semantics_from_json(json{{"gqa", 1}}, "v").error(), "v.gqa: must be true or false"));
  // Out of int range is refused, never narrowed: 4294967360 would become 64.
  CHECK(has(semantics_from_json(json{{"head_dim_qk", 4294967360ull}}, "v").error(), "out of range"));
  CHECK(has(semantics_from_json(json{{"vec", 4294967304ll}}, "v").error(), "out of range"));
  CHECK(has(semantics_from_json(json{{"vec", -4294967288ll}}, "v").error(), "out of range"));
  // In range but invalid: the semantic rule.
  CHECK(has(semantics_from_json(json{{"head_dim_qk", 300}}, "v").error(), "head_dim_qk must be in [1, 256]"));
  CHECK(has(semantics_from_json(json::array(), "v").error(), "must be an object"));
}

TEST_CASE("tilings round-trip through JSON with exactly their table's knobs") {
  const Tiling t(kKnobs, {128, 3});
  const json j = to_json(t);
  CHECK(j == json{{"block_m", 128}, {"stages", 3}});
  CHECK(tiling_from_json(kKnobs, j, "t").value() == t);
  CHECK(has(tiling_from_json(kKnobs, json{{"block_m", 128}}, "t").error(), "exactly the 2 knobs"));
  CHECK(has(tiling_from_json(kKnobs, json{{"block_m", 128}, {"warps", 4}}, "t").error(), "needs the knob 'stages'"));
  CHECK(has(tiling_from_json(kKnobs, json{{"block_m", -1}, {"stages", 2}}, "t").error(), "t.block_m"));
  CHECK(has(tiling_from_json(kKnobs, json{{"block_m", 4294967424ull}, {"stages", 2}}, "t").error(), "t.block_m"));
  CHECK(!tiling_from_json(kKnobs, json{{"block_m", 1.5}, {"stages", 2}}, "t").ok());
}
