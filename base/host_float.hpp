// Host-side conversions between float and the 16-bit formats the kernels read and write.
#pragma once

#include <cstdint>
#include <cstring>

#include "flashjit/variant.hpp"

namespace flashjit {

inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  x += 0x7fffu + ((x >> 16) & 1u);                     // round to nearest even
  return std::uint16_t(x >> 16);
}

inline float bf16_to_float(std::uint16_t h) {
  const std::uint32_t x = std::uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

inline float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, x;
  if (exp == 0x1f) {
    x = sign | 0x7f800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do { ++e; mant <<= 1; } while (!(mant & 0x400u));
      x = sign | std::uint32_t(127 - 15 - e) << 23 | ((mant & 0x3ffu) << 13);
    }
  } else {
    x = sign | (exp + 112) << 23 | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

inline std::uint16_t float_to_f16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return std::uint16_t(sign | 0x7e00u);
  if (abs >= 0x477ff000u) return std::uint16_t(sign | 0x7c00u);  // overflow to inf
  if (abs < 0x38800000u) {                                         // subnormal or zero
    const int shift = 113 - int(abs >> 23);
    // Below 2^-25 (half the smallest subnormal) everything rounds to zero; returning here also keeps
    // the shifts below under 32 bits (a wider shift is undefined and produced NaN patterns).
    if (shift > 11) return std::uint16_t(sign);
    const std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    std::uint32_t h = mant >> (shift + 13);
    const std::uint32_t rem = mant & ((1u << (shift + 13)) - 1), half = 1u << (shift + 12);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return std::uint16_t(sign | h);
  }
  std::uint32_t h = ((abs - 0x38000000u) >> 13);
  const std::uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return std::uint16_t(sign | h);
}

// f rounded to tf32 (10 mantissa bits) as cvt.rna.tf32.f32 does: to nearest, ties away from
// zero; NaN and infinity as they are. What a tf32 product sees of an fp32 operand.
inline float round_to_tf32(float f) {
  constexpr std::uint32_t kDropped = 0x1fffu;  // the 13 mantissa bits tf32 lacks
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7f800000u) != 0x7f800000u) x = (x + (kDropped + 1) / 2) & ~kDropped;
  std::memcpy(&f, &x, 4);
  return f;
}

// Rounds a float to what the dtype can hold (the value the kernel will actually see).
inline float quantize(float f, DType dt) {
  switch (dt) {
    case DType::f16: return f16_to_float(float_to_f16(f));
    case DType::bf16: return bf16_to_float(float_to_bf16(f));
    case DType::f32: return f;
  }
  return f;
}

}  // namespace flashjit
