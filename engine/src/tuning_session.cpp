#include "tuning_session.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>

#include "backward_problem.hpp"
#include "base/host_float.hpp"
#include "base/printable.hpp"
#include "kernel_family.hpp"
#include "problem.hpp"

namespace flashjit {
namespace {

constexpr int kWarmupLaunches = 2;  // the first launch of a module pays lazy loading
constexpr int kTimedLaunches = 7;   // median of 7: robust to one or two outliers
constexpr int kMaxLocalBytes = 64;  // more spill than this never wins; skip timing it
constexpr std::int64_t kRegistersPerSm = 65536;  // every arch from sm_80 to sm_90
// Typical values of the run-time options when a bucket's variant has them (the per-call scalars'
// are their rows' in flashjit/scalars.h).
constexpr std::int64_t kRepresentativeWindow = 1024;  // Mistral's and Gemma's local layers use 1K-4K
constexpr float kRepresentativeAlibiSlope = 0.0625f; // 2^-4: the middle of ALiBi's geometric slopes

// Fast reproducible uniform values in [-1, 1): random, never all zeros.
std::vector<unsigned char> random_bytes(std::size_t count, DType dt, std::uint64_t seed) {
  std::vector<unsigned char> out(count * dtype_size(dt));
  std::uint64_t x = seed;
  for (std::size_t i = 0; i < count; ++i) {
    x += 0x9E3779B97F4A7C15ull;
    std::uint64_t z = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    const float f = float((z >> 40) & 0xffffff) / float(1 << 23) - 1.0f;
    if (dt == DType::f32) reinterpret_cast<float*>(out.data())[i] = f;
    else reinterpret_cast<std::uint16_t*>(out.data())[i] = dt == DType::f16 ? float_to_f16(f) : float_to_bf16(f);
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<TuningSession>> TuningSession::create(const DriverLibrary& drv, CUcontext ctx,
                                                             const DeviceContextInfo& info, KernelLoader& loader,
                                                             const autotune::TuningKey& key, Log log) {
  std::unique_ptr<TuningSession> s(new TuningSession());
  s->drv_ = &drv, s->ctx_ = ctx, s->info_ = info, s->loader_ = &loader, s->key_ = key, s->log_ = std::move(log);
  const Semantics& sem = key.semantics;
  const ProblemShape p = autotune::representative_problem(key);
  // Random device data of `count` elements (or fp32 values in [lo, hi) for small arrays).
  auto upload = [&](const std::vector<unsigned char>& bytes, std::size_t alloc_bytes) -> Result<CUdeviceptr> {
    CUdeviceptr d = 0;
    FJ_CU(drv, cuMemAlloc(&d, std::max<std::size_t>(alloc_bytes, 1)));
    s->buffers_.push_back(d);
    if (!bytes.empty()) FJ_CU(drv, cuMemcpyHtoD(d, bytes.data(), bytes.size()));
    return d;
  };
  auto tensor = [&](std::int64_t rows, std::int64_t heads, int dim, bool random, std::uint64_t seed) -> Result<CUdeviceptr> {
    const std::size_t count = std::size_t(p.batch * rows * heads * dim);
    return upload(random ? random_bytes(count, sem.dtype, seed) : std::vector<unsigned char>{}, count * dtype_size(sem.dtype));
  };
  // A backward family's candidates are timed on a backward call: o, the LSE and dO are inputs
  // then, and the forward's arguments live in the session's BackwardArgs.
  const KernelFamily* family = find_family(key.family);
  const bool backward = family && family->pass() == Pass::backward;
  auto q = tensor(p.seqlen_q, p.heads_q, sem.head_dim_qk, true, 0x5eed);
  auto k = q.ok() ? tensor(p.seqlen_k, p.heads_kv, sem.head_dim_qk, true, 0x5eed + 1) : q;
  auto v = k.ok() ? tensor(p.seqlen_k, p.heads_kv, sem.head_dim_v, true, 0x5eed + 2) : k;
  auto o = v.ok() ? tensor(p.seqlen_q, p.heads_q, sem.head_dim_v, backward, 0x5eed + 3) : v;
  if (!o.ok()) return std::move(o).error();
  AttentionArgs& a = backward ? s->backward_args_.forward : s->args_;
  const auto ptr = [](CUdeviceptr d) { return reinterpret_cast<const void*>(d); };
  a.q = TensorView::bshd(ptr(q.value()), sem.dtype, p.batch, p.seqlen_q, p.heads_q, sem.head_dim_qk);
  a.k = TensorView::bshd(ptr(k.value()), sem.dtype, p.batch, p.seqlen_k, p.heads_kv, sem.head_dim_qk);
  a.v = TensorView::bshd(ptr(v.value()), sem.dtype, p.batch, p.seqlen_k, p.heads_kv, sem.head_dim_v);
  a.o = TensorView::bshd(ptr(o.value()), sem.dtype, p.batch, p.seqlen_q, p.heads_q, sem.head_dim_v);
  if (sem.write_lse || backward) {  // the backward's LSE input: zeros keep every exponential finite
    const std::size_t rows = std::size_t(p.batch * p.heads_q * p.seqlen_q);
    auto lse = upload(std::vector<unsigned char>(backward ? rows * sizeof(float) : 0), rows * sizeof(float));
    if (!lse.ok()) return std::move(lse).error();
    a.lse = LseView::contiguous(reinterpret_cast<float*>(lse.value()), p.batch, p.heads_q, p.seqlen_q);
  }
  a.mask = sem.mask;
  a.fp32_math = sem.fp32_math;
  // The result-changing options, each at a typical value: tuning must time the kernel the
  // bucket's problems run, with its masks, transforms and extra reads.
  auto floats = [&](std::size_t n, float value) {
    std::vector<unsigned char> b(n * sizeof(float));
    for (std::size_t i = 0; i < n; ++i) std::memcpy(b.data() + i * sizeof(float), &value, sizeof(float));
    return upload(b, b.size());
  };
  if (sem.varlen) {  // one sequence per batch entry, each of the bucket's length
    std::vector<unsigned char> cq(2 * sizeof(std::int32_t)), ck(2 * sizeof(std::int32_t));
    const std::int32_t q_end = std::int32_t(p.seqlen_q), k_end = std::int32_t(p.seqlen_k), zero = 0;
    std::memcpy(cq.data(), &zero, 4), std::memcpy(cq.data() + 4, &q_end, 4);
    std::memcpy(ck.data(), &zero, 4), std::memcpy(ck.data() + 4, &k_end, 4);
    auto dq = upload(cq, cq.size());
    auto dk = dq.ok() ? upload(ck, ck.size()) : dq;
    if (!dk.ok()) return std::move(dk).error();
    a.varlen = Varlen{reinterpret_cast<const std::int32_t*>(dq.value()), reinterpret_cast<const std::int32_t*>(dk.value()),
                      1, p.seqlen_q, p.seqlen_k};
  }
  if (sem.window) a.window = Window{kRepresentativeWindow, sem.mask == Mask::causal ? 0 : kRepresentativeWindow};
#define FJ_TYPICAL_SCALAR(type, field, rule, constant, tag, typical, backward, params, why) \
  if (sem.field) a.field = typical;  // the row's typical value (flashjit/scalars.h)
  FLASHJIT_SCALAR_ROWS(FJ_TYPICAL_SCALAR)
#undef FJ_TYPICAL_SCALAR
  if (sem.alibi) {
    auto slopes = floats(std::size_t(p.heads_q), kRepresentativeAlibiSlope);
    if (!slopes.ok()) return std::move(slopes).error();
    a.alibi = Alibi{reinterpret_cast<const float*>(slopes.value()), 0};
  }
  if (sem.sinks) {
    auto sinks = floats(std::size_t(p.heads_q), 0.f);
    if (!sinks.ok()) return std::move(sinks).error();
    a.sinks = reinterpret_cast<const float*>(sinks.value());
  }
  // Twice the L2, rewritten before each timed launch, so inputs never start cached.
  s->flush_bytes_ = std::size_t(std::max(info.l2_bytes, 1 << 20)) * 2;
  FJ_CU(drv, cuMemAlloc(&s->flush_, s->flush_bytes_));
  FJ_CU(drv, cuEventCreate(&s->start_, CU_EVENT_DEFAULT));
  FJ_CU(drv, cuEventCreate(&s->stop_, CU_EVENT_DEFAULT));
  if (backward) {  // dO random, the gradients written by every timed launch
    BackwardArgs& b = s->backward_args_;
    auto dout = tensor(p.seqlen_q, p.heads_q, sem.head_dim_v, true, 0x5eed + 4);
    auto dq = dout.ok() ? tensor(p.seqlen_q, p.heads_q, sem.head_dim_qk, false, 0) : dout;
    auto dk = dq.ok() ? tensor(p.seqlen_k, p.heads_kv, sem.head_dim_qk, false, 0) : dq;
    auto dv = dk.ok() ? tensor(p.seqlen_k, p.heads_kv, sem.head_dim_v, false, 0) : dk;
    if (!dv.ok()) return std::move(dv).error();
    b.dout = TensorView::bshd(ptr(dout.value()), sem.dtype, p.batch, p.seqlen_q, p.heads_q, sem.head_dim_v);
    b.dq = TensorView::bshd(ptr(dq.value()), sem.dtype, p.batch, p.seqlen_q, p.heads_q, sem.head_dim_qk);
    b.dk = TensorView::bshd(ptr(dk.value()), sem.dtype, p.batch, p.seqlen_k, p.heads_kv, sem.head_dim_qk);
    b.dv = TensorView::bshd(ptr(dv.value()), sem.dtype, p.batch, p.seqlen_k, p.heads_kv, sem.head_dim_v);
    b.deterministic = sem.deterministic;
  }
  auto problem = backward ? validate_backward(s->backward_args_) : validate_problem(a);
  if (!problem.ok()) return std::move(problem).error().with("tuning_key", key.to_string());
  if (problem->semantics != sem)
    return Error(Code::internal, "the representative problem of " + key.to_string() + " has semantics " +
                                     problem->semantics.name());
  s->problem_ = problem.value();
  return s;
}

TuningSession::~TuningSession() {
  if (!drv_) return;
  for (CUdeviceptr d : buffers_) drv_->cuMemFree(d);
  if (flush_) drv_->cuMemFree(flush_);
  if (start_) drv_->cuEventDestroy(start_);
  if (stop_) drv_->cuEventDestroy(stop_);
}

void TuningSession::precompile(const std::vector<Tiling>& candidates, unsigned threads) {
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  const unsigned n = std::max(1u, std::min<unsigned>(threads, unsigned(candidates.size())));
  for (unsigned t = 0; t < n; ++t)
    pool.emplace_back([&] {
      for (std::size_t i; (i = next++) < candidates.size();) {
        const KernelVariant v{key_.family, key_.semantics, candidates[i]};
        if (check_variant(v, info_.arch).ok()) (void)loader_->binary(v, info_.arch);  // failures resurface in measure
      }
    });
  for (auto& th : pool) th.join();
}

autotune::Prune TuningSession::prune() {
  return [this](const Tiling& t) -> std::optional<std::string> {
    const KernelVariant v{key_.family, key_.semantics, t};
    if (auto st = check_variant(v, info_.arch); !st.ok()) return st.error().message();
    const int smem = variant_smem_bytes(v);
    if (smem > info_.smem_optin)
      return "needs " + std::to_string(smem) + " bytes of shared memory, the device allows " + std::to_string(info_.smem_optin);
    auto k = loader_->get(*drv_, ctx_, info_, v);
    if (!k.ok()) return "does not load: " + k.error().message();
    if (k->local_bytes > kMaxLocalBytes) return "spills " + std::to_string(k->local_bytes) + " bytes to local memory";
    // Registers per thread times the largest block the plan launches must fit an SM's file.
    LaunchPlan plan;
    NoWorkspace no_workspace;
    if (auto st = find_family(v.family)->plan(problem_, v, info_, no_workspace, plan); !st.ok())
      return st.error().message();
    for (int i = 0; i < plan.count; ++i) {
      const Dim3& b = plan.kernels[i].block;
      if (std::int64_t(k->registers) * b.x * b.y * b.z > kRegistersPerSm) return "needs more registers than an SM has";
    }
    return std::nullopt;
  };
}

autotune::Measure TuningSession::measure() {
  return [this](const Tiling& t) { return time(t); };
}

namespace {

// A timed candidate's workspace: a buffer of its own, zeroed whole (which covers the prefix its
// kernels expect zero), freed with the session's other buffers.
class SessionWorkspace final : public WorkspaceSource {
 public:
  SessionWorkspace(const DriverLibrary& drv, std::vector<CUdeviceptr>& buffers) : drv_(drv), buffers_(buffers) {}
  Result<CUdeviceptr> get(std::size_t bytes, std::size_t) override {
    CUdeviceptr p = 0;
    FJ_CU(drv_, cuMemAlloc(&p, bytes));
    buffers_.push_back(p);
    FJ_CU(drv_, cuMemsetD8(p, 0, bytes));
    return p;
  }

 private:
  const DriverLibrary& drv_;
  std::vector<CUdeviceptr>& buffers_;
};

}  // namespace

Result<double> TuningSession::time(const Tiling& t) {
  const KernelVariant v{key_.family, key_.semantics, t};
  const KernelFamily* family = find_family(v.family);
  if (!family) return Error(Code::invalid_argument, "unknown kernel family '" + v.family + "'");
  auto m = loader_->get(*drv_, ctx_, info_, v);
  if (!m.ok()) return std::move(m).error();
  SessionWorkspace workspace(*drv_, buffers_);
  LaunchPlan plan;
  FJ_TRY(family->plan(problem_, v, info_, workspace, plan));
  for (int i = 0; i < kWarmupLaunches; ++i) FJ_TRY(KernelLoader::launch(*drv_, m.value(), plan, nullptr));
  std::vector<float> ms;
  for (int i = 0; i < kTimedLaunches; ++i) {
    FJ_CU(*drv_, cuMemsetD8(flush_, static_cast<unsigned char>(i), flush_bytes_));
    FJ_CU(*drv_, cuEventRecord(start_, nullptr));
    FJ_TRY(KernelLoader::launch(*drv_, m.value(), plan, nullptr));
    FJ_CU(*drv_, cuEventRecord(stop_, nullptr));
    FJ_CU(*drv_, cuEventSynchronize(stop_));
    float x = 0;
    FJ_CU(*drv_, cuEventElapsedTime(&x, start_, stop_));
    ms.push_back(x);
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  const double median = ms[ms.size() / 2];
  if (!(median > 0) || !std::isfinite(median)) return Error(Code::internal, "timing gave " + printable(median) + " ms");
  return median;
}

Status LazyTuningSession::ensure() {
  if (session_) return {};
  if (failed_) return *failed_;  // a session that could not be set up is not retried per candidate
  if (log_) log_("tuning " + key_.to_string() + " on " + info_.name);
  auto s = TuningSession::create(drv_, ctx_, info_, loader_, key_, log_);
  if (!s.ok()) {
    failed_ = s.error();
    return *failed_;
  }
  session_ = std::move(s).value();
  session_->precompile(candidates_, std::max(1u, std::thread::hardware_concurrency()));
  return {};
}

autotune::Measure LazyTuningSession::measure() {
  return [this](const Tiling& t) -> Result<double> {
    FJ_TRY(ensure());
    return session_->measure()(t);
  };
}

autotune::Prune LazyTuningSession::prune() {
  return [this](const Tiling& t) -> std::optional<std::string> {
    if (auto st = ensure(); !st.ok()) return st.error().message();
    return session_->prune()(t);
  };
}

}  // namespace flashjit
