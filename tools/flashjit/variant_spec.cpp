#include "variant_spec.hpp"

#include <charconv>
#include <utility>

#include "base/printable.hpp"
#include "json_input.hpp"

namespace flashjit::tools {
namespace {

Error bad(const std::string& where, const std::string& rule) { return Error(Code::invalid_argument, where + ": " + rule); }

// Fills dtype, math, dims, mask and the widest vec (or `vec`), then checks the whole.
Result<VariantSpec> make_spec(const DTypeChoice& dt, int dqk, int dv, Mask mask, bool gqa, bool lse, int vec,
                              std::optional<Tiling> tiling, std::string origin) {
  VariantSpec v;
  Semantics& s = v.semantics;
  s.dtype = dt.dtype;
  s.fp32_math = dt.fp32_math;
  s.head_dim_qk = dqk;
  s.head_dim_v = dv;
  s.mask = mask;
  s.gqa = gqa;
  s.write_lse = lse;
  s.vec = vec ? vec : widest_vec(dt.dtype, dqk, dv);
  v.tiling = tiling;
  v.origin = std::move(origin);
  if (auto st = s.check(); !st.ok()) return bad(v.origin, st.error().message());
  return v;
}

Status check_head_dim(int d, const std::string& option) {
  if (d < 1 || d > kMaxHeadDim)
    return bad(option, "must be in [1, " + std::to_string(kMaxHeadDim) + "], got " + std::to_string(d));
  return {};
}

}  // namespace

Result<DTypeChoice> parse_dtype(const std::string& text, const std::string& option) {
  if (text == "f16") return DTypeChoice{DType::f16, Fp32Math::exact};
  if (text == "bf16") return DTypeChoice{DType::bf16, Fp32Math::exact};
  if (text == "f32") return DTypeChoice{DType::f32, Fp32Math::exact};
  if (text == "tf32") return DTypeChoice{DType::f32, Fp32Math::tf32};
  return bad(option, "must be f16, bf16, f32 or tf32, got '" + printable(text) + "'");
}

Result<Mask> parse_mask(const std::string& text, const std::string& option) {
  if (text == "none") return Mask::none;
  if (text == "causal") return Mask::causal;
  return bad(option, "must be none or causal, got '" + printable(text) + "'");
}

Result<Tiling> parse_tiling(const std::string& text, const std::string& option) {
  Tiling t;
  const char* p = text.data();
  const char* const end = p + text.size();
  // from_chars, not sscanf: it reports numbers too large for an int instead of leaving them undefined.
  const std::pair<char, int*> parts[] = {{'m', &t.block_m}, {'n', &t.block_n}, {'w', &t.warps}, {'s', &t.stages}};
  bool ok = true;
  for (const auto& [letter, field] : parts) {
    if (end - p < 2 || p[0] != letter || p[1] < '0' || p[1] > '9') {  // a letter, then digits (no sign)
      ok = false;
      break;
    }
    const auto r = std::from_chars(p + 1, end, *field);
    if (r.ec != std::errc()) {
      ok = false;
      break;
    }
    p = r.ptr;
  }
  // The canonical spelling only: no leading zeros or trailing text.
  if (!ok || p != end || t.name() != text)
    return bad(option, "must look like m128n64w4s2 (BLOCK_M, BLOCK_N, warps, stages), got '" + printable(text) + "'");
  return t;
}

int widest_vec(DType dtype, int head_dim_qk, int head_dim_v) {
  for (int v = dtype == DType::f32 ? 4 : 8; v > 1; v /= 2)
    if (head_dim_qk % v == 0 && head_dim_v % v == 0) return v;
  return 1;
}

const std::vector<VariantSet>& variant_sets() {
  static const std::vector<VariantSet> sets{
      {"default", "f16/bf16 x head dim {64,128} x {none,causal} (8 variants)"},
      {"prefill", "f16/bf16 x head dim {64,96,128,192,256} x {none,causal} x {MHA,GQA} (40 variants)"},
      {"all-dims", "f16/bf16/f32 x head dim {32,48,64,80,96,128,160,192,200,256} x {none,causal} (60 variants)"},
  };
  return sets;
}

Result<std::vector<VariantSpec>> variant_set(const std::string& name) {
  std::vector<DTypeChoice> dtypes{{DType::f16}, {DType::bf16}};
  std::vector<int> dims;
  std::vector<bool> gqa{false};
  if (name == "default") {
    dims = {64, 128};
  } else if (name == "prefill") {
    dims = {64, 96, 128, 192, 256};
    gqa = {false, true};
  } else if (name == "all-dims") {
    dtypes.push_back({DType::f32});
    dims = {32, 48, 64, 80, 96, 128, 160, 192, 200, 256};
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
          auto spec = make_spec(dt, d, d, m, g, false, 0, std::nullopt, "--set " + name);
          if (!spec.ok()) return std::move(spec).error();
          out.push_back(std::move(spec).value());
        }
  return out;
}

bool VariantFlags::any() const {
  return !dtypes.empty() || !head_dims.empty() || head_dim_v != 0 || !masks.empty() || gqa || lse ||
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
  std::optional<Tiling> tiling;
  if (!f.tiling.empty()) {
    auto t = parse_tiling(f.tiling, "--tiling");
    if (!t.ok()) return std::move(t).error();
    tiling = t.value();
  }
  std::vector<VariantSpec> out;
  for (const auto& dt : dtypes)
    for (int d : f.head_dims)
      for (Mask m : masks) {
        auto spec = make_spec(dt, d, f.head_dim_v ? f.head_dim_v : d, m, f.gqa, f.lse, f.vec, tiling,
                              f.vec ? "--vec" : "--dtype/--head-dim");
        if (!spec.ok()) return std::move(spec).error();
        out.push_back(std::move(spec).value());
      }
  return out;
}

Result<VariantSpec> variant_from_json(const nlohmann::json& o, const std::string& where,
                                      std::initializer_list<const char*> also_allowed) {
  if (!o.is_object()) return bad(where, "must be an object such as {\"dtype\": \"f16\", \"head_dim\": 128}");
  static const char* const fields[] = {"dtype", "head_dim", "head_dim_v", "mask", "gqa", "lse", "tiling", "vec"};
  for (const auto& [key, value] : o.items()) {
    bool known = false;
    for (const char* f : fields) known |= key == f;
    for (const char* f : also_allowed) known |= key == f;
    if (!known)
      return bad(where, "unknown field '" + printable(key) +
                            "' (known: dtype, head_dim, head_dim_v, mask, gqa, lse, tiling, vec)");
  }
  auto str = [&](const char* key, const char* dflt) -> Result<std::string> {
    if (!o.contains(key)) return std::string(dflt);
    if (!o[key].is_string()) return bad(where + "." + key, "must be a string");
    return o[key].get<std::string>();
  };
  // 0 when absent; otherwise in [lo, hi], checked before it becomes an int.
  auto integer = [&](const char* key, int lo, int hi) -> Result<int> {
    if (!o.contains(key)) return 0;
    auto v = json_integer(o[key], where + "." + key, lo, hi);
    if (!v.ok()) return std::move(v).error();
    return int(v.value());
  };
  auto boolean = [&](const char* key) -> Result<bool> {
    if (!o.contains(key)) return false;
    if (!o[key].is_boolean()) return bad(where + "." + key, "must be true or false");
    return o[key].get<bool>();
  };
#define FJ_GET(var, expr)          \
  auto var = (expr);               \
  if (!var.ok()) return std::move(var).error()
  FJ_GET(dtype_text, str("dtype", "f16"));
  FJ_GET(mask_text, str("mask", "none"));
  FJ_GET(tiling_text, str("tiling", ""));
  FJ_GET(dqk, integer("head_dim", 1, kMaxHeadDim));
  FJ_GET(dv, integer("head_dim_v", 1, kMaxHeadDim));
  FJ_GET(vec, integer("vec", 1, kMaxVec));
  FJ_GET(gqa, boolean("gqa"));
  FJ_GET(lse, boolean("lse"));
#undef FJ_GET
  if (!o.contains("head_dim")) return bad(where, "needs a head_dim");
  auto dt = parse_dtype(dtype_text.value(), where + ".dtype");
  if (!dt.ok()) return std::move(dt).error();
  auto mask = parse_mask(mask_text.value(), where + ".mask");
  if (!mask.ok()) return std::move(mask).error();
  std::optional<Tiling> tiling;
  if (!tiling_text->empty()) {
    auto t = parse_tiling(tiling_text.value(), where + ".tiling");
    if (!t.ok()) return std::move(t).error();
    tiling = t.value();
  }
  return make_spec(dt.value(), dqk.value(), dv.value() ? dv.value() : dqk.value(), mask.value(), gqa.value(),
                   lse.value(), vec.value(), tiling, where);
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
