#include "workspace_pool.hpp"

#include "cudalib/driver_library.hpp"

namespace flashjit {
namespace {

// Buffers grow to the next multiple of this, so a slowly growing problem does not reallocate
// (and synchronize its stream) on every call.
constexpr std::size_t kGranule = std::size_t(1) << 20;

}  // namespace

WorkspacePool::~WorkspacePool() {
  for (auto& [key, b] : buffers_)
    if (b.ptr) device_.free(b.ptr);
}

Result<CUdeviceptr> WorkspacePool::get(CUcontext ctx, CUstream stream, std::size_t bytes, std::size_t zeroed) {
  std::lock_guard lock(mu_);
  Buffer& b = buffers_[{ctx, stream}];
  if (b.bytes >= bytes && b.ptr) {
    if (zeroed > b.zero_prefix) FJ_TRY(device_.zero_async(b.ptr, zeroed, stream));
    b.zero_prefix = zeroed;  // past it, this call's kernels may leave anything
    return b.ptr;
  }
  auto capturing = device_.capturing(stream);
  if (!capturing.ok()) return std::move(capturing).error();
  if (capturing.value())
    return Error(Code::invalid_argument,
                 "this call needs " + std::to_string(bytes) + " bytes of workspace on a stream that is being captured "
                 "into a CUDA graph, and flashjit never allocates during a capture: run the same call once on this "
                 "stream before capturing (the workspace is then reused)");
  if (b.ptr) {
    // Kernels queued on this stream may still read the old buffer.
    FJ_TRY(device_.synchronize(stream));
    device_.free(b.ptr);
    b = {};
  }
  const std::size_t grown = (bytes + kGranule - 1) / kGranule * kGranule;
  auto ptr = device_.allocate(grown);
  if (!ptr.ok()) return std::move(ptr).error().with("workspace_bytes", std::to_string(grown));
  b = {ptr.value(), grown, zeroed};  // allocate() hands out zeroed memory
  return b.ptr;
}

std::size_t WorkspacePool::buffers() const {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  for (const auto& [key, b] : buffers_) n += b.ptr != 0;
  return n;
}

std::size_t WorkspacePool::bytes_held() const {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  for (const auto& [key, b] : buffers_) n += b.bytes;
  return n;
}

WorkspaceDevice driver_workspace_device() {
  WorkspaceDevice d;
  d.allocate = [](std::size_t bytes) -> Result<CUdeviceptr> {
    auto drv = DriverLibrary::get();
    if (!drv.ok()) return std::move(drv).error();
    CUdeviceptr p = 0;
    FJ_CU(*drv.value(), cuMemAlloc(&p, bytes));
    if (const CUresult r = drv.value()->cuMemsetD8(p, 0, bytes); r != CUDA_SUCCESS) {
      drv.value()->cuMemFree(p);
      return drv.value()->error(r, "zeroing a new workspace");
    }
    return p;
  };
  d.free = [](CUdeviceptr p) {
    if (auto drv = DriverLibrary::get(); drv.ok()) drv.value()->cuMemFree(p);
  };
  d.synchronize = [](CUstream stream) -> Status {
    auto drv = DriverLibrary::get();
    if (!drv.ok()) return std::move(drv).error();
    FJ_CU(*drv.value(), cuStreamSynchronize(stream));
    return {};
  };
  d.zero_async = [](CUdeviceptr p, std::size_t bytes, CUstream stream) -> Status {
    auto drv = DriverLibrary::get();
    if (!drv.ok()) return std::move(drv).error();
    FJ_CU(*drv.value(), cuMemsetD8Async(p, 0, bytes, stream));
    return {};
  };
  d.capturing = [](CUstream stream) -> Result<bool> {
    auto drv = DriverLibrary::get();
    if (!drv.ok()) return std::move(drv).error();
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    FJ_CU(*drv.value(), cuStreamIsCapturing(stream, &st));
    return st != CU_STREAM_CAPTURE_STATUS_NONE;
  };
  return d;
}

}  // namespace flashjit

namespace flashjit {

Result<CUdeviceptr> CallerWorkspace::get(std::size_t bytes, std::size_t zeroed) {
  if (bytes > bytes_)
    return Error(Code::invalid_argument, "workspace.bytes is " + std::to_string(bytes_) + " but this call needs " +
                                             std::to_string(bytes) + " (ask workspace_size() for the size)");
  if (zeroed) FJ_TRY(device_.zero_async(data_, zeroed, stream_));
  return data_;
}

}  // namespace flashjit
