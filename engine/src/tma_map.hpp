// TMA tensor maps (sm_90): the tiled view of a global tensor one CUtensorMap describes, the copy
// engine's rules on it, and its encoding by the driver. The rules are checked here on the host,
// so a tensor TMA cannot address is sent to a family that does not need TMA, with the reason in
// the log, instead of failing in the driver or faulting on the GPU.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

#include "flashjit/status.hpp"

namespace flashjit {

// How TMA permutes 16-byte chunks within each row of a box in shared memory; the kernel's
// wgmma descriptors must name the same pattern.
enum class TmaSwizzle { none, b32, b64, b128 };

inline constexpr int kTmaMaxRank = 5;
inline constexpr std::uint32_t kTmaMaxBox = 256;          // elements along any box dim
inline constexpr std::uint64_t kTmaMaxDim = 1ull << 32;    // elements along any tensor dim
inline constexpr std::uint64_t kTmaMaxStride = 1ull << 40;  // bytes, exclusive
inline constexpr std::uint64_t kTmaAlign = 16;              // bytes: address, strides, box rows

struct TmaView {
  const char* name = "";  // the argument, for messages: "q", "k"
  const void* data = nullptr;
  int rank = 0;                                // 1..5
  std::uint64_t dims[kTmaMaxRank] = {};         // elements, innermost first
  std::uint64_t strides[kTmaMaxRank - 1] = {};  // bytes between neighbours along dims 1..rank-1
  std::uint32_t box[kTmaMaxRank] = {};          // elements one copy moves along each dim
  int elem_bytes = 2;                           // 2 (f16, bf16) or 4 (f32)
  TmaSwizzle swizzle = TmaSwizzle::none;
};

// A [d0, d1, ...] strided view (outermost first, element strides, as the C ABI gives tensors)
// as a TmaView: dims reversed, strides in bytes. TMA reads the innermost dim contiguously, so a
// view whose innermost stride is not 1 is recorded with rank 0 and refused by tma_refusal.
TmaView tma_view(const char* name, const void* data, const std::int64_t* shape, const std::int64_t* stride, int rank,
                 int elem_bytes);

// Why the copy engine cannot address the view (naming the argument and the rule), or "" when it
// can. Needs no GPU.
std::string tma_refusal(const TmaView& v);

// The view's CUtensorMap, encoded by the driver (zero-fill out of bounds, 256-byte L2 fetches).
// A refused view is an invalid_argument error carrying tma_refusal's reason.
Result<CUtensorMap> encode_tma_map(const TmaView& v);

// encode_tma_map through a small per-thread memo of the last views: a serving loop passes the
// same buffers call after call, and a map depends on nothing but its view (no context, no
// device state), so a hit returns the same bytes the driver would. Writes the map's
// sizeof(CUtensorMap) bytes to `out` (a kernel's params, which hold it 64-byte aligned): on the
// dispatch path the map is copied once, from the memo to the params.
Status encode_tma_map_cached(const TmaView& v, void* out);
// The same, as a value (tests).
Result<CUtensorMap> encode_tma_map_cached(const TmaView& v);

}  // namespace flashjit
