#include "device.hpp"

namespace flashjit::tools {

Result<GpuContext> GpuContext::open(int ordinal) {
  auto drv_r = DriverLibrary::get();
  if (!drv_r.ok()) return std::move(drv_r).error();
  const DriverLibrary& drv = *drv_r.value();
  int count = 0;
  FJ_CU(drv, cuDeviceGetCount(&count));
  if (ordinal < 0 || ordinal >= count)
    return Error(Code::not_found, "no CUDA device " + std::to_string(ordinal) + " (" + std::to_string(count) + " visible)");
  GpuContext g;
  g.drv_ = &drv;
  FJ_CU(drv, cuDeviceGet(&g.dev_, ordinal));
  FJ_CU(drv, cuDevicePrimaryCtxRetain(&g.ctx_, g.dev_));
  FJ_CU(drv, cuCtxSetCurrent(g.ctx_));
  char name[256] = {0};
  drv.cuDeviceGetName(name, sizeof name, g.dev_);
  g.info_.name = name;
  int major = 0, minor = 0, sms = 0, l2 = 0;
  drv.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, g.dev_);
  drv.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, g.dev_);
  drv.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, g.dev_);
  drv.cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, g.dev_);
  std::size_t mem = 0;
  drv.cuDeviceTotalMem(&mem, g.dev_);
  g.info_.arch = "sm_" + std::to_string(major) + std::to_string(minor) + (major == 9 ? "a" : "");
  g.info_.sm_count = sms;
  g.info_.l2_bytes = l2;
  g.info_.memory_bytes = std::int64_t(mem);
  return g;
}

GpuContext::GpuContext(GpuContext&& o) noexcept : drv_(o.drv_), dev_(o.dev_), ctx_(o.ctx_), info_(o.info_) {
  o.ctx_ = nullptr;
}

GpuContext::~GpuContext() {
  if (ctx_) drv_->cuDevicePrimaryCtxRelease(dev_);
}

Result<DeviceBuffer> DeviceBuffer::allocate(const DriverLibrary& drv, std::size_t bytes) {
  DeviceBuffer b;
  b.drv_ = &drv;
  b.bytes_ = bytes;
  if (bytes) FJ_CU(drv, cuMemAlloc(&b.dptr_, bytes));
  return b;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (dptr_) drv_->cuMemFree(dptr_);
    drv_ = o.drv_, dptr_ = o.dptr_, bytes_ = o.bytes_;
    o.dptr_ = 0, o.bytes_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (dptr_) drv_->cuMemFree(dptr_);
}

Status DeviceBuffer::upload(const void* host, std::size_t bytes, std::size_t offset) const {
  if (offset + bytes > bytes_) return Error(Code::invalid_argument, "upload past the end of the buffer");
  FJ_CU(*drv_, cuMemcpyHtoD(dptr_ + offset, host, bytes));
  return {};
}

Status DeviceBuffer::download(void* host, std::size_t bytes, std::size_t offset) const {
  if (offset + bytes > bytes_) return Error(Code::invalid_argument, "download past the end of the buffer");
  FJ_CU(*drv_, cuMemcpyDtoH(host, dptr_ + offset, bytes));
  return {};
}

Status DeviceBuffer::fill_bytes(unsigned char value) const {
  if (!bytes_) return {};
  FJ_CU(*drv_, cuMemsetD8(dptr_, value, bytes_));
  // cuMemsetD8 may return before it ran, on the legacy default stream, which a non-blocking
  // stream does not wait for: a kernel launched there next (a graph replay in test_capture) could
  // write first and have its results poisoned after.
  FJ_CU(*drv_, cuCtxSynchronize());
  return {};
}

}  // namespace flashjit::tools
