// TMA tensor maps on the host: the copy engine's rules, each refused with the argument and the
// rule named, before any driver call (no GPU needed).
#include <doctest/doctest.h>

#include <cstdint>

#include "tma_map.hpp"

using namespace flashjit;

namespace {

alignas(64) char g_memory[64];

// A [2, 1000, 8, d] bf16 tensor (batch, seq, heads, dim) with a box of 64 rows of `box_d`
// elements of one head, as a Hopper kernel would load Q or K.
TmaView bshd(int d, int box_d, std::int64_t dim_stride = 1, std::uintptr_t offset = 0) {
  const std::int64_t shape[4] = {2, 1000, 8, d};
  const std::int64_t stride[4] = {1000 * 8 * d, 8 * d, d, dim_stride};
  TmaView v = tma_view("q", g_memory + offset, shape, stride, 4, 2);
  v.box[0] = std::uint32_t(box_d);
  v.box[2] = 64;
  v.swizzle = TmaSwizzle::b128;
  return v;
}

}  // namespace

TEST_CASE("tma_view reverses a [B, S, H, D] view into innermost-first dims with byte strides") {
  const TmaView v = bshd(128, 64);
  REQUIRE(v.rank == 4);
  CHECK(v.dims[0] == 128);
  CHECK(v.dims[1] == 8);
  CHECK(v.dims[2] == 1000);
  CHECK(v.dims[3] == 2);
  CHECK(v.strides[0] == 256);       // next head
  CHECK(v.strides[1] == 2048);      // next token
  CHECK(v.strides[2] == 2048000);   // next sequence
  CHECK(tma_refusal(v).empty());
}

TEST_CASE("TMA's rules are refused with the argument and the rule named") {
  auto refused = [](const TmaView& v, const char* rule) {
    const std::string why = tma_refusal(v);
    INFO(why);
    CHECK(why.find("TMA cannot address q") == 0);
    CHECK(why.find(rule) != std::string::npos);
  };
  refused(bshd(128, 64, 2), "contiguous");
  refused(bshd(128, 64, 1, 2), "16-byte aligned");
  refused(bshd(100, 64), "stride of dim 1 (0 is innermost) (200 bytes) must be a multiple of 16");
  refused(bshd(128, 72), "must fit the swizzle span (128 bytes)");
  refused(bshd(128, 4), "a box row (8 bytes) must be a multiple of 16");
  TmaView big_box = bshd(128, 64);
  big_box.box[2] = 257;
  refused(big_box, "box along dim 2 (0 is innermost) must be 1 to 256");
  TmaView empty = bshd(128, 64);
  empty.dims[3] = 0;
  refused(empty, "dim 3 (0 is innermost) must hold 1 to 2^32");
  TmaView far = bshd(128, 64);
  far.strides[2] = std::uint64_t(1) << 40;
  refused(far, "below 2^40");
  TmaView odd = bshd(128, 64);
  odd.elem_bytes = 3;
  refused(odd, "1, 2, 4 or 8 bytes");
}

TEST_CASE("TMA limits hold at their edges: 256-element boxes, 128-byte swizzled rows, unswizzled wide rows") {
  TmaView v = bshd(128, 64);
  v.box[2] = 256;
  CHECK(tma_refusal(v).empty());
  TmaView wide = bshd(256, 256);
  wide.swizzle = TmaSwizzle::none;  // 512-byte rows are fine without a swizzle
  CHECK(tma_refusal(wide).empty());
  TmaView narrow = bshd(64, 32);
  narrow.swizzle = TmaSwizzle::b64;
  CHECK(tma_refusal(narrow).empty());
}

TEST_CASE("encode_tma_map refuses a view TMA cannot address before any driver call") {
  auto r = encode_tma_map(bshd(100, 64));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == Code::invalid_argument);
  CHECK(r.error().to_string().find("200 bytes") != std::string::npos);
}
