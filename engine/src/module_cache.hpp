// In-memory cache of loaded kernels per CUDA context. A hit takes a shared lock and one hash
// lookup; a miss builds under that key's own mutex, so threads asking for other variants (or
// hitting) never wait for a compile.
#pragma once

#include <cuda.h>

#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "flashjit/status.hpp"
#include "flashjit/variant.hpp"
#include "launch_plan.hpp"

namespace flashjit {

// A variant's module loaded into a context, with every entry point its family declares.
struct LoadedModule {
  CUmodule module = nullptr;
  CUfunction functions[kMaxPlanKernels] = {};
  int count = 0;
  int registers = 0;    // the most any entry point uses
  int local_bytes = 0;  // the most any entry point spills to local memory
};

class ModuleCache {
 public:
  using Loader = std::function<Result<LoadedModule>()>;

  // The module for (ctx, variant): cached, or made by `load` once (concurrent callers of the same
  // key wait for that one load; a failed load is not cached). `hit` tells which happened.
  Result<LoadedModule> get(CUcontext ctx, const KernelVariant& v, const Loader& load, bool* hit);

  std::size_t size() const;

 private:
  struct Key {
    CUcontext ctx;
    KernelVariant variant;
    bool operator==(const Key& o) const { return ctx == o.ctx && variant == o.variant; }
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const {
      return k.variant.fast_hash() ^ (std::hash<const void*>{}(k.ctx) * 31);
    }
  };
  struct Slot {
    std::mutex build;
    bool ready = false;  // guarded by the cache's map lock once set
    LoadedModule kernel;
  };
  mutable std::shared_mutex mu_;
  std::unordered_map<Key, std::shared_ptr<Slot>, KeyHash> map_;
};

}  // namespace flashjit
