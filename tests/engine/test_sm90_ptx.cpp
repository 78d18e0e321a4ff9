// The Hopper PTX wrappers (templates/common/sm90/) through NVRTC and ptxas for sm_90a, with no
// GPU: every wgmma form (each N, both 16-bit types, B K-major and N-major, A from shared memory
// and from registers), TMA loads and stores, mbarriers, fences, named barriers and setmaxnreg.
// A probe kernel uses each one, so a wrong operand count or spelling fails here, not on a GPU.
#include <doctest/doctest.h>

#include "compiler.hpp"
#include "tests/support/sm90_probes.hpp"

using namespace flashjit;
using test_support::kPtxProbe;
using test_support::kWgmmaProbe;

TEST_CASE("every Hopper PTX wrapper compiles for sm_90a: wgmma N = 16..256, TMA, mbarriers, setmaxnreg") {
  auto arch = Arch::parse("sm_90a");
  REQUIRE(arch.ok());
  auto r = compile_cubin({"sm90_ptx_probe", kPtxProbe, *arch});
  if (!r.ok()) FAIL(r.error().to_string());
  CHECK(r->cubin.size() > 10000);
}

TEST_CASE("the Hopper wrappers are refused for sm_80, which lacks wgmma and TMA") {
  auto arch = Arch::parse("sm_80");
  REQUIRE(arch.ok());
  auto r = compile_cubin({"sm90_ptx_probe", kPtxProbe, *arch});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().to_string().find("wgmma") != std::string::npos);
}

TEST_CASE("the GPU suite's wgmma probe (TMA tiles, ss and rs products) compiles for sm_90a") {
  auto r = compile_cubin({"sm90_wgmma_probe", kWgmmaProbe, Arch::parse("sm_90a").value()});
  if (!r.ok()) FAIL(r.error().to_string());
  CHECK(r->cubin.size() > 5000);
}
