// flashjit-demo, the main job: specializes and compiles the default variants for sm_80 and
// sm_90a (no GPU needed), then, where a GPU is present, runs attention on random inputs, checks
// it against a float64 reference and prints time and TFLOP/s.
#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <thread>

#include "common/attention_case.hpp"
#include "common/command_line.hpp"

using namespace flashjit;

namespace {

std::vector<KernelVariant> default_variants(const Engine& engine, const std::string& arch) {
  std::vector<KernelVariant> out;
  for (DType dt : {DType::f16, DType::bf16})
    for (int d : {64, 128})
      for (Mask m : {Mask::none, Mask::causal}) {
        Semantics s;
        s.dtype = dt;
        s.head_dim_qk = s.head_dim_v = d;
        s.mask = m;
        out.push_back(engine.default_variant(s, arch).value());
      }
  return out;
}

int compile_all(const Engine& engine, const std::vector<std::string>& archs, int threads) {
  std::vector<std::pair<KernelVariant, std::string>> jobs;
  for (const auto& a : archs)
    for (auto& v : default_variants(engine, a)) jobs.emplace_back(v, a);
  std::printf("compiling %zu variants (%zu archs) on %d threads\n", jobs.size(), archs.size(), threads);
  std::atomic<std::size_t> next{0};
  std::atomic<int> failures{0};
  std::mutex print;
  std::size_t done = 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (std::size_t i; (i = next++) < jobs.size();) {
        auto r = engine.compile(jobs[i].first, jobs[i].second);
        std::lock_guard lock(print);
        ++done;
        if (r.ok()) {
          const std::string how = r->from_disk ? "disk cache" : std::to_string(int(r->compile_ms)) + " ms";
          std::printf("  [%2zu/%zu] %-44s %-7s %10s  %4zu KiB cubin\n", done, jobs.size(), jobs[i].first.name().c_str(),
                      jobs[i].second.c_str(), how.c_str(), r->cubin_bytes / 1024);
        } else {
          ++failures;
          std::printf("  [%2zu/%zu] FAILED %s for %s:\n%s\n", done, jobs.size(), jobs[i].first.name().c_str(),
                      jobs[i].second.c_str(), r.error().to_string().c_str());
        }
        std::fflush(stdout);
      }
    });
  for (auto& th : pool) th.join();
  std::printf("compiled in %.1f s, %d failures\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), failures.load());
  return failures.load();
}

int run_on_gpu(Engine& engine, const tools::GpuContext& gpu) {
  std::printf("\nGPU: %s (%s, %d SMs)\n", gpu.info().name.c_str(), gpu.info().arch.c_str(), gpu.info().sm_count);
  int bad = 0;
  for (Mask m : {Mask::none, Mask::causal}) {
    tools::CaseSpec check;
    check.batch = 2, check.seqlen_q = check.seqlen_k = 1024, check.heads_q = check.heads_kv = 8;
    check.head_dim_qk = check.head_dim_v = 128, check.mask = m, check.lse = true;
    auto c = tools::AttentionCase::create(gpu, check);
    if (!c.ok() || !c->poison().ok()) return std::printf("setup failed\n"), 1;
    if (auto st = engine.forward(c->args()); !st.ok()) return std::printf("%s\n", st.error().to_string().c_str()), 1;
    auto r = c->check();
    if (!r.ok()) return std::printf("%s\n", r.error().to_string().c_str()), 1;
    const bool ok = r->unwritten == 0 && r->rel_l2 < 2e-3 && r->lse_bad == 0;
    bad += !ok;
    std::printf("check  %-62s rel. L2 vs float64 %.1e  %s\n", check.describe().c_str(), r->rel_l2, ok ? "OK" : "FAILED");
  }
  for (int d : {64, 128})
    for (Mask m : {Mask::none, Mask::causal}) {
      tools::CaseSpec spec;  // the anchors' prefill shape: 16384 tokens, Hq * D = 2048
      spec.batch = 4, spec.seqlen_q = spec.seqlen_k = 4096, spec.heads_q = spec.heads_kv = 2048 / d;
      spec.head_dim_qk = spec.head_dim_v = d, spec.mask = m;
      auto c = tools::AttentionCase::create(gpu, spec, /*keep_host=*/false);
      if (!c.ok()) return std::printf("%s\n", c.error().to_string().c_str()), 1;
      auto ms = tools::time_ms(gpu.driver(), [&](int) { return engine.forward(c->args()); }, 5, 20);
      if (!ms.ok()) return std::printf("%s\n", ms.error().to_string().c_str()), 1;
      std::printf("time   %-62s %7.3f ms  %6.1f TFLOP/s\n", spec.describe().c_str(), ms.value(),
                  tools::attention_flops(spec) / (ms.value() * 1e-3) / 1e12);
    }
  return bad;
}

int run(int argc, char** argv) {
  CLI::App app{"flashjit-demo: specialize, compile and (with a GPU) run and check fused attention", "flashjit-demo"};
  std::vector<std::string> archs{"sm_80", "sm_90a"};
  int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  bool no_gpu = false;
  const CLI::Validator arch_name(
      [](std::string& a) {
        auto p = Arch::parse(a);
        return p.ok() ? std::string() : p.error().message();
      },
      "");
  app.add_option("--arch", archs, "archs to compile for without a GPU")->check(arch_name)->capture_default_str();
  app.add_option("--threads", threads, "compile threads")->check(tools::at_least(1))->capture_default_str();
  app.add_flag("--no-gpu", no_gpu, "compile only, even where a GPU is present");
  if (auto code = tools::parse_command_line(app, argc, argv, std::cout, std::cerr)) return *code;

  std::printf("%s\n", version().c_str());
  auto engine = Engine::create().value();
  int failures = compile_all(*engine, archs, threads);
  if (no_gpu) return failures ? 1 : 0;
  auto gpu = tools::GpuContext::open(0);
  if (!gpu.ok()) {
    std::printf("\nno GPU here (%s): compiled for %zu archs only; nothing was run.\n", gpu.error().message().c_str(),
                archs.size());
    return failures ? 1 : 0;
  }
  failures += run_on_gpu(*engine, gpu.value());
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashjit-demo: %s\n", e.what());
    return 1;
  }
}
