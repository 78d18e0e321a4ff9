// What the rendered semantics constants (namespace fj::cfg, engine/src/kernel_source.cpp) mean
// inside a kernel, for every family: the host's enum values, and the type elements move as
// (raw bits: 16-bit types as unsigned short, fp32 as float).
#pragma once

namespace fj::var {

using namespace fj::cfg;

enum : int { kF16 = 0, kBF16 = 1, kF32 = 2 };  // DType on the host
constexpr bool k16Bit = kDtype != kF32;
constexpr bool kCausal = kMask == 1;    // Mask::causal
constexpr bool kTf32 = kFp32Math == 1;  // Fp32Math::tf32
// Scores leave a softcap in log2 units; otherwise the softmax scale (in log2 units) is applied
// inside the exponent.
constexpr bool kScoresInLog2 = kSoftcap;

template <bool kIs16> struct ElemOf { using type = unsigned short; };
template <> struct ElemOf<false> { using type = float; };
using Elem = typename ElemOf<k16Bit>::type;

}  // namespace fj::var
