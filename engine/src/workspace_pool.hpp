// Device scratch memory the engine owns for plans that ask for it (split-KV partials): one
// buffer per (context, stream), grown on demand and reused by every later call on that stream.
// A new buffer starts zeroed (kernels that keep counters in it return them to zero).
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

namespace flashjit {

// The driver calls the pool makes, apart so tests can stand in for them.
struct WorkspaceDevice {
  std::function<Result<CUdeviceptr>(std::size_t bytes)> allocate;  // zeroed memory
  std::function<void(CUdeviceptr)> free;
  std::function<Status(CUstream)> synchronize;  // before a buffer in use on the stream is freed
  std::function<Result<bool>(CUstream)> capturing;
};

class WorkspacePool {
 public:
  explicit WorkspacePool(WorkspaceDevice device) : device_(std::move(device)) {}
  ~WorkspacePool();
  WorkspacePool(const WorkspacePool&) = delete;
  WorkspacePool& operator=(const WorkspacePool&) = delete;

  // At least `bytes` of device memory for work on `stream` of `ctx`.
  Result<CUdeviceptr> get(CUcontext ctx, CUstream stream, std::size_t bytes);

  std::size_t buffers() const;
  std::size_t bytes_held() const;

 private:
  struct Buffer {
    CUdeviceptr ptr = 0;
    std::size_t bytes = 0;
  };
  WorkspaceDevice device_;
  mutable std::mutex mu_;
  std::map<std::pair<CUcontext, CUstream>, Buffer> buffers_;
};

}  // namespace flashjit
