// Host time of one forward call, with no GPU: the engine runs on bench/fake_driver.c (launches
// are no-ops), so what is timed is the engine's own work per call — validation, the context
// lookup, the family's choice, the plan lookup, the family's plan (TMA maps) and the launch's
// packing — plus a few nanoseconds of fake driver. The problem is bench/op_overhead.py's: q, k,
// v, o all [1, 64, 1, 64] fp16 contiguous, no mask, no LSE, served on sm_90a by fa3_sm90.
// Host buffers stand in for device pointers: nothing dereferences them (checked mode is off and
// the fake driver's launch reads nothing).
//
// Only the public API: flashjit.hpp (Engine::forward), or with --c-abi flashjit.h's
// flashjit_forward_v2 on arguments packed once (op_overhead.py's "ctypes (prepared)" row).
//
// Build and run (bench/host_profile.sh does both, and callgrind):
//   c++ -O2 -g -std=c++17 -Iengine/include bench/host_profile.cpp -Lbuild -lflashjit -ldl -Wl,-rpath,$PWD/build -o build/host_profile
//   FLASHJIT_LIBCUDA_PATH=$PWD/build/fake_driver.so build/host_profile [--calls N] [--rounds R] [--c-abi] [--stream]
// --callgrind: few calls (callgrind runs ~50x slower); collect only inside timed_calls():
//   valgrind --tool=callgrind --collect-atstart=no --toggle-collect=timed_calls build/host_profile --callgrind
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "flashjit/flashjit.h"
#include "flashjit/flashjit.hpp"

namespace {

// The engine opens the driver named by this variable (cudalib/driver_library.hpp, kLibcudaPathEnv).
constexpr const char* kDriverEnv = "FLASHJIT_LIBCUDA_PATH";

struct Options {
  long calls = 200000;  // per round
  int rounds = 5;
  bool c_abi = false;   // flashjit_forward_v2 instead of Engine::forward
  bool stream = false;  // a created stream instead of the legacy default stream (null)
  bool callgrind = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--calls" && i + 1 < argc) o.calls = std::atol(argv[++i]);
    else if (a == "--rounds" && i + 1 < argc) o.rounds = std::atoi(argv[++i]);
    else if (a == "--c-abi") o.c_abi = true;
    else if (a == "--stream") o.stream = true;
    else if (a == "--callgrind") o.callgrind = true;
    else {
      std::fprintf(stderr, "usage: %s [--calls N] [--rounds R] [--c-abi] [--stream] [--callgrind]\n", argv[0]);
      std::exit(2);
    }
  }
  if (o.callgrind) o.calls = std::min(o.calls, 1000L), o.rounds = 1;
  return o;
}

// One of the two routes, called `calls` times. Not inlined, and extern "C", so callgrind's
// --toggle-collect=timed_calls collects exactly the steady-state calls.
struct Route {
  flashjit::Engine* engine = nullptr;
  const flashjit::AttentionArgs* args = nullptr;
  flashjit_engine* c_engine = nullptr;
  const flashjit_attention_args_v2* c_args = nullptr;
  CUstream stream = nullptr;
};

}  // namespace

extern "C" __attribute__((noinline)) int timed_calls(const Route* r, long calls) {
  int failures = 0;
  if (r->c_engine) {
    for (long i = 0; i < calls; ++i) failures += flashjit_forward_v2(r->c_engine, r->c_args, r->stream) != FLASHJIT_OK;
  } else {
    for (long i = 0; i < calls; ++i) failures += !r->engine->forward(*r->args, r->stream).ok();
  }
  return failures;
}

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  const char* driver_path = std::getenv(kDriverEnv);
  if (!driver_path || !*driver_path) {
    std::fprintf(stderr, "set %s to the fake driver (build/fake_driver.so)\n", kDriverEnv);
    return 2;
  }
  // The same library the engine opens (one handle): make its primary context current here.
  void* drv = dlopen(driver_path, RTLD_NOW | RTLD_LOCAL);
  if (!drv) {
    std::fprintf(stderr, "dlopen %s: %s\n", driver_path, dlerror());
    return 2;
  }
  using Retain = int (*)(void**, int);
  using SetCurrent = int (*)(void*);
  using StreamCreate = int (*)(void**, unsigned);
  auto retain = reinterpret_cast<Retain>(dlsym(drv, "cuDevicePrimaryCtxRetain"));
  auto set_current = reinterpret_cast<SetCurrent>(dlsym(drv, "cuCtxSetCurrent"));
  auto stream_create = reinterpret_cast<StreamCreate>(dlsym(drv, "cuStreamCreate"));
  void* ctx = nullptr;
  if (!retain || !set_current || !stream_create || retain(&ctx, 0) != 0 || set_current(ctx) != 0) {
    std::fprintf(stderr, "%s is not bench/fake_driver.c's library\n", driver_path);
    return 2;
  }
  void* stream = nullptr;
  if (opt.stream && stream_create(&stream, 0) != 0) return 2;

  // B1 S64 H1 D64 fp16, contiguous [B, S, H, D]; 256-byte aligned like device allocations.
  constexpr std::int64_t B = 1, S = 64, H = 1, D = 64;
  constexpr std::size_t kBytes = B * S * H * D * 2;
  void* buf[4];
  for (void*& p : buf) p = std::aligned_alloc(256, kBytes);
  using flashjit::DType;
  using flashjit::TensorView;
  flashjit::AttentionArgs args;
  args.q = TensorView::bshd(buf[0], DType::f16, B, S, H, D);
  args.k = TensorView::bshd(buf[1], DType::f16, B, S, H, D);
  args.v = TensorView::bshd(buf[2], DType::f16, B, S, H, D);
  args.o = TensorView::bshd(buf[3], DType::f16, B, S, H, D);
  args.check_metadata = false;

  flashjit_attention_args_v2 c_args{};
  c_args.struct_size = sizeof c_args;
  c_args.abi_version = FLASHJIT_ABI_VERSION;
  flashjit_tensor* ct[4] = {&c_args.q, &c_args.k, &c_args.v, &c_args.o};
  const TensorView* views[4] = {&args.q, &args.k, &args.v, &args.o};
  for (int t = 0; t < 4; ++t) {
    ct[t]->data = views[t]->data;
    ct[t]->dtype = FLASHJIT_F16;
    for (int i = 0; i < 4; ++i) ct[t]->shape[i] = views[t]->shape[i], ct[t]->stride[i] = views[t]->stride[i];
  }

  auto engine = flashjit::Engine::create();
  if (!engine.ok()) return std::fprintf(stderr, "%s\n", engine.error().to_string().c_str()), 1;
  flashjit_engine* c_engine = nullptr;
  if (opt.c_abi && flashjit_engine_create(&c_engine) != FLASHJIT_OK)
    return std::fprintf(stderr, "%s\n", flashjit_last_error()), 1;

  Route route;
  route.stream = static_cast<CUstream>(stream);
  if (opt.c_abi) route.c_engine = c_engine, route.c_args = &c_args;
  else route.engine = engine->get(), route.args = &args;

  // The first call compiles (NVRTC, ~1 s) or reads the disk cache; say which kernel serves it.
  const auto t0 = std::chrono::steady_clock::now();
  if (opt.c_abi) {
    if (flashjit_forward_v2(c_engine, &c_args, stream) != FLASHJIT_OK)
      return std::fprintf(stderr, "first call: %s\n", flashjit_last_error()), 1;
  } else if (auto st = engine.value()->forward(args, static_cast<CUstream>(stream)); !st.ok()) {
    return std::fprintf(stderr, "first call: %s\n", st.error().to_string().c_str()), 1;
  }
  const double first_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  auto plan = engine.value()->plan(args, "sm_90a");
  std::printf("kernel: %s (first call %.0f ms)\n", plan.ok() ? plan->variant.name().c_str() : "?", first_ms);
  std::printf("route: %s, stream %s\n", opt.c_abi ? "flashjit_forward_v2" : "Engine::forward",
              opt.stream ? "created" : "null (legacy default)");

  timed_calls(&route, std::min(opt.calls, 10000L));  // warm the caches and branch predictors
  std::vector<double> ns;
  for (int r = 0; r < opt.rounds; ++r) {
    const auto a = std::chrono::steady_clock::now();
    const int failures = timed_calls(&route, opt.calls);
    const auto b = std::chrono::steady_clock::now();
    if (failures) return std::fprintf(stderr, "%d calls failed\n", failures), 1;
    ns.push_back(std::chrono::duration<double, std::nano>(b - a).count() / double(opt.calls));
  }
  std::sort(ns.begin(), ns.end());
  std::printf("ns/call: median %.1f, min %.1f, max %.1f (%d rounds of %ld calls)\n", ns[ns.size() / 2], ns.front(),
              ns.back(), opt.rounds, opt.calls);
  if (c_engine) flashjit_engine_destroy(c_engine);
  for (void* p : buf) std::free(p);
  return 0;
}
