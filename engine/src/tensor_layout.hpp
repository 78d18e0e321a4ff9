// The memory a strided tensor view covers, and the rules a view must keep before any kernel may
// touch it: shapes and strides >= 0, an extent small enough that every offset a kernel computes
// fits in int64, data aligned to its element, an address range that does not wrap past 2^64,
// and, for outputs, no two elements at one address. Shapes and strides come from callers
// (C ABI structs, Python), so every sum and product here is overflow-checked.
#pragma once

#include <cstddef>
#include <cstdint>

#include "flashjit/status.hpp"

namespace flashjit {

// Largest extent of one view, in bytes: kernels form int64 element offsets, scale them to bytes
// and step a tile past the end; 2^62 leaves that arithmetic a factor of two of headroom.
inline constexpr std::uint64_t kMaxViewBytes = std::uint64_t(1) << 62;

// The byte range [lo, hi) a view touches; lo == hi (empty) when any of its dims is 0.
struct Extent {
  std::uintptr_t lo = 0, hi = 0;
  bool empty() const { return lo == hi; }
};

// Whether two ranges share a byte (an empty range shares none).
bool overlaps(const Extent& a, const Extent& b);

struct LayoutView {
  const char* name = "";  // the argument, for messages: "q", "lse"
  const void* data = nullptr;
  const std::int64_t* shape = nullptr;
  const std::int64_t* stride = nullptr;  // in elements
  int rank = 0;
  std::size_t elem_bytes = 1;
  bool is_output = false;  // outputs must not map two elements to one address (threads would race)
};

// The view's extent, or an error naming the argument and the rule it breaks.
Result<Extent> check_layout(const LayoutView& view);

// check_layout for the fixed-rank arrays of TensorView and LseView.
template <int N>
Status check_layout(const char* name, const void* data, const std::int64_t (&shape)[N], const std::int64_t (&stride)[N],
                    std::size_t elem_bytes, bool is_output, Extent* extent) {
  auto r = check_layout(LayoutView{name, data, shape, stride, N, elem_bytes, is_output});
  if (!r.ok()) return std::move(r).error();
  *extent = r.value();
  return {};
}

}  // namespace flashjit
