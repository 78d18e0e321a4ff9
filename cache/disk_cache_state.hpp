// Internals of DiskCache shared by disk_cache.cpp (lookups and stores), disk_cache_manage.cpp
// (scan/list/verify/prune/clear) and bundle.cpp. Not part of the module's interface.
#pragma once

#include <atomic>
#include <ctime>
#include <mutex>

#include "cache/cache_dir.hpp"
#include "cache/disk_cache.hpp"
#include "cache/posix_io.hpp"

namespace flashjit::cache {

// Name of the cache-wide lock that serializes eviction, prune and clear.
inline constexpr const char* kMaintenanceLockName = ".maintenance.lock";

struct DiskCache::State {
  State(CacheDir d, std::uint64_t cap, std::function<void(const std::string&)> log_fn,
        std::chrono::milliseconds timeout)
      : dir(std::move(d)), max_bytes(cap), logger(std::move(log_fn)), lock_timeout(timeout) {}

  const CacheDir dir;
  const std::uint64_t max_bytes;
  const std::function<void(const std::string&)> logger;
  const std::chrono::milliseconds lock_timeout;
  std::mutex log_mutex;

  std::atomic<std::uint64_t> hits{0}, misses{0}, corrupt{0}, stores{0}, store_failures{0}, bytes_read{0},
      bytes_written{0}, evictions{0}, builds{0}, build_us{0};

  void log(const std::string& line);
  std::string maintenance_lock_path() const { return join_path(dir.root(), kMaintenanceLockName); }
  // "<arch>/locks/<name>-<16 hex>.lock" for the entry file "<arch>/<name>-<16 hex>.fjk".
  static std::string lock_path_for(const std::string& entry_path);
};

class DiskCacheAccess {
 public:
  static DiskCache::State& state(DiskCache& cache) { return *cache.s_; }
  static const DiskCache::State& state(const DiskCache& cache) { return *cache.s_; }
};

// How a lookup behaves beyond returning the payload.
struct LoadMode {
  bool holding_key_lock = false;  // a corrupt file may then be removed without taking the lock
  bool touch = true;              // advance the entry's LRU clock on a hit
};

// Looks up and verifies without counting hits/misses (callers count); counts and handles
// corrupt entries (log + remove).
Result<std::optional<std::string>> load_entry(DiskCache::State& s, const EntryKey& key, LoadMode mode);

// Publishes without locking and without enforcing the cap; counts the store.
Status store_entry(DiskCache::State& s, const EntryKey& key, std::string_view payload);

// Takes the maintenance lock and evicts down to the cap, sparing `protect_path`.
Status enforce_cap(DiskCache::State& s, const std::string& protect_path);

// One entry file found on disk (by name; contents unchecked).
struct ScannedEntry {
  std::string arch;
  std::string path;
  std::uint64_t bytes = 0;
  timespec mtime{};
  FileId id;
};

// Entry files of one arch or all; also counts temp and lock files when asked.
struct ScanResult {
  std::vector<std::string> arches;  // arch folders walked, sorted
  std::vector<ScannedEntry> entries;
  std::vector<std::string> temp_files;
  std::vector<std::string> lock_files;
};
Result<ScanResult> scan_files(const DiskCache::State& s, const std::optional<std::string>& arch);

struct EvictResult {
  std::uint64_t evicted = 0;
  std::uint64_t bytes_freed = 0;
  std::uint64_t bytes_after = 0;
};
// LRU eviction down to `max_bytes`; the caller holds the maintenance lock.
Result<EvictResult> evict_lru(DiskCache::State& s, std::uint64_t max_bytes, const std::string& protect_path);

// Removes the file at `path` only if it is still the one identified by `id` (a builder may have
// replaced it with a good entry since it was read). Takes the key's lock unless the caller holds it.
// Returns whether it removed the file.
bool remove_bad_entry(const std::string& path, const FileId& id, bool holding_key_lock);

}  // namespace flashjit::cache
