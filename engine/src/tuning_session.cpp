#include "tuning_session.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include "base/host_float.hpp"
#include "base/printable.hpp"
#include "problem.hpp"

namespace flashjit {
namespace {

constexpr int kWarmupLaunches = 2;  // the first launch of a module pays lazy loading
constexpr int kTimedLaunches = 7;   // median of 7: robust to one or two outliers
constexpr int kMaxLocalBytes = 64;  // more spill than this never wins; skip timing it

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
  s->shape_ = p;
  const std::int64_t nq = p.batch * p.seqlen_q * p.heads_q, nk = p.batch * p.seqlen_k * p.heads_kv;
  const std::size_t counts[4] = {std::size_t(nq * sem.head_dim_qk), std::size_t(nk * sem.head_dim_qk),
                                 std::size_t(nk * sem.head_dim_v), std::size_t(nq * sem.head_dim_v)};
  for (int i = 0; i < 4; ++i) {
    CUdeviceptr d = 0;
    FJ_CU(drv, cuMemAlloc(&d, std::max<std::size_t>(counts[i], 1) * dtype_size(sem.dtype)));
    s->buffers_.push_back(d);
    if (i < 3) {
      const auto bytes = random_bytes(counts[i], sem.dtype, 0x5eed + i);
      FJ_CU(drv, cuMemcpyHtoD(d, bytes.data(), bytes.size()));
    }
  }
  CUdeviceptr lse = 0;
  if (sem.write_lse) {
    FJ_CU(drv, cuMemAlloc(&lse, std::size_t(p.batch * p.heads_q * p.seqlen_q) * sizeof(float)));
    s->buffers_.push_back(lse);
  }
  // Twice the L2, rewritten before each timed launch, so inputs never start cached.
  s->flush_bytes_ = std::size_t(std::max(info.l2_bytes, 1 << 20)) * 2;
  FJ_CU(drv, cuMemAlloc(&s->flush_, s->flush_bytes_));
  FJ_CU(drv, cuEventCreate(&s->start_, CU_EVENT_DEFAULT));
  FJ_CU(drv, cuEventCreate(&s->stop_, CU_EVENT_DEFAULT));

  AttentionArgs a;
  const auto ptr = [&](int i) { return reinterpret_cast<const void*>(s->buffers_[i]); };
  a.q = TensorView::bshd(ptr(0), sem.dtype, p.batch, p.seqlen_q, p.heads_q, sem.head_dim_qk);
  a.k = TensorView::bshd(ptr(1), sem.dtype, p.batch, p.seqlen_k, p.heads_kv, sem.head_dim_qk);
  a.v = TensorView::bshd(ptr(2), sem.dtype, p.batch, p.seqlen_k, p.heads_kv, sem.head_dim_v);
  a.o = TensorView::bshd(ptr(3), sem.dtype, p.batch, p.seqlen_q, p.heads_q, sem.head_dim_v);
  if (sem.write_lse) a.lse = LseView::contiguous(reinterpret_cast<float*>(lse), p.batch, p.heads_q, p.seqlen_q);
  a.mask = sem.mask;
  a.fp32_math = sem.fp32_math;
  auto v = validate_problem(a);
  if (!v.ok()) return std::move(v).error().with("tuning_key", key.to_string());
  s->params_ = v->params;
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
    const int smem = find_family(v.family)->smem_bytes(v.semantics, t);
    if (smem > info_.smem_optin)
      return "needs " + std::to_string(smem) + " bytes of shared memory, the device allows " + std::to_string(info_.smem_optin);
    auto k = loader_->get(*drv_, ctx_, info_, v);
    if (!k.ok()) return "does not load: " + k.error().message();
    if (k->local_bytes > kMaxLocalBytes) return "spills " + std::to_string(k->local_bytes) + " bytes to local memory";
    if (k->registers * t.warps * 32 > 65536) return "needs more registers than an SM has";
    return std::nullopt;
  };
}

autotune::Measure TuningSession::measure() {
  return [this](const Tiling& t) { return time(t); };
}

Result<double> TuningSession::time(const Tiling& t) {
  const KernelVariant v{key_.family, key_.semantics, t};
  auto k = loader_->get(*drv_, ctx_, info_, v);
  if (!k.ok()) return std::move(k).error();
  const LaunchGrid grid = find_family(v.family)->grid(shape_, v.semantics, t);
  for (int i = 0; i < kWarmupLaunches; ++i) FJ_TRY(KernelLoader::launch(*drv_, k.value(), grid, params_, nullptr));
  std::vector<float> ms;
  for (int i = 0; i < kTimedLaunches; ++i) {
    FJ_CU(*drv_, cuMemsetD8(flush_, static_cast<unsigned char>(i), flush_bytes_));
    FJ_CU(*drv_, cuEventRecord(start_, nullptr));
    FJ_TRY(KernelLoader::launch(*drv_, k.value(), grid, params_, nullptr));
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
