// What a kernel family asks the engine to launch for one call: one or more kernels by entry
// point, each with its grid, block, cluster shape, dynamic shared memory and a params struct the
// family owns (filled after the tiling is known, so split counts or TMA descriptors live in it),
// plus the device workspace the kernels share. Fixed-size storage: building a plan on the
// dispatch path allocates nothing.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstring>
#include <new>
#include <type_traits>

#include "flashjit/status.hpp"

namespace flashjit {

// Kernels one plan may launch: split-KV's partial and combine kernels, with room for a third.
constexpr int kMaxPlanKernels = 3;
// Bytes of one kernel's params: four 128-byte TMA descriptors plus pointers and strides fit
// with room to spare, well under the 4 KB a kernel parameter list may hold.
constexpr std::size_t kMaxParamBytes = 2048;
// TMA descriptors inside a params struct must be 64-byte aligned.
constexpr std::size_t kParamAlign = 64;

// A family's params struct as the bytes the kernel's single __grid_constant__ parameter reads.
struct KernelParams {
  alignas(kParamAlign) unsigned char bytes[kMaxParamBytes];
  std::size_t size = 0;

  // A zeroed P in the bytes, for the family to fill in place (no copy on the dispatch path).
  template <class P>
  P& emplace() {
    static_assert(std::is_trivially_copyable_v<P>, "kernel params are passed as bytes");
    static_assert(sizeof(P) <= kMaxParamBytes, "kernel params exceed kMaxParamBytes");
    static_assert(alignof(P) <= kParamAlign, "kernel params need more alignment than kParamAlign");
    std::memset(bytes, 0, sizeof(P));
    size = sizeof(P);
    return *std::launder(reinterpret_cast<P*>(new (bytes) P));
  }
};

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

struct KernelLaunch {
  int entry = 0;  // index into the family's entry_points() for the variant
  Dim3 grid, block, cluster;
  unsigned smem_bytes = 0;
  KernelParams params;
};

struct LaunchPlan {
  KernelLaunch kernels[kMaxPlanKernels];
  int count = 0;

  KernelLaunch& add() { return kernels[count++]; }
};

// Device scratch memory for one call's plan.
class WorkspaceSource {
 public:
  // At least `bytes` of device memory whose first `zeroed` bytes are zero when the plan's kernels
  // start (counters they take and give back: the kernels leave them zero again). 0 when planning
  // without launching (checking a tiling): the plan is still made, without the buffer's address.
  virtual Result<CUdeviceptr> get(std::size_t bytes, std::size_t zeroed) = 0;

 protected:
  ~WorkspaceSource() = default;
};

// Planning without launching: every request gets no memory (address 0).
class NoWorkspace final : public WorkspaceSource {
 public:
  Result<CUdeviceptr> get(std::size_t, std::size_t) override { return CUdeviceptr(0); }
};

}  // namespace flashjit
