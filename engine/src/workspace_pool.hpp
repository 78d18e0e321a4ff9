// Device scratch memory the engine owns for plans that ask for it (split-KV partials): one
// buffer per (context, stream), grown on demand and reused by every later call on that stream.
// A call may ask for a zeroed prefix (counters its kernels take and give back, such as split
// tickets): the pool zeroes it on the stream when the bytes there are not known to be zero, which
// is only the first time or after another call wrote there. Repeated calls of one shape cost no
// memset.
// A stream runs its kernels in order, so reuse within a stream is safe, and two streams never
// share a buffer. Nothing is allocated on a stream that is being captured into a CUDA graph:
// the capture gets the stream's existing buffer if it is large enough, else a clear error
// (warm the stream up first). Graphs keep pointing at the buffer they captured: replaying one
// while the same stream runs eagerly shares it, as with any stream-owned scratch memory.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <utility>

#include "flashjit/status.hpp"
#include "launch_plan.hpp"

namespace flashjit {

// The driver calls the pool makes, apart so tests can stand in for them.
struct WorkspaceDevice {
  std::function<Result<CUdeviceptr>(std::size_t bytes)> allocate;  // zeroed memory
  std::function<void(CUdeviceptr)> free;
  std::function<Status(CUstream)> synchronize;  // before a buffer in use on the stream is freed
  std::function<Result<bool>(CUstream)> capturing;
  std::function<Status(CUdeviceptr, std::size_t, CUstream)> zero_async;  // stream-ordered, capturable
};

// The pool's calls through the CUDA driver (the library loaded at first use).
WorkspaceDevice driver_workspace_device();

class WorkspacePool {
 public:
  explicit WorkspacePool(WorkspaceDevice device) : device_(std::move(device)) {}
  ~WorkspacePool();
  WorkspacePool(const WorkspacePool&) = delete;
  WorkspacePool& operator=(const WorkspacePool&) = delete;

  // At least `bytes` of device memory for work on `stream` of `ctx`, whose first `zeroed` bytes
  // are zero when the stream reaches the caller's kernels. The caller's kernels may write past
  // `zeroed` and must leave the first `zeroed` bytes zero.
  Result<CUdeviceptr> get(CUcontext ctx, CUstream stream, std::size_t bytes, std::size_t zeroed = 0);

  std::size_t buffers() const;
  std::size_t bytes_held() const;
  const WorkspaceDevice& device() const { return device_; }

 private:
  struct Buffer {
    CUdeviceptr ptr = 0;
    std::size_t bytes = 0;
    std::size_t zero_prefix = 0;  // bytes at the start known to be zero for the next call
  };
  WorkspaceDevice device_;
  mutable std::mutex mu_;
  std::map<std::pair<CUcontext, CUstream>, Buffer> buffers_;
};

// One call's workspace: the pool's buffer of (context, stream).
class StreamWorkspace final : public WorkspaceSource {
 public:
  StreamWorkspace(WorkspacePool& pool, CUcontext ctx, CUstream stream) : pool_(pool), ctx_(ctx), stream_(stream) {}
  Result<CUdeviceptr> get(std::size_t bytes, std::size_t zeroed) override {
    return pool_.get(ctx_, stream_, bytes, zeroed);
  }

 private:
  WorkspacePool& pool_;
  CUcontext ctx_;
  CUstream stream_;
};

// One call's workspace in memory the caller owns (AttentionArgs::workspace): used as given,
// its zeroed prefix cleared on the stream each call (the caller's memory may hold anything).
class CallerWorkspace final : public WorkspaceSource {
 public:
  CallerWorkspace(const WorkspaceDevice& device, CUdeviceptr data, std::size_t bytes, CUstream stream)
      : device_(device), data_(data), bytes_(bytes), stream_(stream) {}
  Result<CUdeviceptr> get(std::size_t bytes, std::size_t zeroed) override;

 private:
  const WorkspaceDevice& device_;
  CUdeviceptr data_;
  std::size_t bytes_;
  CUstream stream_;
};

// Planning to learn the workspace a call needs: records the largest request, gives no memory.
class WorkspaceMeter final : public WorkspaceSource {
 public:
  Result<CUdeviceptr> get(std::size_t bytes, std::size_t) override {
    if (bytes > bytes_) bytes_ = bytes;
    return CUdeviceptr(0);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  std::size_t bytes_ = 0;
};

}  // namespace flashjit
