// sm_margin (AttentionArgs::sm_margin, the engine's default): a call's device has that many SMs
// fewer, so persistent grids and split-KV counts leave them to other kernels (NCCL's beside a
// ring). Planned here without a GPU, on a described H100.
#include <doctest/doctest.h>

#include <cstdio>

#include "cudalib/driver_library.hpp"
#include "device_context.hpp"
#include "kernel_family.hpp"
#include "problem.hpp"
#include "workspace_pool.hpp"

using namespace flashjit;

namespace {

const void* addr(std::uintptr_t slot) { return reinterpret_cast<const void*>(0x7f0000000000ull + (slot << 32)); }

DeviceContextInfo h100() {
  DeviceContextInfo d;
  d.arch = Arch::parse("sm_90a").value();
  d.smem_optin = 227 * 1024;
  d.smem_per_sm = 228 * 1024;
  d.sm_count = 132;
  d.l2_bytes = 50 << 20;
  d.name = "NVIDIA H100 80GB HBM3";
  return d;
}

AttentionArgs args(std::int64_t B, std::int64_t Sq, std::int64_t Sk, std::int64_t Hq, std::int64_t Hkv, bool causal) {
  AttentionArgs a;
  a.q = TensorView::bshd(addr(1), DType::bf16, B, Sq, Hq, 128);
  a.k = TensorView::bshd(addr(2), DType::bf16, B, Sk, Hkv, 128);
  a.v = TensorView::bshd(addr(3), DType::bf16, B, Sk, Hkv, 128);
  a.o = TensorView::bshd(addr(4), DType::bf16, B, Sq, Hq, 128);
  a.mask = causal ? Mask::causal : Mask::none;
  return a;
}

// The family's default plan of `a` on `device`: its first launch's grid and its workspace bytes.
std::pair<unsigned, std::size_t> plan_on(const AttentionArgs& a, const DeviceContextInfo& device) {
  const AttentionProblem p = validate_problem(a).value();
  const KernelFamily* f = pick_family(device.arch, p.semantics, &p.shape);
  REQUIRE(f);
  const KernelVariant v{f->name(), p.semantics, f->default_tiling(device.arch, p.semantics, &p.shape)};
  WorkspaceMeter meter;
  LaunchPlan plan;
  const Status st = f->plan(p, v, device, meter, plan);
  REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.error().to_string()));
  return {plan.kernels[0].grid.x, meter.bytes()};
}

}  // namespace

TEST_CASE("sm_margin: the call's device has that many SMs fewer; none left is an error naming the device") {
  auto d = with_sm_margin(h100(), 32);
  REQUIRE(d.ok());
  CHECK(d->sm_count == 100);
  CHECK(d->arch.name() == "sm_90a");
  CHECK(with_sm_margin(h100(), 0)->sm_count == 132);
  CHECK(with_sm_margin(h100(), 131)->sm_count == 1);
  auto none = with_sm_margin(h100(), 132);
  REQUIRE(!none.ok());
  CHECK(none.error().message() == "sm_margin is 132 but must be 0 to 131: the NVIDIA H100 80GB HBM3 has 132 SMs and a call needs one");
  CHECK(!with_sm_margin(h100(), -1).ok());

  AttentionArgs a = args(1, 64, 64, 8, 8, false);
  a.sm_margin = -2;
  CHECK(validate_problem(a).error().message() == "sm_margin must be in [0, 4096] (SMs left to other kernels), got -2");
  a.sm_margin = kMaxSmMargin;
  CHECK(validate_problem(a).ok());
}

TEST_CASE("sm_margin: fa3's persistent grid shrinks with the SMs left, per SM alike") {
  // fa3's plan encodes TMA descriptors through the driver: this case runs where one is installed
  // (the device run carries this binary), and says it was skipped elsewhere.
  auto drv = DriverLibrary::get();
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (!drv.ok() || drv.value()->cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      drv.value()->cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS) {
    std::printf("SKIPPED (no CUDA driver or GPU): fa3_sm90's plan encodes TMA descriptors through the driver\n");
    return;
  }
  REQUIRE(drv.value()->cuCtxSetCurrent(ctx) == CUDA_SUCCESS);  // the descriptors are encoded in a context
  // 16 sequences of 1K, causal, 16 heads at D = 128: more tiles than CTAs fit, a persistent grid.
  const AttentionArgs a = args(16, 1024, 1024, 16, 16, true);
  const unsigned full = plan_on(a, h100()).first;
  const unsigned left = plan_on(a, with_sm_margin(h100(), 32).value()).first;
  REQUIRE(full % 132 == 0);
  CHECK(full / 132 >= 1);
  CHECK(left == full / 132 * 100);
}

TEST_CASE("sm_margin: split-KV decode splits for the SMs left") {
  // One query token, one sequence of 32K keys, 8 KV heads: decode splits the keys to fill the GPU.
  const AttentionArgs a = args(1, 1, 32768, 32, 8, false);
  const auto full = plan_on(a, h100());
  const auto few = plan_on(a, with_sm_margin(h100(), 116).value());  // 16 SMs left
  CHECK(few.second < full.second);  // fewer splits: fewer partial rows in the workspace
  CHECK(few.second > 0);
}
