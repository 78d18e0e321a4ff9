#include "flashjit/variant.hpp"

#include <cstdio>
#include <functional>

#include "base/content_hash.hpp"
#include "base/printable.hpp"

namespace flashjit {

// Kernels compare these numbers (templates/*/config.cuh): keep them stable.
static_assert(int(DType::f16) == 0 && int(DType::bf16) == 1 && int(DType::f32) == 2);
static_assert(int(Mask::none) == 0 && int(Mask::causal) == 1);
static_assert(int(Fp32Math::exact) == 0 && int(Fp32Math::tf32) == 1);

const char* dtype_name(DType d) {
  switch (d) {
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f32: return "f32";
  }
  return "?";
}

std::size_t dtype_size(DType d) { return d == DType::f32 ? 4 : 2; }

const char* mask_name(Mask m) { return m == Mask::causal ? "causal" : "none"; }

const char* fp32_math_name(Fp32Math m) { return m == Fp32Math::tf32 ? "tf32" : "exact"; }

namespace {

// The readable form of one field's value, by type: enums by name, ints after their tag, bools
// as their tag.
std::string name_part(const SemanticsField&, DType v) { return dtype_name(v); }
std::string name_part(const SemanticsField&, Mask v) { return mask_name(v); }
std::string name_part(const SemanticsField&, Fp32Math v) { return fp32_math_name(v); }
std::string name_part(const SemanticsField& f, int v) { return f.tag + std::to_string(v); }
std::string name_part(const SemanticsField& f, bool) { return f.tag; }

// Every field as an integer: what hashes see.
template <class T> std::int64_t as_int(T v) { return static_cast<std::int64_t>(v); }

}  // namespace

bool Semantics::operator==(const Semantics& o) const {
  bool same = true;
#define FJ_SEMANTICS_EQ(type, field, def, constant, tag, style, why) same = same && field == o.field;
  FLASHJIT_SEMANTICS_FIELDS(FJ_SEMANTICS_EQ)
#undef FJ_SEMANTICS_EQ
  return same;
}

std::string Semantics::name() const {
  std::string n;
  const auto append = [&](const std::string& part) { n += (n.empty() ? "" : "-") + part; };
#define FJ_SEMANTICS_NAME(type, field, def, constant, tag, style, why)                      \
  if (NameStyle::style == NameStyle::always || field != type(def))                           \
    append(name_part(SemanticsField{#field, constant, tag, NameStyle::style, why}, field));
  FLASHJIT_SEMANTICS_FIELDS(FJ_SEMANTICS_NAME)
#undef FJ_SEMANTICS_NAME
  return n;
}

std::size_t Semantics::fast_hash() const {
  // Fibonacci hashing over each field in turn; collisions only cost an equality check.
  constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;
  std::uint64_t h = 0;
  visit([&](const SemanticsField&, const auto& v) { h = (h ^ std::uint64_t(as_int(v))) * kGolden + (h >> 29); });
  return std::size_t(h);
}

Status Semantics::check() const {
  auto bad = [](std::string msg) { return Error(Code::invalid_argument, std::move(msg)); };
  if (dtype != DType::f16 && dtype != DType::bf16 && dtype != DType::f32)
    return bad("dtype must be f16, bf16 or f32, got " + std::to_string(int(dtype)));
  if (fp32_math != Fp32Math::exact && fp32_math != Fp32Math::tf32)
    return bad("fp32_math must be exact or tf32, got " + std::to_string(int(fp32_math)));
  if (fp32_math == Fp32Math::tf32 && dtype != DType::f32)
    return bad("fp32_math tf32 applies to f32 inputs only, got " + std::string(dtype_name(dtype)));
  if (mask != Mask::none && mask != Mask::causal) return bad("mask must be none or causal, got " + std::to_string(int(mask)));
  if (head_dim_qk < 1 || head_dim_qk > kMaxHeadDim)
    return bad("head_dim_qk must be in [1, " + std::to_string(kMaxHeadDim) + "], got " + std::to_string(head_dim_qk));
  if (head_dim_v < 1 || head_dim_v > kMaxHeadDim)
    return bad("head_dim_v must be in [1, " + std::to_string(kMaxHeadDim) + "], got " + std::to_string(head_dim_v));
  const int max_vec = dtype == DType::f32 ? 4 : 8;  // 16-byte accesses at most
  if (vec != 1 && vec != 2 && vec != 4 && vec != 8)
    return bad("vec must be 1, 2, 4 or 8, got " + std::to_string(vec));
  if (vec > max_vec)
    return bad("vec " + std::to_string(vec) + " exceeds 16 bytes for " + dtype_name(dtype));
  if (head_dim_qk % vec || head_dim_v % vec)
    return bad("vec " + std::to_string(vec) + " must divide both head dims");
  return {};
}

int KnobTable::index(std::string_view knob_name) const {
  for (std::size_t i = 0; i < knobs.size(); ++i)
    if (knob_name == knobs[i].name) return int(i);
  return -1;
}

Tiling::Tiling(const KnobTable& t, std::initializer_list<int> v) : table(&t) {
  std::size_t i = 0;
  for (int x : v)
    if (i < values.size()) values[i++] = x;
}

bool Tiling::operator==(const Tiling& o) const {
  if (table != o.table) return false;
  for (int i = 0; i < size(); ++i)
    if (values[std::size_t(i)] != o.values[std::size_t(i)]) return false;
  return true;
}

namespace {
// Tags and values of a tiling's knobs, or of those the compiled code sees (`code_only`).
std::string tags_of(const Tiling& t, bool code_only) {
  std::string n;
  for (int i = 0; i < t.size(); ++i) {
    const Knob& k = t.table->knobs[std::size_t(i)];
    if (!code_only || k.constant) n += k.tag + std::to_string(t.values[std::size_t(i)]);
  }
  return n;
}
}  // namespace

std::string Tiling::name() const { return tags_of(*this, false); }
std::string Tiling::code_name() const { return tags_of(*this, true); }

std::string KnobTable::form() const {
  std::string f;
  for (const Knob& k : knobs) f += std::string(k.tag) + "<" + k.name + ">";
  return f;
}

Result<Tiling> Tiling::parse(const KnobTable& table, std::string_view text) {
  // Every refusal shows the family's form and the text as given; a number the form cannot take
  // is also named with its knob, digits as typed.
  const auto bad = [&](const std::string& why = "") {
    return Error(Code::invalid_argument, std::string("a ") + table.family + " tiling looks like " + table.form() +
                                             ", got '" + printable(text) + "'" + (why.empty() ? "" : ": " + why));
  };
  // At most 6 digits: knob values are tile sizes and counts, far below a million.
  constexpr std::size_t kMaxDigits = 6;
  Tiling t;
  t.table = &table;
  std::size_t pos = 0;
  for (std::size_t i = 0; i < table.knobs.size(); ++i) {
    const Knob& knob = table.knobs[i];
    const std::string_view tag = knob.tag;
    if (text.substr(pos, tag.size()) != tag) return bad();
    pos += tag.size();
    const std::size_t start = pos;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') ++pos;
    const std::string_view digits = text.substr(start, pos - start);
    if (digits.empty()) return bad();
    if (digits.size() > kMaxDigits)
      return bad(std::string(knob.name) + " " + printable(digits) + " has more than " + std::to_string(kMaxDigits) + " digits");
    if (digits.size() > 1 && digits[0] == '0') return bad(std::string(knob.name) + " " + std::string(digits) + " has a leading zero");
    int v = 0;
    for (char c : digits) v = v * 10 + (c - '0');
    t.values[i] = v;
  }
  if (pos != text.size()) return bad();  // trailing text
  return t;
}

bool KernelVariant::operator==(const KernelVariant& o) const {
  return family == o.family && semantics == o.semantics && tiling == o.tiling;
}

std::string KernelVariant::name() const { return family + "-" + semantics.name() + "-" + tiling.name(); }
std::string KernelVariant::code_name() const { return family + "-" + semantics.name() + "-" + tiling.code_name(); }

std::string KernelVariant::content_hash() const {
  ContentHasher h;
  h.field("family", family);
  semantics.visit([&](const SemanticsField& f, const auto& v) { h.field(f.name, as_int(v)); });
  for (int i = 0; i < tiling.size(); ++i)
    if (tiling.table->knobs[std::size_t(i)].constant) h.field(tiling.table->knobs[std::size_t(i)].name, tiling[i]);
  return h.hex();
}

std::size_t KernelVariant::fast_hash() const {
  constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;
  std::uint64_t x = std::hash<std::string>{}(family) ^ semantics.fast_hash();
  for (int i = 0; i < tiling.size(); ++i) x = (x ^ std::uint64_t(tiling[i])) * kGolden + (x >> 29);
  return std::size_t(x);
}

Result<Arch> Arch::parse(const std::string& text) {
  Arch a;
  const auto bad = [&] {
    return Error(Code::invalid_argument,
                 "arch must look like sm_80, sm_86, sm_89, sm_90 or sm_90a, got '" + printable(text) + "'");
  };
  if (text.size() < 5 || text.compare(0, 3, "sm_") != 0) return bad();
  std::size_t i = 3, digits = 0;
  int num = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9' && digits < 4) num = num * 10 + (text[i++] - '0'), ++digits;
  if (digits < 2) return bad();
  if (i < text.size()) {
    if (i + 1 != text.size() || (text[i] != 'a' && text[i] != 'f')) return bad();
    a.suffix = text[i];
  }
  a.major = num / 10;
  a.minor = num % 10;
  return a;
}

std::string Arch::name() const {
  std::string n = "sm_" + std::to_string(major) + std::to_string(minor);
  if (suffix) n += suffix;
  return n;
}

}  // namespace flashjit
