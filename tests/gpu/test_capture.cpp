// forward() inside CUDA graphs and on several streams at once: a warm variant captures (no
// allocation, synchronization or host read on the call path), the graph replays with new input
// values, a cold variant refuses cleanly without breaking the capture, and two streams of one
// context run concurrently with correct results.
#include <thread>

#include "gpu_fixture.hpp"

using namespace flashjit;
using flashjit::gpu_test::Fixture;
using tools::CaseSpec;

namespace {

CaseSpec capture_case(std::uint64_t seed) {
  CaseSpec s;
  s.dtype = DType::bf16;
  s.batch = 2;
  s.heads_q = 8;
  s.heads_kv = 2;
  s.seqlen_q = s.seqlen_k = 777;
  s.head_dim_qk = s.head_dim_v = 128;
  s.mask = Mask::causal;
  s.lse = true;
  s.seed = seed;
  return s;
}

void check_case(const tools::AttentionCase& c) {
  auto r = c.check();
  REQUIRE(r.ok());
  std::printf("  %-70s rel_l2 %.2e\n", c.spec().describe().c_str(), r->rel_l2);
  CHECK(r->unwritten == 0);
  CHECK(r->rel_l2 <= gpu_test::tolerance(c.spec()));
  CHECK(r->lse_bad == 0);
}

}  // namespace

TEST_CASE("a warm variant captures into a graph that replays with new inputs") {
  Fixture& f = Fixture::get();
  const DriverLibrary& drv = f.gpu.driver();
  CUstream stream = nullptr;
  REQUIRE(drv.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  for (bool varlen : {false, true}) {
    CaseSpec s = capture_case(900 + varlen);
    if (varlen) {
      s.varlen_q = {300, 1, 1000, 64};
      s.varlen_k = {300, 50, 1000, 640};
      s.window = Window{200, 0};
      s.sinks = true;
    }
    auto c = tools::AttentionCase::create(f.gpu, s);
    REQUIRE(c.ok());
    REQUIRE(f.engine->forward(c->args(), stream).ok());  // warm: compiled, loaded, planned
    REQUIRE(drv.cuStreamSynchronize(stream) == CUDA_SUCCESS);

    const auto before = f.engine->stats();
    gpu_test::CapturedForward graph;
    gpu_test::capture_forward(c.value(), stream, graph);
    CHECK(f.engine->stats().compiles == before.compiles);

    for (std::uint64_t round = 0; round < 3; ++round) {
      REQUIRE(c->refill(7000 + round).ok());  // new values in the same buffers
      REQUIRE(c->poison().ok());
      REQUIRE(drv.cuGraphLaunch(graph.exec, stream) == CUDA_SUCCESS);
      REQUIRE(drv.cuStreamSynchronize(stream) == CUDA_SUCCESS);
      check_case(c.value());
    }
  }
  drv.cuStreamDestroy(stream);
}

TEST_CASE("a cold variant refuses to compile during a capture and leaves the capture intact") {
  Fixture& f = Fixture::get();
  const DriverLibrary& drv = f.gpu.driver();
  CUstream stream = nullptr;
  REQUIRE(drv.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  CaseSpec warm = capture_case(31), cold = capture_case(32);
  cold.head_dim_qk = cold.head_dim_v = 72;  // a variant no test has run
  cold.alibi = true;
  auto w = tools::AttentionCase::create(f.gpu, warm);
  auto c = tools::AttentionCase::create(f.gpu, cold);
  REQUIRE((w.ok() && c.ok()));
  REQUIRE(f.engine->forward(w->args(), stream).ok());
  REQUIRE(drv.cuStreamSynchronize(stream) == CUDA_SUCCESS);

  REQUIRE(drv.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  auto refused = f.engine->forward(c->args(), stream);
  auto fine = f.engine->forward(w->args(), stream);
  CUgraph graph = nullptr;
  CHECK(drv.cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message().find("captured") != std::string::npos);
  CHECK(fine.ok());
  CUgraphExec exec = nullptr;
  REQUIRE(drv.cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
  REQUIRE(w->poison().ok());
  REQUIRE(drv.cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
  REQUIRE(drv.cuStreamSynchronize(stream) == CUDA_SUCCESS);
  check_case(w.value());
  drv.cuGraphExecDestroy(exec);
  drv.cuGraphDestroy(graph);
  // After the capture the same call compiles and runs.
  REQUIRE(c->poison().ok());
  REQUIRE(f.engine->forward(c->args(), stream).ok());
  REQUIRE(drv.cuStreamSynchronize(stream) == CUDA_SUCCESS);
  check_case(c.value());
  drv.cuStreamDestroy(stream);
}

TEST_CASE("two streams of one context call forward at once") {
  Fixture& f = Fixture::get();
  const DriverLibrary& drv = f.gpu.driver();
  constexpr int kThreads = 2;
  constexpr int kRounds = 20;
  std::vector<tools::AttentionCase> cases;
  for (int t = 0; t < kThreads; ++t) {
    CaseSpec s = capture_case(40 + t);
    s.varlen_q = {500 + 100 * t, 33, 800};
    s.varlen_k = {500 + 100 * t, 900, 800};
    s.softcap = 30.f;
    auto c = tools::AttentionCase::create(f.gpu, s);
    REQUIRE(c.ok());
    cases.push_back(std::move(c).value());
  }
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t)
    pool.emplace_back([&, t] {
      drv.cuCtxSetCurrent(f.gpu.context());
      CUstream stream = nullptr;
      if (drv.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        errors[t] = "cuStreamCreate failed";
        return;
      }
      for (int i = 0; i < kRounds && errors[t].empty(); ++i)
        if (auto st = f.engine->forward(cases[std::size_t(t)].args(), stream); !st.ok()) errors[t] = st.error().to_string();
      if (drv.cuStreamSynchronize(stream) != CUDA_SUCCESS) errors[t] = "stream failed";
      drv.cuStreamDestroy(stream);
    });
  for (auto& th : pool) th.join();
  for (const auto& e : errors) CHECK_MESSAGE(e.empty(), e);
  for (const auto& c : cases) check_case(c);
}
