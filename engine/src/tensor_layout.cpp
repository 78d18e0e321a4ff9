#include "tensor_layout.hpp"

#include <cstdio>
#include <limits>
#include <string>

#include "base/checked_math.hpp"
#include "flashjit/flashjit.hpp"

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
    // Past uint64, every later stride is too small: the right verdict for an output no memory could hold.
    span = checked_mul(static_cast<std::uint64_t>(v.stride[i]), static_cast<std::uint64_t>(v.shape[i]))
               .value_or(std::numeric_limits<std::uint64_t>::max());
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
    const std::optional<std::int64_t> step = checked_mul(v.shape[i] - 1, v.stride[i]);
    const std::optional<std::int64_t> next = step ? checked_add(last, *step) : std::nullopt;
    too_large = too_large || !next;
    last = next.value_or(last);
  }
  // last + 1 elements of elem_bytes each, from the first element's address.
  const std::optional<std::uint64_t> bytes =
      checked_mul(static_cast<std::uint64_t>(last) + 1, static_cast<std::uint64_t>(v.elem_bytes));
  if (too_large || !bytes || *bytes > kMaxViewBytes)
    return bad(std::string(v.name) + ": strides and shape address more than 2^62 bytes");
  if (empty) return Extent{};
  if (!v.data) return bad(std::string(v.name) + ".data is null");
  const auto base = reinterpret_cast<std::uintptr_t>(v.data);
  if (!multiple_of(base, v.elem_bytes))
    return bad(std::string(v.name) + ".data must be aligned to its element size (" + std::to_string(v.elem_bytes) +
               " bytes)");
  const std::optional<std::uint64_t> end = checked_add(static_cast<std::uint64_t>(base), *bytes);
  if (!end)
    return bad(std::string(v.name) + ": its " + std::to_string(*bytes) + " bytes from data = " + hex_address(base) +
               " wrap past the end of the address space");
  Extent e;
  e.lo = base;
  e.hi = *end;
  if (v.is_output) FJ_TRY(check_no_self_overlap(v));
  return e;
}

// The public constructors of contiguous views (flashjit.hpp).
namespace {

// a * b, or int64's largest value when the product does not fit: such a stride makes
// validation refuse the view (its extent exceeds any limit) instead of wrapping to one that fits.
std::int64_t stride_product(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<std::int64_t>::max() : r;
}

// A (batch, seq, heads, dim) view whose memory nests the dims in `order` (outermost first).
TensorView packed_view(const void* data, DType dtype, const std::int64_t (&shape)[4], const int (&order)[4]) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  std::int64_t stride = 1;
  for (int i = 3; i >= 0; --i) {
    v.shape[order[i]] = shape[order[i]];
    v.stride[order[i]] = stride;
    stride = stride_product(stride, shape[order[i]]);
  }
  return v;
}

}  // namespace

TensorView TensorView::bshd(const void* data, DType dtype, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
  return packed_view(data, dtype, {b, s, h, d}, {0, 1, 2, 3});
}

TensorView TensorView::bhsd(const void* data, DType dtype, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
  return packed_view(data, dtype, {b, s, h, d}, {0, 2, 1, 3});
}

LseView LseView::contiguous(float* data, std::int64_t b, std::int64_t h, std::int64_t s) {
  LseView l;
  l.data = data;
  l.shape[0] = b, l.shape[1] = h, l.shape[2] = s;
  l.stride[2] = 1, l.stride[1] = s, l.stride[0] = stride_product(h, s);
  return l;
}

}  // namespace flashjit
