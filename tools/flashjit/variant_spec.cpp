#include "variant_spec.hpp"

#include <utility>

#include "base/printable.hpp"
#include "base/variant_json.hpp"
#include "flashjit/flashjit.hpp"
#include "json_input.hpp"

namespace flashjit::tools {
namespace {

Error bad(const std::string& where, const std::string& rule) { return Error(Code::invalid_argument, where + ": " + rule); }

// Fills dtype, math, dims, mask and the widest vec (or `vec`), then checks the whole.
Result<VariantSpec> make_spec(const DTypeChoice& dt, int dqk, int dv, Mask mask,
                              const std::map<std::string, bool>& features, int vec, const std::string& family,
                              const std::string& tiling, std::string origin) {
  VariantSpec v;
  Semantics& s = v.semantics;
  s.dtype = dt.dtype;
  s.fp32_math = dt.fp32_math;
  s.head_dim_qk = dqk;
  s.head_dim_v = dv;
  s.mask = mask;
  s.visit([&](const SemanticsField& f, auto& value) {
    if constexpr (std::is_same_v<std::decay_t<decltype(value)>, bool>)
      if (auto it = features.find(f.name); it != features.end()) value = it->second;
  });
  s.vec = vec ? vec : widest_vec(dt.dtype, dqk, dv);
  v.family = family;
  v.tiling = tiling;
  v.origin = std::move(origin);
  if (auto st = s.check(); !st.ok()) return bad(v.origin, st.error().message());
  return v;
}

Status check_head_dim(std::int64_t d, const std::string& option) {
  if (d < 1 || d > kMaxHeadDim)
    return bad(option, "must be in [1, " + std::to_string(kMaxHeadDim) + "], got " + std::to_string(d));
  return {};
}

// Keys of a JSON variant that are the tool's, not semantics fields.
constexpr const char* kToolKeys[] = {"head_dim", "lse", "family", "tiling"};

// A fixed tiling must be one of the named family's (or, with none named, of the family whose
// knobs it spells).
Status check_tiling_text(const std::string& tiling, const std::string& family, const std::string& where) {
  if (tiling.empty()) return {};
  if (auto t = parse_tiling(family, tiling); !t.ok()) return bad(where, t.error().message());
  return {};
}

std::string known_keys() {
  std::string known;
  Semantics{}.visit([&](const SemanticsField& f, const auto&) { known += (known.empty() ? "" : ", ") + std::string(f.name); });
  for (const char* k : kToolKeys) known += std::string(", ") + k;
  return known;
}

}  // namespace

Result<DTypeChoice> parse_dtype(const std::string& text, const std::string& option) {
  if (text == "f16") return DTypeChoice{DType::f16, Fp32Math::exact};
  if (text == "bf16") return DTypeChoice{DType::bf16, Fp32Math::exact};
  if (text == "f32") return DTypeChoice{DType::f32, Fp32Math::exact};
  if (text == "tf32") return DTypeChoice{DType::f32, Fp32Math::tf32};
  return bad(option, "must be f16, bf16, f32 or tf32, got '" + printable(text) + "'");
}

Result<std::vector<Pass>> parse_passes(const std::string& text, const std::string& option) {
  if (text == "forward") return std::vector<Pass>{Pass::forward};
  if (text == "backward") return std::vector<Pass>{Pass::backward};
  if (text == "both") return std::vector<Pass>{Pass::forward, Pass::backward};
  return bad(option, "must be forward, backward or both, got '" + printable(text) + "'");
}

Result<Mask> parse_mask(const std::string& text, const std::string& option) {
  if (text == "none") return Mask::none;
  if (text == "causal") return Mask::causal;
  return bad(option, "must be none or causal, got '" + printable(text) + "'");
}

int widest_vec(DType dtype, int head_dim_qk, int head_dim_v) {
  for (int v = dtype == DType::f32 ? 4 : 8; v > 1; v /= 2)
    if (head_dim_qk % v == 0 && head_dim_v % v == 0) return v;
  return 1;
}

std::string bool_field_flag(const SemanticsField& field) {
  std::string name = field.name;
  if (name == "write_lse") return "--lse";
  for (char& c : name)
    if (c == '_') c = '-';
  return "--" + name;
}

const std::vector<VariantSet>& variant_sets() {
  static const std::vector<VariantSet> sets{
      {"default", "f16/bf16 x head dim {64,128} x {none,causal} (8 variants)"},
      {"prefill", "f16/bf16 x head dim {64,96,128,192,256} x {none,causal} x {MHA,GQA} (40 variants)"},
      {"all-dims", "f16/bf16/f32 x head dim {32,48,64,80,96,128,160,192,200,256} x {none,causal} (60 variants)"},
      {"training", "f16/bf16 x head dim {64,96,128,256} x {none,causal} x {MHA,GQA}, forward with the LSE and "
                   "backward (32 variants, both passes unless --pass says otherwise)"},
  };
  return sets;
}

Result<std::vector<VariantSpec>> variant_set(const std::string& name) {
  std::vector<DTypeChoice> dtypes{{DType::f16}, {DType::bf16}};
  std::vector<int> dims;
  std::vector<bool> gqa{false};
  bool lse = false;
  std::vector<Pass> passes{Pass::forward};
  if (name == "default") {
    dims = {64, 128};
  } else if (name == "prefill") {
    dims = {64, 96, 128, 192, 256};
    gqa = {false, true};
  } else if (name == "all-dims") {
    dtypes.push_back({DType::f32});
    dims = {32, 48, 64, 80, 96, 128, 160, 192, 200, 256};
  } else if (name == "training") {
    // Common head dims the backward serves (16-bit types; 256, FlashAttention-2's widest, adds a
    // third to the set's compile time: its forward and backward kernels compile as fast as 128's,
    // 7 s a variant on sm_90a here); the forward of a training step writes the LSE that its
    // backward reads.
    dims = {64, 96, 128, 256};
    gqa = {false, true};
    lse = true;
    passes = {Pass::forward, Pass::backward};
  } else {
    std::string names;
    for (const auto& s : variant_sets()) names += (names.empty() ? "" : ", ") + std::string(s.name);
    return bad("--set", "must be one of " + names + ", got '" + printable(name) + "'");
  }
  std::vector<VariantSpec> out;
  for (const auto& dt : dtypes)
    for (int d : dims)
      for (Mask m : {Mask::none, Mask::causal})
        for (bool g : gqa) {
          auto spec = make_spec(dt, d, d, m, {{"gqa", g}, {"write_lse", lse}}, 0, "", "", "--set " + name);
          if (!spec.ok()) return std::move(spec).error();
          spec->passes = passes;
          out.push_back(std::move(spec).value());
        }
  return out;
}

bool VariantFlags::any() const {
  bool feature = false;
  for (const auto& [name, on] : features) feature |= on;
  return !dtypes.empty() || !head_dims.empty() || head_dim_v != 0 || !masks.empty() || feature || !family.empty() ||
         !tiling.empty() || vec != 0;
}

Result<std::vector<VariantSpec>> variants_from_flags(const VariantFlags& f) {
  std::vector<DTypeChoice> dtypes;
  for (const auto& t : f.dtypes.empty() ? std::vector<std::string>{"f16"} : f.dtypes) {
    auto d = parse_dtype(t, "--dtype");
    if (!d.ok()) return std::move(d).error();
    dtypes.push_back(d.value());
  }
  if (f.head_dims.empty()) return bad("--head-dim", "is required when a variant is given by flags (e.g. --head-dim 128)");
  for (int d : f.head_dims) FJ_TRY(check_head_dim(d, "--head-dim"));
  if (f.head_dim_v != 0) FJ_TRY(check_head_dim(f.head_dim_v, "--head-dim-v"));
  std::vector<Mask> masks;
  for (const auto& t : f.masks.empty() ? std::vector<std::string>{"none"} : f.masks) {
    auto m = parse_mask(t, "--mask");
    if (!m.ok()) return std::move(m).error();
    masks.push_back(m.value());
  }
  FJ_TRY(check_tiling_text(f.tiling, f.family, "--tiling"));
  std::vector<VariantSpec> out;
  for (const auto& dt : dtypes)
    for (int d : f.head_dims)
      for (Mask m : masks) {
        auto spec = make_spec(dt, d, f.head_dim_v ? f.head_dim_v : d, m, f.features, f.vec, f.family, f.tiling,
                              f.vec ? "--vec" : "--dtype/--head-dim");
        if (!spec.ok()) return std::move(spec).error();
        out.push_back(std::move(spec).value());
      }
  return out;
}

Result<VariantSpec> variant_from_json(const nlohmann::json& o, const std::string& where,
                                      std::initializer_list<const char*> also_allowed) {
  if (!o.is_object()) return bad(where, "must be an object such as {\"dtype\": \"f16\", \"head_dim\": 128}");
  for (const auto& item : o.items()) {
    bool known = false;
    for (const char* k : kToolKeys) known |= item.key() == k;
    for (const char* k : also_allowed) known |= item.key() == k;
    Semantics{}.visit([&](const SemanticsField& f, const auto&) { known |= item.key() == f.name; });
    if (!known) return bad(where, "unknown field '" + printable(item.key()) + "' (known: " + known_keys() + ")");
  }
  // The tool's own keys first; what is left is semantics fields, read by the generated parser.
  nlohmann::json fields = nlohmann::json::object();
  for (const auto& item : o.items()) {
    bool extra = false;
    for (const char* k : also_allowed) extra |= item.key() == k;
    if (!extra) fields[item.key()] = item.value();
  }
  VariantSpec spec;
  spec.origin = where;
  for (const char* key : {"family", "tiling"}) {
    if (!fields.contains(key)) continue;
    if (!fields[key].is_string()) return bad(where + "." + key, "must be a string");
    (std::string(key) == "family" ? spec.family : spec.tiling) = fields[key].get<std::string>();
    fields.erase(key);
  }
  if (fields.contains("lse")) {
    if (fields.contains("write_lse")) return bad(where, "give lse or write_lse, not both");
    fields["write_lse"] = fields["lse"];
    fields.erase("lse");
  }
  // Integers the tool defaults from others are range-checked here, before anything narrows them.
  for (const char* key : {"head_dim", "head_dim_qk", "head_dim_v"})
    if (fields.contains(key)) FJ_TRY(json_integer(fields[key], where + "." + key, 1, kMaxHeadDim));
  if (fields.contains("vec")) FJ_TRY(json_integer(fields["vec"], where + ".vec", 1, kMaxVec));
  if (fields.contains("head_dim")) {
    if (fields.contains("head_dim_qk")) return bad(where, "give head_dim or head_dim_qk, not both");
    fields["head_dim_qk"] = fields["head_dim"];
    fields.erase("head_dim");
  } else if (!fields.contains("head_dim_qk")) {
    return bad(where, "needs a head_dim");
  }
  if (fields.contains("dtype") && fields["dtype"] == "tf32") {
    if (fields.contains("fp32_math")) return bad(where, "dtype tf32 already sets fp32_math");
    fields["dtype"] = "f32";
    fields["fp32_math"] = "tf32";
  }
  // Defaults that depend on other fields: head_dim_v follows head_dim_qk, vec the widest.
  if (!fields.contains("head_dim_v")) fields["head_dim_v"] = fields["head_dim_qk"];
  const bool vec_given = fields.contains("vec");
  if (!vec_given) fields["vec"] = 1;  // placeholder that always checks; replaced below
  auto sem = semantics_from_json(fields, where);
  if (!sem.ok()) return std::move(sem).error();
  FJ_TRY(check_tiling_text(spec.tiling, spec.family, where + ".tiling"));
  spec.semantics = sem.value();
  if (!vec_given) spec.semantics.vec = widest_vec(spec.semantics.dtype, spec.semantics.head_dim_qk, spec.semantics.head_dim_v);
  if (auto st = spec.semantics.check(); !st.ok()) return bad(where, st.error().message());
  return spec;
}

Result<std::vector<VariantSpec>> variants_from_json(const nlohmann::json& doc, const std::string& source) {
  const nlohmann::json* list = &doc;
  if (doc.is_object() && doc.contains("variants")) list = &doc["variants"];
  if (!list->is_array())
    return bad(source, "must hold a JSON list of variant objects (or {\"variants\": [...]})");
  std::vector<VariantSpec> out;
  for (std::size_t i = 0; i < list->size(); ++i) {
    auto spec = variant_from_json((*list)[i], source + "[" + std::to_string(i) + "]");
    if (!spec.ok()) return std::move(spec).error();
    out.push_back(std::move(spec).value());
  }
  return out;
}

Result<std::vector<VariantSpec>> variants_from_file(const std::string& path) {
  auto doc = read_json_file(path, "--variants");
  if (!doc.ok()) return std::move(doc).error();
  return variants_from_json(doc.value(), printable(path));
}

}  // namespace flashjit::tools
