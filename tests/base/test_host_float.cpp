// Host conversions to the 16-bit formats against an independent reference: the nearest
// representable value found by search over every finite pattern (ties to the even pattern).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "base/host_float.hpp"

using namespace flashjit;

namespace {

float from_bits(std::uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// The f16 pattern nearest to a finite f by magnitude search; ties go to the even pattern, and
// anything at or past 65520 (halfway to the next power of two) overflows to infinity.
std::uint16_t nearest_f16(float f, const std::vector<float>& positive) {
  const std::uint16_t sign = std::signbit(f) ? 0x8000u : 0u;
  const double a = std::fabs(double(f));
  if (a >= 65520.0) return std::uint16_t(sign | 0x7c00u);
  const auto hi = std::lower_bound(positive.begin(), positive.end(), float(a));
  if (hi == positive.begin()) return sign;
  if (hi == positive.end()) return std::uint16_t(sign | 0x7bffu);  // past 65504, short of 65520
  const std::uint16_t h_hi = std::uint16_t(hi - positive.begin()), h_lo = std::uint16_t(h_hi - 1);
  const double d_lo = a - double(positive[h_lo]), d_hi = double(*hi) - a;
  if (d_lo < d_hi) return std::uint16_t(sign | h_lo);
  if (d_hi < d_lo) return std::uint16_t(sign | h_hi);
  return std::uint16_t(sign | ((h_lo & 1u) ? h_hi : h_lo));
}

}  // namespace

TEST_CASE("float_to_f16 rounds every float range to the nearest f16, subnormals and tiny values included") {
  std::vector<float> positive;  // every finite non-negative f16 in pattern order, which is value order
  for (std::uint32_t h = 0; h < 0x7c00u; ++h) positive.push_back(f16_to_float(std::uint16_t(h)));
  for (std::uint32_t h = 0; h < 0x7c00u; ++h) REQUIRE(float_to_f16(positive[h]) == h);

  // Values far below the smallest subnormal (2^-24) once hit shifts of 32 bits or more.
  for (float f : {1e-11f, 0x1p-30f, 0x1p-40f, 0x1p-126f, 0x1p-149f, -1e-11f})
    CHECK(float_to_f16(f) == (std::signbit(f) ? 0x8000u : 0u));
  CHECK(float_to_f16(0x1p-24f) == 0x0001u);
  CHECK(float_to_f16(0x1p-25f) == 0x0000u);         // a tie, to the even pattern
  CHECK(float_to_f16(0x1.8p-25f) == 0x0001u);
  CHECK(float_to_f16(65519.f) == 0x7bffu);
  CHECK(float_to_f16(65520.f) == 0x7c00u);

  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> bits(0, 0xffffffffu);
  for (int i = 0; i < 400000; ++i) {
    const float f = from_bits(bits(rng));
    if (!std::isfinite(f)) continue;
    const std::uint16_t got = float_to_f16(f), want = nearest_f16(f, positive);
    if (got != want) FAIL_CHECK("float_to_f16(" << f << ") = " << got << ", nearest is " << want);
  }
  // Every float exponent, dense mantissas near the subnormal boundary.
  for (std::uint32_t e = 0; e < 255; ++e)
    for (std::uint32_t m : {0u, 1u, 0x400000u, 0x7fffffu, 0x1000u, 0xfffu, 0x1001u})
      for (std::uint32_t s : {0u, 0x80000000u}) {
        const float f = from_bits(s | e << 23 | m);
        CHECK(float_to_f16(f) == nearest_f16(f, positive));
      }
}

TEST_CASE("quantize never turns a finite value into NaN") {
  for (std::uint32_t e = 0; e < 255; ++e) {
    const float f = from_bits(e << 23 | 0x2aaaaau);
    CHECK(!std::isnan(quantize(f, DType::f16)));
    CHECK(!std::isnan(quantize(f, DType::bf16)));
  }
}
