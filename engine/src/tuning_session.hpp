// Times candidate tilings of one tuning key on the current context's GPU (a forward call, or a
// backward one for a backward family's key): random inputs of the bucket's representative shape,
// candidates compiled in parallel up front, CUDA events around each launch, L2 flushed before
// every timed launch, median of several.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "autotune/problem_bucket.hpp"
#include "autotune/tuner.hpp"
#include "kernel_loader.hpp"
#include "problem.hpp"

namespace flashjit {

class TuningSession {
 public:
  using Log = std::function<void(const std::string&)>;

  static Result<std::unique_ptr<TuningSession>> create(const DriverLibrary& drv, CUcontext ctx,
                                                       const DeviceContextInfo& info, KernelLoader& loader,
                                                       const autotune::TuningKey& key, Log log);
  ~TuningSession();

  // Compiles (or finds on disk) every candidate on `threads` threads so timing waits on none.
  void precompile(const std::vector<Tiling>& candidates, unsigned threads);
  autotune::Measure measure();
  autotune::Prune prune();

 private:
  TuningSession() = default;
  Result<double> time(const Tiling& t);

  const DriverLibrary* drv_ = nullptr;
  CUcontext ctx_ = nullptr;
  DeviceContextInfo info_;
  KernelLoader* loader_ = nullptr;
  autotune::TuningKey key_;
  Log log_;
  std::vector<CUdeviceptr> buffers_;
  CUdeviceptr flush_ = 0;
  std::size_t flush_bytes_ = 0;
  AttentionArgs args_;           // the representative problem's inputs, in buffers_ (forward)
  BackwardArgs backward_args_;   // a backward family's: the forward's arguments and the gradients
  AttentionProblem problem_;     // validated; points at args_ or backward_args_
  CUevent start_ = nullptr, stop_ = nullptr;
};

// The tuner's measure/prune callbacks over a session that is only created (buffers allocated,
// candidates compiled) when the tuner first asks: a stored result needs none of that.
class LazyTuningSession {
 public:
  LazyTuningSession(const DriverLibrary& drv, CUcontext ctx, const DeviceContextInfo& info, KernelLoader& loader,
                    autotune::TuningKey key, std::vector<Tiling> candidates, TuningSession::Log log)
      : drv_(drv), ctx_(ctx), info_(info), loader_(loader), key_(std::move(key)), candidates_(std::move(candidates)),
        log_(std::move(log)) {}

  autotune::Measure measure();
  autotune::Prune prune();
  bool started() const { return session_ != nullptr; }

 private:
  Status ensure();

  const DriverLibrary& drv_;
  CUcontext ctx_;
  const DeviceContextInfo& info_;
  KernelLoader& loader_;
  autotune::TuningKey key_;
  std::vector<Tiling> candidates_;
  TuningSession::Log log_;
  std::unique_ptr<TuningSession> session_;
  std::optional<Error> failed_;
};

}  // namespace flashjit
