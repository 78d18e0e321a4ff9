// flashjit-engine-bench: the engine's own costs, not the kernels'.
//   dispatch:     host time per forward() call of a cached variant (tiny problem, no sync)
//   first-launch: in fresh child processes with a warm disk cache, the first forward() of each
//                 of several variants (disk read + module load + launch), and the one-time
//                 process costs (driver init, context) reported apart
//   cold-compile: NVRTC time per variant with an empty cache
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "common/attention_case.hpp"
#include "common/command_line.hpp"
#include "compiler.hpp"
#include "kernel_loader.hpp"
#include "kernel_source.hpp"
#include "problem.hpp"

using namespace flashjit;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

std::vector<tools::CaseSpec> variant_cases() {
  std::vector<tools::CaseSpec> out;
  for (DType dt : {DType::f16, DType::bf16})
    for (int d : {64, 128})
      for (Mask m : {Mask::none, Mask::causal}) {
        tools::CaseSpec s;
        s.dtype = dt, s.head_dim_qk = s.head_dim_v = d, s.mask = m;
        s.batch = 1, s.seqlen_q = s.seqlen_k = 256, s.heads_q = s.heads_kv = 2;
        out.push_back(s);
      }
  return out;
}

// Host time of `calls` back-to-back calls, synchronizing between rounds so the launch queue
// never fills (a full queue would make the host wait for the GPU and time the kernels instead).
template <class F>
Result<double> host_us_per_call(const DriverLibrary& drv, int calls, F&& fn) {
  std::vector<double> rounds;
  for (int round = 0; round < 51; ++round) {
    drv.cuCtxSynchronize();
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) FJ_TRY(fn());
    rounds.push_back(ms_since(t0) * 1000.0 / calls);
  }
  drv.cuCtxSynchronize();
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

int dispatch(int calls, nlohmann::json& out) {
  auto gpu = tools::GpuContext::open(0);
  if (!gpu.ok()) return std::fprintf(stderr, "%s\n", gpu.error().to_string().c_str()), 2;
  const DriverLibrary& drv = gpu->driver();
  auto engine = Engine::create().value();
  tools::CaseSpec s;
  s.batch = 1, s.seqlen_q = s.seqlen_k = 64, s.heads_q = s.heads_kv = 1, s.head_dim_qk = s.head_dim_v = 64;
  auto c = tools::AttentionCase::create(*gpu, s, false).value();
  for (int i = 0; i < 100; ++i) (void)engine->forward(c.args());  // compile, load, warm
  auto engine_us = host_us_per_call(drv, calls, [&] { return engine->forward(c.args()); });
  if (!engine_us.ok()) return std::fprintf(stderr, "%s\n", engine_us.error().to_string().c_str()), 1;

  // Baseline: the driver alone launching an empty kernel with the same argument size.
  const char* src = "struct P { char b[sizeof(void*) * 40]; };\nextern \"C\" __global__ void empty(const P p) {}\n";
  auto cubin = compile_cubin({"empty", src, Arch::parse(gpu->info().arch).value()});
  if (!cubin.ok()) return std::fprintf(stderr, "%s\n", cubin.error().to_string().c_str()), 1;
  CUmodule mod = nullptr;
  CUfunction fn = nullptr;
  drv.cuModuleLoadData(&mod, cubin->cubin.data());
  drv.cuModuleGetFunction(&fn, mod, "empty");
  char params[sizeof(void*) * 40] = {0};
  void* args[] = {params};
  auto raw_us = host_us_per_call(drv, calls, [&]() -> Status {
    FJ_CU(drv, cuLaunchKernel(fn, 1, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr));
    return {};
  });
  // The same launch through cuLaunchKernelEx, which the engine uses (launch plans may set a
  // cluster shape), and the engine's host work alone (validation), to attribute the difference.
  auto raw_ex_us = host_us_per_call(drv, calls, [&]() -> Status {
    CUlaunchConfig cfg{};
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = 128, cfg.blockDimY = cfg.blockDimZ = 1;
    FJ_CU(drv, cuLaunchKernelEx(&cfg, fn, args, nullptr));
    return {};
  });
  // The engine's own kernel launched directly (its plan built once, the module compiled here):
  // the fair baseline, since launching a real kernel costs the driver more than an empty one.
  const Arch arch = Arch::parse(gpu->info().arch).value();
  auto problem = validate_problem(c.args());
  if (!problem.ok()) return 1;
  const KernelFamily* family = pick_family(arch, problem->semantics, &problem->shape);
  const KernelVariant variant{family->name(), problem->semantics, family->default_tiling(arch, problem->semantics, &problem->shape)};
  auto own_cubin = compile_cubin({"own", render_source(*family, variant), arch});
  if (!own_cubin.ok()) return std::fprintf(stderr, "%s\n", own_cubin.error().to_string().c_str()), 1;
  CUmodule own_mod = nullptr;
  LoadedModule own;
  drv.cuModuleLoadData(&own_mod, own_cubin->cubin.data());
  for (const EntryPoint& e : family->entry_points(variant)) {
    CUfunction f = nullptr;
    drv.cuModuleGetFunction(&f, own_mod, e.name);
    drv.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, e.smem_bytes);
    own.functions[own.count++] = f;
  }
  DeviceContextInfo info;
  info.arch = arch;
  info.sm_count = gpu->info().sm_count;
  LaunchPlan own_plan;
  NoWorkspace no_workspace;
  if (!family->plan(problem.value(), variant, info, no_workspace, own_plan).ok()) return 1;
  auto own_us = host_us_per_call(drv, calls, [&] { return KernelLoader::launch(drv, own, own_plan, nullptr); });
  drv.cuModuleUnload(own_mod);
  auto validate_us = host_us_per_call(drv, calls * 10, [&]() -> Status {
    auto p = validate_problem(c.args());
    if (!p.ok()) return std::move(p).error();
    return {};
  });
  drv.cuModuleUnload(mod);
  if (!raw_us.ok() || !raw_ex_us.ok() || !validate_us.ok() || !own_us.ok()) return 1;
  std::printf("dispatch: %.2f us host time per forward() (B1 S64 H1 D64 f16; median of 51 rounds of %d calls)\n",
              engine_us.value(), calls);
  std::printf("          %.2f us per bare cuLaunchKernel of an empty kernel, same argument size: engine overhead %.2f us\n",
              raw_us.value(), engine_us.value() - raw_us.value());
  std::printf("          %.2f us per bare cuLaunchKernelEx; argument validation alone %.3f us\n", raw_ex_us.value(),
              validate_us.value());
  std::printf("          %.2f us per direct launch of the engine's own kernel and plan: engine overhead over it %.2f us\n",
              own_us.value(), engine_us.value() - own_us.value());
  // A decode call (B1, 32:8 heads, one query, 4096 keys): the decode family, its split count
  // chosen per call and a second (combine) launch.
  tools::CaseSpec ds;
  ds.dtype = DType::bf16, ds.batch = 1, ds.seqlen_q = 1, ds.seqlen_k = 4096, ds.heads_q = 32, ds.heads_kv = 8;
  ds.head_dim_qk = ds.head_dim_v = 128;
  auto dc = tools::AttentionCase::create(*gpu, ds, false).value();
  for (int i = 0; i < 100; ++i) (void)engine->forward(dc.args());
  auto decode_us = host_us_per_call(drv, calls, [&] { return engine->forward(dc.args()); });
  if (!decode_us.ok()) return std::fprintf(stderr, "%s\n", decode_us.error().to_string().c_str()), 1;
  std::printf("          %.2f us per decode forward() (B1 32:8 Sq1 Sk4096 bf16, %s), %+.2f us against the prefill call\n",
              decode_us.value(), engine->plan(dc.args(), gpu->info().arch)->variant.family.c_str(),
              decode_us.value() - engine_us.value());
  out["decode_dispatch_us_per_call"] = decode_us.value();
  out["dispatch_us_per_call"] = engine_us.value();
  out["raw_launch_us_per_call"] = raw_us.value();
  out["raw_launch_ex_us_per_call"] = raw_ex_us.value();
  out["validate_us_per_call"] = validate_us.value();
  out["own_kernel_launch_us_per_call"] = own_us.value();
  return 0;
}

// Child: one fresh process, warm disk cache; prints JSON of its timings on stdout.
int first_launch_child() {
  const auto t0 = Clock::now();
  auto gpu = tools::GpuContext::open(0);
  if (!gpu.ok()) return 2;
  const double init_ms = ms_since(t0);
  const auto t1 = Clock::now();
  auto engine = Engine::create().value();
  const double engine_ms = ms_since(t1);
  std::vector<tools::AttentionCase> cases;
  for (const auto& s : variant_cases()) cases.push_back(tools::AttentionCase::create(*gpu, s, false).value());
  gpu->driver().cuCtxSynchronize();
  nlohmann::json j;
  j["driver_and_context_ms"] = init_ms;
  j["engine_create_ms"] = engine_ms;
  for (auto& c : cases) {
    const auto t = Clock::now();
    auto st = engine->forward(c.args());
    const double ms = ms_since(t);
    if (!st.ok()) return std::fprintf(stderr, "%s\n", st.error().to_string().c_str()), 1;
    j["first_launch_ms"].push_back(ms);
  }
  const auto stats = engine->stats();
  j["compiles"] = stats.compiles;
  j["disk_hits"] = stats.disk_hits;
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

int first_launch(const char* self, int processes, nlohmann::json& out) {
  // Warm the cache (and count the cold compiles) in this process first.
  {
    auto gpu = tools::GpuContext::open(0);
    if (!gpu.ok()) return std::fprintf(stderr, "%s\n", gpu.error().to_string().c_str()), 2;
    auto engine = Engine::create().value();
    for (const auto& s : variant_cases()) {
      auto c = tools::AttentionCase::create(*gpu, s, false).value();
      if (auto st = engine->forward(c.args()); !st.ok()) return std::fprintf(stderr, "%s\n", st.error().to_string().c_str()), 1;
    }
    gpu->driver().cuCtxSynchronize();
  }
  std::vector<double> all;
  for (int p = 0; p < processes; ++p) {
    int fds[2];
    if (pipe(fds) != 0) return 1;
    const pid_t pid = fork();
    if (pid == 0) {
      dup2(fds[1], 1);
      close(fds[0]);
      execl(self, self, "first-launch-child", nullptr);
      _exit(127);
    }
    close(fds[1]);
    std::string text;
    char buf[4096];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, std::size_t(n));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::fprintf(stderr, "child failed\n"), 1;
    auto j = nlohmann::json::parse(text);
    out["first_launch_processes"].push_back(j);
    for (double ms : j["first_launch_ms"]) all.push_back(ms);
    std::printf("process %d: driver+context %.0f ms, engine %.2f ms, first launch per variant (ms):", p,
                j["driver_and_context_ms"].get<double>(), j["engine_create_ms"].get<double>());
    for (double ms : j["first_launch_ms"]) std::printf(" %.2f", ms);
    std::printf("  (compiles %d, disk hits %d)\n", j["compiles"].get<int>(), j["disk_hits"].get<int>());
  }
  std::sort(all.begin(), all.end());
  std::printf("first launch from a warm disk cache: median %.2f ms, max %.2f ms over %zu (process, variant) pairs\n",
              all[all.size() / 2], all.back(), all.size());
  out["first_launch_median_ms"] = all[all.size() / 2];
  out["first_launch_max_ms"] = all.back();
  return 0;
}

int cold_compile(nlohmann::json& out) {
  EngineOptions o;
  o.disk_cache = false;
  auto engine = Engine::create(o).value();
  std::vector<double> ms;
  for (const char* arch : {"sm_80", "sm_90a"})
    for (const auto& s : variant_cases()) {
      Semantics sem;
      sem.dtype = s.dtype, sem.head_dim_qk = sem.head_dim_v = int(s.head_dim_qk), sem.mask = s.mask;
      auto v = engine->default_variant(sem, arch).value();
      auto r = engine->compile(v, arch);
      if (!r.ok()) return std::fprintf(stderr, "%s\n", r.error().to_string().c_str()), 1;
      std::printf("cold compile %-44s %-7s %7.0f ms\n", v.name().c_str(), arch, r->compile_ms);
      ms.push_back(r->compile_ms);
      out["cold_compile"].push_back({{"variant", v.name()}, {"arch", arch}, {"ms", r->compile_ms}});
    }
  std::sort(ms.begin(), ms.end());
  std::printf("cold NVRTC compile: median %.0f ms, max %.0f ms over %zu variants\n", ms[ms.size() / 2], ms.back(), ms.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "first-launch-child") return first_launch_child();
  CLI::App app{"flashjit-engine-bench: host-side costs of the engine (dispatch, first launch, cold compile)",
               "flashjit-engine-bench"};
  std::string what = "all", json_path;
  int calls = 200, processes = 3;
  app.add_option("what", what, "dispatch, first-launch, cold-compile or all")
      ->check(tools::one_of({"dispatch", "first-launch", "cold-compile", "all"}))
      ->capture_default_str();
  app.add_option("--calls", calls, "forward() calls per dispatch round (kept below the launch queue depth)")
      ->check(tools::at_least(1))
      ->capture_default_str();
  app.add_option("--processes", processes, "fresh processes for first-launch")->check(tools::at_least(1))->capture_default_str();
  app.add_option("--json", json_path, "write the numbers as JSON");
  if (auto code = tools::parse_command_line(app, argc, argv, std::cout, std::cerr)) return *code;
  nlohmann::json out;
  int rc = 0;
  if (what == "cold-compile" || what == "all") rc |= cold_compile(out);
  if (what == "first-launch" || what == "all") rc |= first_launch(argv[0], processes, out);
  if (what == "dispatch" || what == "all") rc |= dispatch(calls, out);
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(1);
  return rc;
}
