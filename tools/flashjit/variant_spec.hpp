// What `flashjit warmup` and `flashjit tune` are asked for, before archs and families are
// applied: result-changing semantics plus an optional fixed family and tiling, from named sets,
// command-line flags or a JSON file. The semantics fields, their flags and their JSON keys all
// come from the one field list (flashjit/variant.hpp). Every parser names the argument (or file
// position) and the rule it broke.
#pragma once

#include <nlohmann/json.hpp>

#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "flashjit/catalog.hpp"
#include "flashjit/status.hpp"
#include "flashjit/variant.hpp"

namespace flashjit::tools {

struct VariantSpec {
  Semantics semantics;  // the forward call's; a backward kernel takes backward_semantics() of it
  std::string family;   // empty: every family of the pass that serves the semantics on an arch
  std::string tiling;   // empty: each family's default; else a tiling of `family` (or of the
                        // arch's first family), e.g. "m128n64w4s2"
  std::string origin;   // where it came from, for messages: "--set prefill", "v.json[2]"
  // The passes whose kernels it asks for: the forward's for inference, both for training.
  std::vector<Pass> passes{Pass::forward};
};

// forward, backward or both (warmup --pass).
Result<std::vector<Pass>> parse_passes(const std::string& text, const std::string& option);

struct DTypeChoice {
  DType dtype = DType::f16;
  Fp32Math fp32_math = Fp32Math::exact;
};

// f16, bf16, f32 (exact: 3xTF32) or tf32 (f32 data, TF32 math).
Result<DTypeChoice> parse_dtype(const std::string& text, const std::string& option);
// none or causal.
Result<Mask> parse_mask(const std::string& text, const std::string& option);
// The widest global access (elements) both head dims allow: what forward() picks for aligned,
// contiguous tensors, hence the variant worth having warm.
int widest_vec(DType dtype, int head_dim_qk, int head_dim_v);

// The command-line flag of a boolean semantics field: "--gqa", "--varlen", and "--lse" for
// write_lse (its established spelling).
std::string bool_field_flag(const SemanticsField& field);

// Named sets for --set. Each asks for its own passes: the training set for forward and backward.
struct VariantSet {
  const char* name;
  const char* description;
};
const std::vector<VariantSet>& variant_sets();
Result<std::vector<VariantSpec>> variant_set(const std::string& name);

// Explicit variants from flags: the cross product of dtypes x head dims x masks.
struct VariantFlags {
  std::vector<std::string> dtypes;  // default f16
  std::vector<int> head_dims;       // required when any of these flags is given
  int head_dim_v = 0;               // 0: each head dim
  std::vector<std::string> masks;   // default none
  std::map<std::string, bool> features;  // boolean semantics fields by name: gqa, write_lse, varlen, ...
  std::string family;               // empty: every family that serves each variant
  std::string tiling;               // empty: each family's default
  int vec = 0;                      // 0: widest_vec

  bool any() const;  // whether any explicit-variant flag was given
};
Result<std::vector<VariantSpec>> variants_from_flags(const VariantFlags& flags);

// Widest access a variant may ask for, in elements: 16 bytes of a 2-byte dtype (Semantics::check
// then applies each dtype's own limit).
inline constexpr int kMaxVec = 8;

// One variant object. Keys: every semantics field by name (dtype, head_dim_qk, head_dim_v, mask,
// gqa, write_lse, varlen, window, softcap, alibi, sinks, kv_lens, paged, vec, fp32_math), plus
// "head_dim" (both dims), "lse" (write_lse), dtype "tf32", "family" and "tiling". head_dim_v
// defaults to head_dim_qk, vec to widest_vec. Unknown keys are refused (they are typos) unless
// named in `also_allowed` (a workload's shape fields); integers are range-checked before
// narrowing. `where` names it in errors.
Result<VariantSpec> variant_from_json(const nlohmann::json& object, const std::string& where,
                                      std::initializer_list<const char*> also_allowed = {});
// A JSON list of variant objects, or {"variants": [...]}.
Result<std::vector<VariantSpec>> variants_from_json(const nlohmann::json& doc, const std::string& source);
// warmup --variants: the file is read and its nesting bounded before parsing (json_input.hpp).
Result<std::vector<VariantSpec>> variants_from_file(const std::string& path);

}  // namespace flashjit::tools
