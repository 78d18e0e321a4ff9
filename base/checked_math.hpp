// Sums and products of sizes that callers give (C ABI structs, Python, JSON), checked: a result
// that does not fit is reported, never wrapped. Signed overflow is undefined behaviour, and a
// wrapped size passes the bound it should fail (issue 21 G1: 2^56 pages x 256 keys became 0).
// For integer types only (the builtins refuse others at compile time).
#pragma once

#include <optional>
#include <type_traits>

namespace flashjit {

// a * b, or nothing when the product does not fit in T.
template <class T>
constexpr std::optional<T> checked_mul(T a, T b) {
  T r{};
  return __builtin_mul_overflow(a, b, &r) ? std::nullopt : std::optional<T>(r);
}

// Whether x is a multiple of d (d > 0), as x % d == 0 says, for signed x too. Alignment checks
// on the dispatch path divide by element and access sizes, which are powers of two: a mask
// then gives the same answer as the division (two's complement: x is a multiple of 2^k exactly
// when its low k bits are zero), without a 64-bit divide's tens of cycles.
template <class T, class D>
constexpr bool multiple_of(T x, D d) {
  const auto m = static_cast<std::make_unsigned_t<T>>(d);
  return (m & (m - 1)) == 0 ? (static_cast<std::make_unsigned_t<T>>(x) & (m - 1)) == 0 : x % static_cast<T>(d) == 0;
}

// a + b, or nothing when the sum does not fit in T.
template <class T>
constexpr std::optional<T> checked_add(T a, T b) {
  T r{};
  return __builtin_add_overflow(a, b, &r) ? std::nullopt : std::optional<T>(r);
}

}  // namespace flashjit
