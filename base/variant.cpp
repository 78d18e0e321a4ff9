#include "flashjit/variant.hpp"

#include <cstdio>
#include <functional>

#include "base/content_hash.hpp"
#include "base/printable.hpp"

namespace flashjit {

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

bool Semantics::operator==(const Semantics& o) const {
  return dtype == o.dtype && fp32_math == o.fp32_math && head_dim_qk == o.head_dim_qk &&
         head_dim_v == o.head_dim_v && mask == o.mask && gqa == o.gqa && write_lse == o.write_lse &&
         vec == o.vec;
}

std::string Semantics::name() const {
  std::string n = dtype_name(dtype);
  if (dtype == DType::f32) n += fp32_math == Fp32Math::tf32 ? "tf32" : "exact";
  n += "-d" + std::to_string(head_dim_qk);
  if (head_dim_v != head_dim_qk) n += "v" + std::to_string(head_dim_v);
  if (mask == Mask::causal) n += "-causal";
  if (gqa) n += "-gqa";
  if (write_lse) n += "-lse";
  n += "-v" + std::to_string(vec);
  return n;
}

Status Semantics::check() const {
  auto bad = [](std::string msg) { return Error(Code::invalid_argument, std::move(msg)); };
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

bool Tiling::operator==(const Tiling& o) const {
  return block_m == o.block_m && block_n == o.block_n && warps == o.warps && stages == o.stages;
}

std::string Tiling::name() const {
  return "m" + std::to_string(block_m) + "n" + std::to_string(block_n) + "w" + std::to_string(warps) +
         "s" + std::to_string(stages);
}

bool KernelVariant::operator==(const KernelVariant& o) const {
  return family == o.family && semantics == o.semantics && tiling == o.tiling;
}

std::string KernelVariant::name() const { return family + "-" + semantics.name() + "-" + tiling.name(); }

std::string KernelVariant::content_hash() const {
  ContentHasher h;
  h.field("family", family)
      .field("dtype", static_cast<int>(semantics.dtype))
      .field("fp32_math", static_cast<int>(semantics.fp32_math))
      .field("head_dim_qk", semantics.head_dim_qk)
      .field("head_dim_v", semantics.head_dim_v)
      .field("mask", static_cast<int>(semantics.mask))
      .field("gqa", semantics.gqa)
      .field("write_lse", semantics.write_lse)
      .field("vec", semantics.vec)
      .field("block_m", tiling.block_m)
      .field("block_n", tiling.block_n)
      .field("warps", tiling.warps)
      .field("stages", tiling.stages);
  return h.hex();
}

std::size_t KernelVariant::fast_hash() const {
  // Packs the small integer fields; collisions only cost an equality check.
  const Semantics& s = semantics;
  std::size_t x = std::hash<std::string>{}(family);
  const std::uint64_t a = (std::uint64_t(s.dtype) << 60) ^ (std::uint64_t(s.fp32_math) << 58) ^
                          (std::uint64_t(s.head_dim_qk) << 46) ^ (std::uint64_t(s.head_dim_v) << 34) ^
                          (std::uint64_t(s.mask) << 32) ^ (std::uint64_t(s.gqa) << 31) ^
                          (std::uint64_t(s.write_lse) << 30) ^ (std::uint64_t(s.vec) << 24) ^
                          (std::uint64_t(tiling.block_m) << 14) ^ (std::uint64_t(tiling.block_n) << 4) ^
                          (std::uint64_t(tiling.warps) << 1) ^ std::uint64_t(tiling.stages) * 0x9E3779B97F4A7C15ull;
  return x ^ (a + 0x9E3779B97F4A7C15ull + (x << 6) + (x >> 2));
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
