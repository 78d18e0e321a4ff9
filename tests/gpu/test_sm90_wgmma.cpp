// The Hopper building blocks on a real sm_90 GPU, on known matrices, before any kernel relies on
// them: TMA loads of 128-byte-swizzled bf16 tiles through host-encoded tensor maps, mbarrier
// transaction counts, and wgmma m64nNk16 with A from shared memory or registers and B K-major or
// N-major (one and two swizzle atoms wide), each checked against a CPU product. The accumulator
// layout each thread writes back is the one the attention kernels will assume.
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>

#include "compiler.hpp"
#include "gpu_fixture.hpp"
#include "tests/support/sm90_probes.hpp"
#include "tma_map.hpp"

using namespace flashjit;

namespace {

constexpr int kM = 64, kK = 64;  // one warpgroup's rows; four 16-deep k-steps
using test_support::kWgmmaProbe;


// The kernel's Params as the host lays it out: the same offsets (cuda.h aligns CUtensorMap to 128
// bytes, the kernel's type to 64; four maps fill 512 bytes either way).
struct HostParams {
  CUtensorMap a, b, c, e;
  const void* a_raw;
  float* out;
};
static_assert(offsetof(HostParams, a_raw) == 512, "the pointers follow the four tensor maps");

std::uint16_t to_bf16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return std::uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);  // round to nearest even
}
float from_bf16(std::uint16_t h) {
  const std::uint32_t u = std::uint32_t(h) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// A [rows][cols] bf16 matrix on the device and its tensor map: boxes of 64 x 64, 128B swizzle.
struct Matrix {
  std::vector<std::uint16_t> host;
  tools::DeviceBuffer dev;
  CUtensorMap map{};
};

Matrix make_matrix(const DriverLibrary& drv, const char* name, int rows, int cols, std::mt19937& rng) {
  Matrix m;
  std::normal_distribution<float> normal;
  for (int i = 0; i < rows * cols; ++i) m.host.push_back(to_bf16(normal(rng)));
  m.dev = tools::DeviceBuffer::allocate(drv, m.host.size() * 2).value();
  REQUIRE(m.dev.upload(m.host.data(), m.host.size() * 2).ok());
  const std::int64_t shape[2] = {rows, cols}, stride[2] = {cols, 1};
  TmaView v = tma_view(name, m.dev.ptr(), shape, stride, 2, 2);
  v.box[0] = 64;
  v.box[1] = 64;
  v.swizzle = TmaSwizzle::b128;
  auto map = encode_tma_map(v);
  if (!map.ok()) FAIL(map.error().to_string());
  m.map = *map;
  return m;
}

// Largest |got - want| / (1 + |want|) of a 64 x n product whose element (i, j) is want(i, j).
template <class F>
double worst(const std::vector<float>& out, int which, int n, F want) {
  double w = 0;
  for (int i = 0; i < kM; ++i)
    for (int j = 0; j < n; ++j) {
      const double ref = want(i, j);
      w = std::max(w, std::abs(out[std::size_t(which) * 64 * 128 + i * 128 + j] - ref) / (1 + std::abs(ref)));
    }
  return w;
}

}  // namespace

TEST_CASE("sm_90: TMA tiles and wgmma (ss and rs, B K-major and N-major) match a CPU product") {
  auto& f = gpu_test::Fixture::get();
  if (f.gpu.info().arch.rfind("sm_90", 0) != 0) {
    MESSAGE("SKIPPED: needs an sm_90 GPU, this one is " << f.gpu.info().arch);
    return;
  }
  const DriverLibrary& drv = f.gpu.driver();
  auto cubin = compile_cubin({"sm90_wgmma_probe", kWgmmaProbe, Arch::parse("sm_90a").value()});
  if (!cubin.ok()) FAIL(cubin.error().to_string());
  CUmodule module;
  REQUIRE(drv.cuModuleLoadData(&module, cubin->cubin.data()) == CUDA_SUCCESS);
  CUfunction fn;
  REQUIRE(drv.cuModuleGetFunction(&fn, module, "probe") == CUDA_SUCCESS);

  std::mt19937 rng(42);
  Matrix a = make_matrix(drv, "a", 64, 64, rng), b = make_matrix(drv, "b", 64, 64, rng),
         c = make_matrix(drv, "c", 64, 64, rng), e = make_matrix(drv, "e", 64, 128, rng);
  auto out = tools::DeviceBuffer::allocate(drv, 4 * 64 * 128 * sizeof(float)).value();
  REQUIRE(out.fill_bytes(0xff).ok());  // NaN: an element never written fails
  HostParams hp{a.map, b.map, c.map, e.map, a.dev.ptr(), static_cast<float*>(out.ptr())};
  void* args[] = {&hp};
  REQUIRE(drv.cuLaunchKernel(fn, 1, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr) == CUDA_SUCCESS);
  REQUIRE(drv.cuCtxSynchronize() == CUDA_SUCCESS);
  std::vector<float> got(4 * 64 * 128);
  REQUIRE(out.download(got.data(), got.size() * sizeof(float)).ok());
  drv.cuModuleUnload(module);

  auto at = [](const Matrix& m, int cols, int i, int j) { return double(from_bf16(m.host[std::size_t(i) * cols + j])); };
  auto dot = [&](auto rhs) {
    return [&, rhs](int i, int j) {
      double s = 0;
      for (int k = 0; k < kK; ++k) s += at(a, 64, i, k) * rhs(k, j);
      return s;
    };
  };
  constexpr double kTol = 1e-3;  // fp32 accumulation of 64 bf16 products, relative to 1 + |ref|
  CHECK(worst(got, 0, 64, dot([&](int k, int j) { return at(b, 64, j, k); })) < kTol);
  CHECK(worst(got, 1, 64, dot([&](int k, int j) { return at(c, 64, k, j); })) < kTol);
  CHECK(worst(got, 2, 128, dot([&](int k, int j) { return at(e, 128, k, j); })) < kTol);
  CHECK(worst(got, 3, 64, dot([&](int k, int j) { return at(b, 64, j, k); })) < kTol);
}
