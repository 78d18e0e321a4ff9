// Sums and products of sizes that callers give (C ABI structs, Python, JSON), checked: a result
// that does not fit is reported, never wrapped. Signed overflow is undefined behaviour, and a
// wrapped size passes the bound it should fail (issue 21 G1: 2^56 pages x 256 keys became 0).
// For integer types only (the builtins refuse others at compile time).
#pragma once

#include <optional>

namespace flashjit {

// a * b, or nothing when the product does not fit in T.
template <class T>
constexpr std::optional<T> checked_mul(T a, T b) {
  T r{};
  return __builtin_mul_overflow(a, b, &r) ? std::nullopt : std::optional<T>(r);
}

// a + b, or nothing when the sum does not fit in T.
template <class T>
constexpr std::optional<T> checked_add(T a, T b) {
  T r{};
  return __builtin_add_overflow(a, b, &r) ? std::nullopt : std::optional<T>(r);
}

}  // namespace flashjit
