// Extents of strided views: the rules, the exact byte range, and shapes, strides and addresses
// at the edges of int64 and the address space (the sanitizer build checks no arithmetic here
// overflows on the way to its verdict).
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "flashjit/flashjit.hpp"
#include "tensor_layout.hpp"

using namespace flashjit;

namespace {

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

const void* at(std::uintptr_t address) { return reinterpret_cast<const void*>(address); }

struct View {
  const void* data = at(0x7f0000000000ull);
  std::int64_t shape[4] = {2, 3, 4, 5};
  std::int64_t stride[4] = {60, 20, 5, 1};
  std::size_t elem = 2;
  bool output = false;

  Result<Extent> check(const char* name = "t") const {
    return check_layout(LayoutView{name, data, shape, stride, 4, elem, output});
  }
  std::string error() const {
    auto r = check();
    return r.ok() ? "OK" : r.error().message();
  }
};

bool mentions(const std::string& msg, const std::string& what) { return msg.find(what) != std::string::npos; }

}  // namespace

TEST_CASE("a contiguous view covers exactly its elements") {
  View v;
  auto e = v.check();
  REQUIRE(e.ok());
  CHECK(e->lo == 0x7f0000000000ull);
  CHECK(e->hi - e->lo == 120 * 2);
  v.output = true;
  CHECK(v.check().ok());
}

TEST_CASE("a view with a zero dim is empty and may have no data") {
  View v;
  v.shape[1] = 0;
  v.data = nullptr;
  auto e = v.check();
  REQUIRE(e.ok());
  CHECK(e->empty());
}

TEST_CASE("each rule names the argument, the index and the value") {
  View v;
  v.shape[2] = -1;
  CHECK(mentions(v.error(), "t.shape[2] must be >= 0, got -1"));
  v = View{};
  v.stride[0] = -60;
  CHECK(mentions(v.error(), "t.stride[0] must be >= 0"));
  v = View{};
  v.data = nullptr;
  CHECK(mentions(v.error(), "t.data is null"));
  v = View{};
  v.data = at(0x7f0000000001ull);
  CHECK(mentions(v.error(), "aligned to its element size (2 bytes)"));
}

TEST_CASE("shapes and strides near 2^63 are refused, not overflowed") {
  View v;
  v.elem = 4;
  v.shape[2] = v.stride[2] = kMax;  // the reproducer of issue 6, defect 4
  CHECK(mentions(v.error(), "more than 2^62 bytes"));
  v = View{};
  for (int i = 0; i < 4; ++i) v.shape[i] = v.stride[i] = kMax;  // every product and the sum overflow
  CHECK(mentions(v.error(), "more than 2^62 bytes"));
  v = View{};
  v.shape[0] = 2, v.stride[0] = kMax / 2 + 1;  // one product fits, the sum with the rest does not
  v.shape[1] = 2, v.stride[1] = kMax / 2 + 1;
  CHECK(mentions(v.error(), "more than 2^62 bytes"));
  v = View{};
  v.shape[0] = kMax, v.stride[0] = 0;  // broadcast: a huge count of one element is fine
  CHECK(v.check().ok());
}

TEST_CASE("the 2^62-byte limit is exact") {
  View v;
  v.elem = 4;
  for (int i = 1; i < 4; ++i) v.shape[i] = 1;
  v.shape[0] = 2;
  v.stride[0] = (std::int64_t(1) << 60) - 1;  // last element at 2^60 - 1: 2^62 bytes in all
  v.data = at(0x1000);
  CHECK(v.check().ok());
  v.stride[0] += 1;
  CHECK(mentions(v.error(), "more than 2^62 bytes"));
}

TEST_CASE("a range that wraps past 2^64 is refused (issue 6, defect 5)") {
  View v;
  for (int i = 0; i < 4; ++i) v.shape[i] = 1;
  v.data = at(0xFFFFFFFFFFFFFFFEull);  // the reproducer: 2 bytes from here end at 2^64
  CHECK(mentions(v.error(), "wrap past the end of the address space"));
  CHECK(mentions(v.error(), "0xfffffffffffffffe"));
  v.shape[3] = 7, v.stride[3] = 1;
  v.data = at(0xFFFFFFFFFFFFFFF0ull);  // 14 bytes: ends 2 bytes short of 2^64
  auto e = v.check();
  REQUIRE(e.ok());
  CHECK(e->hi == 0xFFFFFFFFFFFFFFFEull);
  v.shape[3] = 8;  // 16 bytes: would end at 2^64 itself
  CHECK(mentions(v.error(), "wrap"));
}

TEST_CASE("outputs may not map two elements to one address; inputs may broadcast") {
  View v;
  v.stride[1] = 4;  // rows of 5 overlap
  v.output = true;
  CHECK(mentions(v.error(), "t overlaps itself: stride[1] = 4"));
  v = View{};
  v.stride[0] = 0;
  CHECK(v.check().ok());  // a broadcast input
  v.output = true;
  CHECK(mentions(v.error(), "overlaps itself"));
  v = View{};
  v.output = true;
  v.shape[0] = 1, v.stride[0] = 0;  // a dim of 1 has no second element to collide
  CHECK(v.check().ok());
}

TEST_CASE("overlap of extents: shared bytes only, never for empty ones") {
  const Extent a{100, 200}, b{200, 300}, c{150, 160}, none{};
  CHECK_FALSE(overlaps(a, b));
  CHECK(overlaps(a, c));
  CHECK(overlaps(c, a));
  CHECK(overlaps(a, a));
  CHECK_FALSE(overlaps(a, none));
  CHECK_FALSE(overlaps(none, none));
}

TEST_CASE("packed views: bshd and bhsd strides, and a product past int64 saturates so validation refuses it") {
  const TensorView a = TensorView::bshd(nullptr, DType::f16, 2, 5, 3, 7);
  CHECK(a.shape[0] == 2);
  CHECK(a.shape[1] == 5);
  CHECK(a.shape[2] == 3);
  CHECK(a.shape[3] == 7);
  CHECK(a.stride[3] == 1);
  CHECK(a.stride[2] == 7);
  CHECK(a.stride[1] == 21);
  CHECK(a.stride[0] == 105);
  const TensorView b = TensorView::bhsd(nullptr, DType::f16, 2, 5, 3, 7);
  CHECK(b.shape[1] == 5);
  CHECK(b.shape[2] == 3);
  CHECK(b.stride[3] == 1);
  CHECK(b.stride[1] == 7);
  CHECK(b.stride[2] == 35);
  CHECK(b.stride[0] == 105);
  const std::int64_t huge = std::int64_t(1) << 40;
  const TensorView c = TensorView::bshd(nullptr, DType::f16, 1, huge, huge, 1);
  CHECK(c.stride[1] == huge);
  CHECK(c.stride[0] == std::numeric_limits<std::int64_t>::max());
}
