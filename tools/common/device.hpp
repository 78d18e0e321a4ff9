// Minimal device plumbing for tools and GPU tests over flashjit's own driver loader: a current
// context on one GPU, owned device buffers, events for timing.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cudalib/driver_library.hpp"
#include "flashjit/status.hpp"

namespace flashjit::tools {

struct GpuInfo {
  std::string name;
  std::string arch;  // "sm_90a"
  int sm_count = 0;
  std::int64_t l2_bytes = 0;
  std::int64_t memory_bytes = 0;
};

// Retains device `ordinal`'s primary context and makes it current on the calling thread.
class GpuContext {
 public:
  static Result<GpuContext> open(int ordinal = 0);
  GpuContext(GpuContext&&) noexcept;
  GpuContext& operator=(GpuContext&&) = delete;
  ~GpuContext();
  const DriverLibrary& driver() const { return *drv_; }
  const GpuInfo& info() const { return info_; }
  CUcontext context() const { return ctx_; }

 private:
  GpuContext() = default;
  const DriverLibrary* drv_ = nullptr;
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  GpuInfo info_;
};

class DeviceBuffer {
 public:
  static Result<DeviceBuffer> allocate(const DriverLibrary& drv, std::size_t bytes);
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  ~DeviceBuffer();

  void* ptr() const { return reinterpret_cast<void*>(dptr_); }
  std::size_t bytes() const { return bytes_; }
  Status upload(const void* host, std::size_t bytes, std::size_t offset = 0) const;
  Status download(void* host, std::size_t bytes, std::size_t offset = 0) const;
  Status fill_bytes(unsigned char value) const;  // returns once every byte is written

 private:
  const DriverLibrary* drv_ = nullptr;
  CUdeviceptr dptr_ = 0;
  std::size_t bytes_ = 0;
};

// Median of `reps` timed calls of fn (after `warmup` calls), timed with CUDA events on stream 0.
template <class F>
Result<double> time_ms(const DriverLibrary& drv, F&& fn, int warmup, int reps);

}  // namespace flashjit::tools

#include "device_timing.inl"
