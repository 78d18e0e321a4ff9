// Autotuning end to end on real kernels, and a second process that finds the tuned choice and
// the compiled kernel on disk and compiles nothing.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gpu_fixture.hpp"

using namespace flashjit;

namespace {

std::string g_self;  // path of this test binary, set by main

tools::CaseSpec tune_case() {
  tools::CaseSpec s;
  s.batch = 2, s.seqlen_q = s.seqlen_k = 1000, s.heads_q = s.heads_kv = 4, s.head_dim_qk = s.head_dim_v = 64;
  s.mask = Mask::causal;
  return s;
}

std::string run_child(const std::string& cache_dir) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    setenv("FLASHJIT_CACHE_DIR", cache_dir.c_str(), 1);
    execl(g_self.c_str(), g_self.c_str(), "--second-process", nullptr);
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, std::size_t(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  return out;
}

}  // namespace

namespace flashjit::gpu_test {
void set_self_path(const char* p) { g_self = p; }

// Runs in the child: offline mode, must find the tuned tiling and the kernel on disk.
int second_process_main() {
  auto gpu = tools::GpuContext::open(0).value();
  EngineOptions o;
  o.tune_mode = TuneMode::offline;
  auto engine = Engine::create(o).value();
  auto c = tools::AttentionCase::create(gpu, tune_case()).value();
  if (!c.poison().ok()) return 3;
  if (auto st = engine->forward(c.args()); !st.ok()) return std::printf("%s\n", st.error().to_string().c_str()), 4;
  gpu.driver().cuCtxSynchronize();
  auto r = c.check().value();
  const auto s = engine->stats();
  std::printf("compiles=%llu disk_hits=%llu module_loads=%llu tunes=%llu rel_l2=%g unwritten=%lld\n",
              (unsigned long long)s.compiles, (unsigned long long)s.disk_hits, (unsigned long long)s.module_loads,
              (unsigned long long)s.tunes, r.rel_l2, (long long)r.unwritten);
  return 0;
}
}  // namespace flashjit::gpu_test

TEST_CASE("first-use tuning stores a choice that a second process uses without compiling") {
  auto& f = gpu_test::Fixture::get();
  const std::string dir = std::filesystem::temp_directory_path() / ("flashjit-tune-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  EngineOptions o;
  o.tune_mode = TuneMode::first_use;
  o.cache_dir = dir;
  auto engine = Engine::create(o).value();
  auto c = tools::AttentionCase::create(f.gpu, tune_case()).value();
  REQUIRE(c.poison().ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto st = engine->forward(c.args());
  REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.error().to_string()));
  const double first_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(f.gpu.driver().cuCtxSynchronize() == CUDA_SUCCESS);
  auto r = c.check().value();
  CHECK(r.unwritten == 0);
  CHECK(r.rel_l2 < 2e-3);
  CHECK(engine->stats().tunes == 1);
  std::printf("  first call with tuning: %.2f s\n", first_s);
  // Same bucket, another shape: no second tuning.
  tools::CaseSpec near = tune_case();
  near.seqlen_q = near.seqlen_k = 900;
  auto c2 = tools::AttentionCase::create(f.gpu, near).value();
  REQUIRE(engine->forward(c2.args()).ok());
  CHECK(engine->stats().tunes == 1);
  bool found_tuning_file = false;
  for (auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.path().extension() == ".json") found_tuning_file = true;
  CHECK(found_tuning_file);

  const std::string out = run_child(dir);
  std::printf("  second process: %s", out.c_str());
  CHECK(out.find("compiles=0 ") != std::string::npos);
  CHECK(out.find("disk_hits=1 ") != std::string::npos);
  CHECK(out.find("tunes=0 ") != std::string::npos);
  CHECK(out.find("unwritten=0") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("offline tuning through Engine::tune reports every candidate and beats or ties the default") {
  auto& f = gpu_test::Fixture::get();
  (void)f;
  const std::string dir = std::filesystem::temp_directory_path() / ("flashjit-tune2-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  EngineOptions o;
  o.cache_dir = dir;
  auto engine = Engine::create(o).value();
  TuneRequest req;
  req.semantics.dtype = DType::bf16;
  req.semantics.head_dim_qk = req.semantics.head_dim_v = 128;
  req.seqlen_q = req.seqlen_k = 2048;
  req.batch_x_heads = 32;
  std::size_t progress_calls = 0;
  req.progress = [&](std::size_t, std::size_t, const std::string&, double) { ++progress_calls; };
  auto r = engine->tune(req);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().to_string()));
  std::printf("  tuned %s in %.2f s: %s %.3f ms (default %s %.3f ms), %zu candidates\n", r->key.c_str(), r->seconds,
              r->chosen.tiling.name().c_str(), r->ms, r->default_tiling.name().c_str(), r->default_ms.value_or(-1),
              r->candidates.size());
  CHECK_FALSE(r->reused);
  CHECK(r->candidates.size() >= 4);
  CHECK(progress_calls >= r->candidates.size() - 1);
  REQUIRE(r->default_ms.has_value());
  CHECK(r->ms <= *r->default_ms);
  // Asking again reuses the stored result.
  auto again = engine->tune(req);
  REQUIRE(again.ok());
  CHECK(again->reused);
  CHECK(again->chosen == r->chosen);
  std::filesystem::remove_all(dir);
}
