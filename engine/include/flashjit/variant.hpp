// A kernel variant is two values kept apart:
//   Semantics: what changes results (dtype, head dims, masks, GQA, varlen, ...) plus the access
//              width the problem's alignment dictates; the autotuner never varies it.
//   Tiling:    what only changes speed (tile sizes, warps, stages, ...), with knobs each kernel
//              family declares for itself; the autotuner's space.
// Both are declared once (the field list below, each family's knob table); the same values name
// the kernel, render its compile-time constants, key every cache and read and write JSON.
#pragma once

#include <array>
#include <initializer_list>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flashjit/device_arrays.h"
#include "flashjit/scalars.h"
#include "flashjit/status.hpp"

namespace flashjit {

enum class DType : int { f16 = 0, bf16 = 1, f32 = 2 };
enum class Mask : int { none = 0, causal = 1 };
enum class Fp32Math : int { exact = 0, tf32 = 1 };

const char* dtype_name(DType);
std::size_t dtype_size(DType);
const char* mask_name(Mask);
const char* fp32_math_name(Fp32Math);

// Largest head dim a variant may have (two 128-wide halves of shared memory on sm_80).
constexpr int kMaxHeadDim = 256;

// How a semantics field shows in a variant's readable name.
enum class NameStyle {
  always,  // always: "f16", "dqk128"
  if_set,  // only when not the default: "causal", "lse", "tf32"
};

// A per-call device array's semantics flag: set when the pointer is given (flashjit/device_arrays.h).
#define FJ_SEMANTICS_FROM_DEVICE_ARRAY(X, elem, field, extent, constant, tag, why) \
  X(bool, field, false, constant, tag, if_set, why)
// A per-call scalar's semantics flag: set when the scalar is given (flashjit/scalars.h).
#define FJ_SEMANTICS_FROM_SCALAR(X, type, field, rule, constant, tag, typical, backward, params, why) \
  X(bool, field, false, constant, tag, if_set, why)

// Every field that changes results, declared once:
//   X(type, field, default, kernel constant, name tag, name style, why)
// Equality, the readable name, the content hash, the rendered constants and JSON all come from
// this list (base/variant.cpp, base/variant_json.cpp); a new field is one new row.
#define FLASHJIT_SEMANTICS_FIELDS(X)                                                                   \
  X(DType, dtype, DType::f16, "kDtype", "", always, "Q, K, V and O share it; accumulation is fp32")     \
  X(Fp32Math, fp32_math, Fp32Math::exact, "kFp32Math", "", if_set,                                     \
    "fp32 inputs only: exact (3xTF32 split) or tf32")                                                  \
  X(int, head_dim_qk, 128, "kHeadDimQK", "dqk", always, "head dim of Q and K")                          \
  X(int, head_dim_v, 128, "kHeadDimV", "dv", always, "head dim of V and O")                             \
  X(Mask, mask, Mask::none, "kMask", "", if_set, "causal aligns to the bottom right when Sq != Sk")     \
  X(bool, gqa, false, "kGqa", "gqa", if_set, "Hq != Hkv: query heads share key/value heads")            \
  X(bool, write_lse, false, "kWriteLse", "lse", if_set, "also write the fp32 natural-log LSE per row")  \
  X(bool, varlen, false, "kVarlen", "varlen", if_set,                                                  \
    "ragged batch packed along the sequence axis, bounded by cu_seqlens on the device")                \
  X(bool, window, false, "kWindow", "window", if_set,                                                  \
    "sliding window: query i sees keys [i + Sk - Sq - left, i + Sk - Sq + right]")                     \
  FLASHJIT_SCALARS(FJ_SEMANTICS_FROM_SCALAR, X)                                                        \
  X(bool, alibi, false, "kAlibi", "alibi", if_set, "adds -slope * |i + Sk - Sq - j| per head")          \
  FLASHJIT_DEVICE_ARRAYS(FJ_SEMANTICS_FROM_DEVICE_ARRAY, X)                                            \
  X(bool, paged, false, "kPaged", "paged", if_set, "K and V in page pools addressed by a block table")  \
  X(bool, deterministic, false, "kDeterministic", "det", if_set,                                        \
    "backward: dQ summed over K/V blocks in a fixed order, the same bits every call")                  \
  X(int, vec, 8, "kVec", "vec", always, "elements per global access (1, 2, 4, 8); 1 allows a strided head dim")

// Describes one semantics field to generic code (names, hashes, JSON).
struct SemanticsField {
  const char* name;      // "head_dim_qk": the C++ member and the JSON key
  const char* constant;  // "kHeadDimQK": the kernel's compile-time constant
  const char* tag;       // "dqk": prefix in readable names ("" for enums, which show their name)
  NameStyle style;
  const char* why;
};

struct Semantics {
#define FJ_SEMANTICS_MEMBER(type, field, def, constant, tag, style, why) type field = def;
  FLASHJIT_SEMANTICS_FIELDS(FJ_SEMANTICS_MEMBER)
#undef FJ_SEMANTICS_MEMBER

  bool operator==(const Semantics& o) const;
  bool operator!=(const Semantics& o) const { return !(*this == o); }
  std::string name() const;       // readable, e.g. "f16-dqk128-dv128-causal-lse-vec8"
  Status check() const;           // ranges and combinations a kernel can be built for
  std::size_t fast_hash() const;  // for in-memory maps on the dispatch path

  // Calls f(const SemanticsField&, value) for every field, in declaration order; the mutable
  // overload passes each field by reference (parsers).
  template <class F> void visit(F&& f) const;
  template <class F> void visit(F&& f);
};

template <class F> void Semantics::visit(F&& f) const {
#define FJ_SEMANTICS_VISIT(type, field, def, constant, tag, style, why) \
  f(SemanticsField{#field, constant, tag, NameStyle::style, why}, field);
  FLASHJIT_SEMANTICS_FIELDS(FJ_SEMANTICS_VISIT)
}
template <class F> void Semantics::visit(F&& f) {
  FLASHJIT_SEMANTICS_FIELDS(FJ_SEMANTICS_VISIT)
#undef FJ_SEMANTICS_VISIT
}

// One speed-only knob of a kernel family.
struct Knob {
  const char* name;      // "block_m": the JSON key of tuning results
  const char* tag;       // "m": its prefix in names such as m128n64w4s2 (letters only)
  const char* constant;  // "kBlockM": the kernel's compile-time constant; nullptr for a
                         // plan-only knob (a split count): it shapes the launch, not the code,
                         // so tilings that differ only there share one compiled kernel
  const char* why;       // what it trades
};

// A family's speed-only knobs, declared once in the family's own file, in the order its
// tilings list them.
struct KnobTable {
  const char* family;
  std::vector<Knob> knobs;
  int index(std::string_view knob_name) const;  // -1 when absent
  std::string form() const;                     // what its tilings look like: "m<block_m>n<block_n>w<warps>s<stages>"
};

// Values of a family's knobs, in its table's order. A default-constructed Tiling has no table.
struct Tiling {
  static constexpr int kMaxKnobs = 8;
  const KnobTable* table = nullptr;
  std::array<int, kMaxKnobs> values{};

  Tiling() = default;
  Tiling(const KnobTable& t, std::initializer_list<int> v);

  int size() const { return table ? int(table->knobs.size()) : 0; }
  int operator[](int i) const { return values[std::size_t(i)]; }
  int& operator[](int i) { return values[std::size_t(i)]; }
  bool operator==(const Tiling& o) const;
  bool operator!=(const Tiling& o) const { return !(*this == o); }
  std::string name() const;  // tags and values: "m128n64w4s2"
  std::string code_name() const;  // name() without plan-only knobs: what the compiled code depends on
  // Reads a name() back ("m128n64w4s2"): every knob of `table`, in order, exactly once.
  static Result<Tiling> parse(const KnobTable& table, std::string_view text);
};

struct KernelVariant {
  std::string family;  // kernel family, e.g. "fa2_sm80"
  Semantics semantics;
  Tiling tiling;

  bool operator==(const KernelVariant& o) const;
  bool operator!=(const KernelVariant& o) const { return !(*this == o); }
  std::string name() const;          // family-semantics-tiling, safe as a file name
  std::string code_name() const;     // the same with the tiling's code_name(): the compiled kernel's
                                     // name, shared by tilings that differ only in plan-only knobs
  std::string content_hash() const;  // 32 hex digits over every field the compiled code depends on
                                     // (all but plan-only knobs)
  std::size_t fast_hash() const;     // for in-memory maps on the dispatch path
};

// Parses "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a" (and newer "sm_NNN[a|f]").
struct Arch {
  int major = 0;
  int minor = 0;
  char suffix = 0;  // 0, 'a' (arch-specific features such as wgmma) or 'f'

  static Result<Arch> parse(const std::string& text);
  std::string name() const;  // "sm_90a"
  int number() const { return major * 10 + minor; }
  bool operator==(const Arch& o) const { return major == o.major && minor == o.minor && suffix == o.suffix; }
};

}  // namespace flashjit
