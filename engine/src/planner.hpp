// Which kernel runs a call. A plan — the family, the variant (family, semantics, tiling) and its
// loaded module — is made once per (context, family, tuning bucket): the tiling comes from a
// stored tuning result, from tuning on first use, or is the family's default. Every later call
// finds it by one hash lookup, with no strings built.
#pragma once

#include <cuda.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <unordered_map>

#include "autotune/autotuner.hpp"
#include "device_context.hpp"
#include "flashjit/flashjit.hpp"
#include "kernel_family.hpp"
#include "kernel_loader.hpp"

namespace flashjit {

// What a call needs once its kernel is known.
struct Plan {
  const KernelFamily* family = nullptr;
  KernelVariant variant;
  LoadedModule module;
};

class Planner {
 public:
  Planner(const EngineOptions& options, KernelLoader& loader);

  // The plan of `problem` in `call`'s context when `family` runs it: the one made before for its
  // bucket, else a new one. A new plan compiles or loads code, which never happens while
  // `stream` is being captured into a CUDA graph: that is an error naming the fix.
  Result<std::shared_ptr<const Plan>> get(const CallContext& call, const KernelFamily& family,
                                          const AttentionProblem& problem, CUstream stream);
  // The family that serves `problem` (pick_family: the first by priority that accepts it) and
  // its plan from get(). The calling thread's last few answers are kept (plan_memo.hpp) and
  // given again, with no family choice, lock, hash or reference count, to a call of the same
  // planner, context, pass, semantics and exact shape, until forget() drops the context's
  // plans. The plan stays valid until this thread's next dispatch().
  Result<const Plan*> dispatch(const CallContext& call, const AttentionProblem& problem, CUstream stream, Pass pass);
  // The plan of a tiling the caller chose (benchmarks, tuning tools), checked against the family's
  // rules; the family must serve `pass`.
  Result<std::shared_ptr<const Plan>> with_tiling(const CallContext& call, const Tiling& tiling,
                                                  const AttentionProblem& problem, Pass pass);

  // The autotuner settings for this process and device; `mode` unset: FLASHJIT_TUNE decides.
  autotune::AutotunerOptions autotuner_options(const CallContext& call, std::optional<autotune::TuneMode> mode) const;
  // Drops a context's plans and runtime tuner, so that a new tuning result is used from the next call.
  void forget(CUcontext ctx);

  std::uint64_t hits() const { return hits_.load(std::memory_order_relaxed); }
  std::uint64_t tunes() const { return tunes_.load(std::memory_order_relaxed); }

 private:
  // What a plan is found by: the context, the family and the tuning bucket.
  struct Key {
    CUcontext ctx;
    const KernelFamily* family;
    Semantics semantics;
    int seq_q_bucket, seq_k_bucket, batch_heads_bucket;
    bool operator==(const Key& o) const;
    autotune::TuningKey bucket() const;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const;
  };

  Result<std::shared_ptr<const Plan>> make(const CallContext& call, const Key& key, const AttentionProblem& problem,
                                           CUstream stream);
  Tiling choose_tiling(const CallContext& call, const KernelFamily& family, const autotune::TuningKey& bucket,
                       const ProblemShape& shape);
  Result<autotune::Autotuner*> tuner_for(const CallContext& call);

  const std::uint64_t id_;  // tells this planner from any other, past or future, at the same address
  // Bumped by forget(): a remembered plan of an older generation is not given again.
  std::atomic<std::uint64_t> generation_{0};
  const EngineOptions& options_;
  KernelLoader& loader_;
  std::shared_mutex plans_mu_;
  std::unordered_map<Key, std::shared_ptr<const Plan>, KeyHash> plans_;
  std::mutex tuners_mu_;
  std::unordered_map<CUcontext, std::unique_ptr<autotune::Autotuner>> tuners_;
  std::atomic<std::uint64_t> hits_{0}, tunes_{0};
};

}  // namespace flashjit
