#include "tensor_layout.hpp"

#include <cstdio>
#include <limits>
#include <string>

namespace flashjit {

namespace {

constexpr int kMaxRank = 8;  // room for every view the library has: TensorView 4 dims, LseView 3

Error bad(std::string msg) { return Error(Code::invalid_argument, std::move(msg)); }

std::string indexed(const LayoutView& v, const char* field, int i) {
  return std::string(v.name) + "." + field + "[" + std::to_string(i) + "]";
}

std::string hex_address(std::uintptr_t a) {
  char buf[2 + 2 * sizeof a + 1];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(a));
  return buf;
}

// a * b, or the largest uint64 when it does not fit: every later stride is then too small,
// which is the right verdict for an output no memory could hold.
std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<std::uint64_t>::max() : r;
}

// Outputs: distinct elements must not share memory. With dims sorted by stride, each stride must
// reach past everything the faster dims cover.
Status check_no_self_overlap(const LayoutView& v) {
  int order[kMaxRank];
  for (int i = 0; i < v.rank; ++i) {  // insertion sort by stride: a handful of dims
    int k = i;
    for (; k > 0 && v.stride[order[k - 1]] > v.stride[i]; --k) order[k] = order[k - 1];
    order[k] = i;
  }
  std::uint64_t span = 1;  // elements covered by the dims so far
  for (int k = 0; k < v.rank; ++k) {
    const int i = order[k];
    if (v.shape[i] <= 1) continue;
    if (static_cast<std::uint64_t>(v.stride[i]) < span)
      return bad(std::string(v.name) + " overlaps itself: stride[" + std::to_string(i) + "] = " +
                 std::to_string(v.stride[i]) +
                 " is smaller than the extent of the faster dims (outputs need non-overlapping strides)");
    span = saturating_mul(static_cast<std::uint64_t>(v.stride[i]), static_cast<std::uint64_t>(v.shape[i]));
  }
  return {};
}

}  // namespace

bool overlaps(const Extent& a, const Extent& b) { return !a.empty() && !b.empty() && a.lo < b.hi && b.lo < a.hi; }

Result<Extent> check_layout(const LayoutView& v) {
  if (v.rank < 1 || v.rank > kMaxRank || v.elem_bytes == 0)
    return Error(Code::internal, std::string(v.name) + ": a view of rank " + std::to_string(v.rank) + " is not supported");
  bool empty = false, too_large = false;
  std::int64_t last = 0;  // offset of the last element, in elements
  for (int i = 0; i < v.rank; ++i) {
    if (v.shape[i] < 0) return bad(indexed(v, "shape", i) + " must be >= 0, got " + std::to_string(v.shape[i]));
    if (v.stride[i] < 0)
      return bad(indexed(v, "stride", i) + " must be >= 0 (negative strides are not supported), got " +
                 std::to_string(v.stride[i]));
    if (v.shape[i] == 0) {
      empty = true;
      continue;
    }
    std::int64_t step = 0;
    too_large |= __builtin_mul_overflow(v.shape[i] - 1, v.stride[i], &step) || __builtin_add_overflow(last, step, &last);
  }
  // last + 1 elements of elem_bytes each, from the first element's address.
  std::uint64_t bytes = 0;
  too_large = too_large || __builtin_mul_overflow(static_cast<std::uint64_t>(last) + 1, v.elem_bytes, &bytes) ||
              bytes > kMaxViewBytes;
  if (too_large) return bad(std::string(v.name) + ": strides and shape address more than 2^62 bytes");
  if (empty) return Extent{};
  if (!v.data) return bad(std::string(v.name) + ".data is null");
  const auto base = reinterpret_cast<std::uintptr_t>(v.data);
  if (base % v.elem_bytes)
    return bad(std::string(v.name) + ".data must be aligned to its element size (" + std::to_string(v.elem_bytes) +
               " bytes)");
  Extent e;
  e.lo = base;
  if (__builtin_add_overflow(base, bytes, &e.hi))
    return bad(std::string(v.name) + ": its " + std::to_string(bytes) + " bytes from data = " + hex_address(base) +
               " wrap past the end of the address space");
  if (v.is_output) FJ_TRY(check_no_self_overlap(v));
  return e;
}

}  // namespace flashjit
