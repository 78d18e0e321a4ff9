// TMA tensor maps through the real driver: a view the host rules accept is encoded (the kernels
// that load through it come with the Hopper family).
#include <cstring>

#include "gpu_fixture.hpp"
#include "tma_map.hpp"

using namespace flashjit;

namespace {

constexpr std::int64_t kShape[4] = {2, 1000, 8, 128};  // [B, S, H, D]
constexpr std::int64_t kStride[4] = {1000 * 8 * 128, 8 * 128, 128, 1};

tools::DeviceBuffer kv_buffer() {
  auto buffer = tools::DeviceBuffer::allocate(flashjit::gpu_test::Fixture::get().gpu.driver(),
                                              std::size_t(2) * 1000 * 8 * 128 * 2);
  REQUIRE(buffer.ok());
  return std::move(buffer).value();
}

// The view fa3_sm90 loads K through: boxes of 64 head-dim elements by 128 keys, 128-byte swizzle.
TmaView kv_view(const tools::DeviceBuffer& buffer) {
  TmaView v = tma_view("k", buffer.ptr(), kShape, kStride, 4, 2);
  v.box[0] = 64;
  v.box[2] = 128;
  v.swizzle = TmaSwizzle::b128;
  return v;
}

}  // namespace

TEST_CASE("the driver encodes a tensor map for a [B, S, H, D] bf16 view the host rules accept") {
  auto buffer = kv_buffer();
  const TmaView v = kv_view(buffer);
  REQUIRE(tma_refusal(v).empty());
  auto map = encode_tma_map(v);
  if (!map.ok()) FAIL(map.error().to_string());
}

TEST_CASE("the per-thread memo of tensor maps returns the driver's bytes and tells views apart") {
  auto buffer = kv_buffer();
  const TmaView v = kv_view(buffer);
  auto direct = encode_tma_map(v);
  REQUIRE(direct.ok());
  for (int round = 0; round < 2; ++round) {  // the first call fills the memo, the second hits it
    auto memo = encode_tma_map_cached(v);
    REQUIRE(memo.ok());
    CHECK(std::memcmp(&memo.value(), &direct.value(), sizeof(CUtensorMap)) == 0);
  }
  TmaView other = v;
  other.box[2] = 64;  // another tiling of the same tensor
  auto a = encode_tma_map_cached(other), b = encode_tma_map(other);
  REQUIRE((a.ok() && b.ok()));
  CHECK(std::memcmp(&a.value(), &b.value(), sizeof(CUtensorMap)) == 0);
  CHECK(std::memcmp(&a.value(), &direct.value(), sizeof(CUtensorMap)) != 0);
  TmaView bad = v;
  bad.box[0] = 300;  // over the copy engine's 256 elements
  CHECK_FALSE(encode_tma_map_cached(bad).ok());
}
