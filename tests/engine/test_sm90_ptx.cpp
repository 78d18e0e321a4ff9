// The Hopper PTX wrappers (templates/common/sm90/) through NVRTC and ptxas for sm_90a, with no
// GPU: every wgmma form (each N, both 16-bit types, B K-major and N-major, A from shared memory
// and from registers), TMA loads and stores, mbarriers, fences, named barriers and setmaxnreg.
// A probe kernel uses each one, so a wrong operand count or spelling fails here, not on a GPU.
#include <doctest/doctest.h>

#include "compiler.hpp"

using namespace flashjit;

namespace {

// The probe: one use of each wrapper, every wgmma N in one kernel, values from memory so
// nothing folds away.
constexpr const char* kProbe = R"(
#include "common/sm90/async_copy.cuh"
#include "common/sm90/wgmma.cuh"
using namespace fj::sm90;

template <int N>
__device__ void probe_wgmma(unsigned long long da, unsigned long long db, float* out, const unsigned* a) {
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = out[i];
  const unsigned ar[4] = {a[0], a[1], a[2], a[3]};
  wgmma_fence();
  Wgmma<N>::template ss<true, 0>(d, da, db, 0);
  Wgmma<N>::template ss<false, 1>(d, da, db, 1);
  Wgmma<N>::template rs<true, 1>(d, ar, db, 1);
  Wgmma<N>::template rs<false, 0>(d, ar, db, 1);
  wgmma_commit();
  wgmma_wait<0>();
  fence_registers(d);
  for (int i = 0; i < N / 2; ++i) out[threadIdx.x * 128 + i] = d[i];
}

template <int... Ns>
__device__ void probe_all(unsigned long long da, unsigned long long db, float* out, const unsigned* a) {
  (probe_wgmma<Ns>(da, db, out, a), ...);
}

struct alignas(64) TensorMap { unsigned long long words[16]; };

extern "C" __global__ void __launch_bounds__(256) probe(const __grid_constant__ TensorMap map, float* out,
                                                        const unsigned* a) {
  __shared__ alignas(1024) unsigned short tile[64 * 64];
  __shared__ unsigned long long bar;
  if (threadIdx.x == 0) {
    mbarrier_init(&bar, 1);
    fence_barrier_init();
  }
  __syncthreads();
  prefetch_tensor_map(&map);
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(&bar, 3 * 8192);
    tma_load_2d(tile, &map, 0, 1, &bar);
    tma_load_3d(tile, &map, 0, 1, 2, &bar);
    tma_load_4d(tile, &map, 0, 1, 2, 3, &bar);
  }
  mbarrier_wait(&bar, 0);
  const unsigned long long da = matrix_descriptor(tile, 16, 1024, Swizzle::b128);
  const unsigned long long db = advance_descriptor(matrix_descriptor(tile, 16, 512, Swizzle::b64), 32);
  probe_all<16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256>(da, db, out, a);
  fence_async_shared();
  if (threadIdx.x == 0) {
    tma_store_3d(&map, tile, 0, 1, 2);
    tma_store_4d(&map, tile, 0, 1, 2, 3);
    bulk_commit_group();
    bulk_wait_group_read<0>();
  }
  mbarrier_arrive(&bar);
  named_barrier_sync(1, 256);
  named_barrier_arrive(2, 256);
  if (threadIdx.x < 128) setmaxnreg_dec<40>();
  else setmaxnreg_inc<232>();
}
)";

}  // namespace

TEST_CASE("every Hopper PTX wrapper compiles for sm_90a: wgmma N = 16..256, TMA, mbarriers, setmaxnreg") {
  auto arch = Arch::parse("sm_90a");
  REQUIRE(arch.ok());
  auto r = compile_cubin({"sm90_ptx_probe", kProbe, *arch});
  if (!r.ok()) FAIL(r.error().to_string());
  CHECK(r->cubin.size() > 10000);
}

TEST_CASE("the Hopper wrappers are refused for sm_80, which lacks wgmma and TMA") {
  auto arch = Arch::parse("sm_80");
  REQUIRE(arch.ok());
  auto r = compile_cubin({"sm90_ptx_probe", kProbe, *arch});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().to_string().find("wgmma") != std::string::npos);
}
