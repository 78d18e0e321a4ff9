#include "module_cache.hpp"

namespace flashjit {

Result<LoadedModule> ModuleCache::get(CUcontext ctx, const KernelVariant& v, const Loader& load, bool* hit) {
  Key key{ctx, v};
  std::shared_ptr<Slot> slot;
  {
    std::shared_lock lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) {
      if (it->second->ready) {
        if (hit) *hit = true;
        return it->second->kernel;
      }
      slot = it->second;
    }
  }
  if (!slot) {
    std::unique_lock lock(mu_);
    auto& s = map_[key];
    if (!s) s = std::make_shared<Slot>();
    slot = s;
  }
  std::lock_guard build(slot->build);
  {
    std::shared_lock lock(mu_);
    if (slot->ready) {
      if (hit) *hit = true;
      return slot->kernel;
    }
  }
  if (hit) *hit = false;
  auto loaded = load();
  if (!loaded.ok()) return loaded;
  std::unique_lock lock(mu_);
  slot->kernel = loaded.value();
  slot->ready = true;
  return slot->kernel;
}

std::size_t ModuleCache::size() const {
  std::shared_lock lock(mu_);
  return map_.size();
}

}  // namespace flashjit
