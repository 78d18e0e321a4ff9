// Single-element conversions between the variant's element type and fp32 (common/ptx.cuh's
// f16/bf16 ones, which the forward never needs: it packs pairs), and small helpers of the
// backward's preprocess and convert.
#pragma once

#include "common/host_device.cuh"
#include "common/ptx.cuh"
#include "common/variant_types.cuh"

namespace fj::bwd {

// The variant's element type to and from fp32 (Elem is raw bits: unsigned short or float).
FJ_DEVICE float to_float(var::Elem x) {
  if constexpr (!var::k16Bit) return x;
  else if constexpr (cfg::kDtype == var::kBF16) return bf16_to_f32(x);
  else return f16_to_f32(x);
}
FJ_DEVICE var::Elem from_float(float x) {
  if constexpr (!var::k16Bit) return x;
  else if constexpr (cfg::kDtype == var::kBF16) return f32_to_bf16(x);
  else return f32_to_f16(x);
}

}  // namespace fj::bwd

namespace fj::bwd {

// Row `s`, head `h` of batch `b` of a [batch, seq, head, dim] view with element strides `st`.
template <typename T>
FJ_DEVICE T* row_at(T* base, const long long (&st)[4], int b, int s, int h) {
  return base + b * st[0] + s * st[1] + h * st[2];
}

constexpr int kWarpLanes = 32;  // threads of a warp: preprocess gives a row at most this many lanes

// The least power of two >= x (x >= 1).
FJ_HOST_DEVICE constexpr int pow2_at_least(int x) { return x <= 1 ? 1 : 2 * pow2_at_least((x + 1) / 2); }

// The sum of x over the lanes of a warp, in every lane.
FJ_DEVICE float warp_sum(float x) {
#pragma unroll
  for (int d = kWarpLanes / 2; d > 0; d /= 2) x += __shfl_xor_sync(0xffffffffu, x, d);
  return x;
}

}  // namespace fj::bwd
