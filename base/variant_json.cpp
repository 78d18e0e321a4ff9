#include "base/variant_json.hpp"

#include <limits>

#include "base/printable.hpp"

namespace flashjit {
namespace {

using json = nlohmann::json;

// Knob values are tile sizes and counts (0 for "automatic" where a knob allows it); anything
// past this is damage, and the bound keeps the narrowing to int exact.
constexpr std::int64_t kMaxKnobValue = std::int64_t(1) << 20;

Error bad(const std::string& where, const std::string& rule) { return Error(Code::invalid_argument, where + ": " + rule); }

json value_json(DType v) { return dtype_name(v); }
json value_json(Mask v) { return mask_name(v); }
json value_json(Fp32Math v) { return fp32_math_name(v); }
json value_json(int v) { return v; }
json value_json(bool v) { return v; }

// One field from JSON, by type; an error names the key and the rule.
template <class Enum>
Status parse_enum(const json& j, const std::string& where, std::initializer_list<Enum> all, const char* (*name)(Enum),
                  Enum& out) {
  std::string choices;
  for (Enum e : all) choices += (choices.empty() ? "" : ", ") + std::string(name(e));
  if (j.is_string()) {
    for (Enum e : all)
      if (j.get_ref<const std::string&>() == name(e)) return out = e, Status{};
    return bad(where, "must be one of " + choices + ", got '" + printable(j.get_ref<const std::string&>()) + "'");
  }
  return bad(where, "must be one of " + choices);
}
Status parse_value(const json& j, const std::string& where, DType& out) {
  return parse_enum(j, where, {DType::f16, DType::bf16, DType::f32}, dtype_name, out);
}
Status parse_value(const json& j, const std::string& where, Mask& out) {
  return parse_enum(j, where, {Mask::none, Mask::causal}, mask_name, out);
}
Status parse_value(const json& j, const std::string& where, Fp32Math& out) {
  return parse_enum(j, where, {Fp32Math::exact, Fp32Math::tf32}, fp32_math_name, out);
}
Status parse_value(const json& j, const std::string& where, int& out) {
  if (!j.is_number_integer()) return bad(where, "must be an integer");
  // Range first: get<int>() of 4294967360 would silently give 64.
  if (j.is_number_unsigned() ? j.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<int>::max())
                             : (j.get<std::int64_t>() < std::numeric_limits<int>::min() ||
                                j.get<std::int64_t>() > std::numeric_limits<int>::max()))
    return bad(where, "is out of range");
  out = int(j.get<std::int64_t>());
  return {};
}
Status parse_value(const json& j, const std::string& where, bool& out) {
  if (!j.is_boolean()) return bad(where, "must be true or false");
  out = j.get<bool>();
  return {};
}

}  // namespace

json to_json(const Semantics& s) {
  json j = json::object();
  s.visit([&](const SemanticsField& f, const auto& v) { j[f.name] = value_json(v); });
  return j;
}

Result<Semantics> semantics_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) return bad(where, "must be an object of semantics fields");
  Semantics s;
  std::string known;
  s.visit([&](const SemanticsField& f, const auto&) { known += (known.empty() ? "" : ", ") + std::string(f.name); });
  for (const auto& item : j.items()) {
    bool found = false;
    s.visit([&](const SemanticsField& f, const auto&) { found |= item.key() == f.name; });
    if (!found) return bad(where, "unknown field '" + printable(item.key()) + "' (known: " + known + ")");
  }
  Status st;
  s.visit([&](const SemanticsField& f, auto& v) {
    if (st.ok() && j.contains(f.name)) st = parse_value(j[f.name], where + "." + f.name, v);
  });
  FJ_TRY(st);
  if (auto c = s.check(); !c.ok()) return bad(where, c.error().message());
  return s;
}

json to_json(const Tiling& t) {
  json j = json::object();
  for (int i = 0; i < t.size(); ++i) j[t.table->knobs[std::size_t(i)].name] = t[i];
  return j;
}

Result<Tiling> tiling_from_json(const KnobTable& table, const json& j, const std::string& where) {
  if (!j.is_object()) return bad(where, "must be an object of " + std::string(table.family) + " knobs");
  if (j.size() != table.knobs.size())
    return bad(where, "must have exactly the " + std::to_string(table.knobs.size()) + " knobs of " + table.family);
  Tiling t;
  t.table = &table;
  for (std::size_t i = 0; i < table.knobs.size(); ++i) {
    const char* name = table.knobs[i].name;
    if (!j.contains(name)) return bad(where, std::string("needs the knob '") + name + "'");
    const json& v = j[name];
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > kMaxKnobValue ||
        (v.is_number_unsigned() && v.get<std::uint64_t>() > std::uint64_t(kMaxKnobValue)))
      return bad(where + "." + name, "must be an integer in [0, " + std::to_string(kMaxKnobValue) + "]");
    t.values[i] = int(v.get<std::int64_t>());
  }
  return t;
}

}  // namespace flashjit
