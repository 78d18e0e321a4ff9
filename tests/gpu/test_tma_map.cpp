// TMA tensor maps through the real driver: a view the host rules accept is encoded (the kernels
// that load through it come with the Hopper family).
#include "gpu_fixture.hpp"
#include "tma_map.hpp"

using namespace flashjit;

TEST_CASE("the driver encodes a tensor map for a [B, S, H, D] bf16 view the host rules accept") {
  auto& f = flashjit::gpu_test::Fixture::get();
  const std::int64_t shape[4] = {2, 1000, 8, 128};
  const std::int64_t stride[4] = {1000 * 8 * 128, 8 * 128, 128, 1};
  auto buffer = tools::DeviceBuffer::allocate(f.gpu.driver(), std::size_t(2) * 1000 * 8 * 128 * 2);
  REQUIRE(buffer.ok());
  TmaView v = tma_view("k", buffer->ptr(), shape, stride, 4, 2);
  v.box[0] = 64;
  v.box[2] = 128;
  v.swizzle = TmaSwizzle::b128;
  REQUIRE(tma_refusal(v).empty());
  auto map = encode_tma_map(v);
  if (!map.ok()) FAIL(map.error().to_string());
}
