// Internals of DiskCache shared by disk_cache.cpp (lookups and stores), disk_cache_manage.cpp
// (scan/list/verify/prune/clear) and bundle.cpp. Not part of the module's interface.
//
// Every operation opens the root once (CacheDir::open_root, checked on its descriptor) and reaches
// arch folders, locks and entries only through descriptors derived from it; the functions below
// take those opened folders, never paths.
#pragma once

#include <atomic>
#include <ctime>
#include <memory>
#include <mutex>

#include "cache/cache_dir.hpp"
#include "cache/disk_cache.hpp"
#include "cache/file_lock.hpp"
#include "cache/posix_io.hpp"

namespace flashjit::cache {

// Name of the cache-wide lock (in the root) that serializes eviction, prune and clear.
inline constexpr const char* kMaintenanceLockName = ".maintenance.lock";

struct DiskCache::State {
  State(CacheDir d, std::uint64_t cap, std::function<void(const std::string&)> log_fn, const Options& o)
      : dir(std::move(d)),
        max_bytes(cap),
        logger(std::move(log_fn)),
        lock_timeout(o.lock_timeout),
        lock_wait_notice_after(o.lock_wait_notice_after),
        lock_wait_notice_every(o.lock_wait_notice_every) {}

  const CacheDir dir;
  const std::uint64_t max_bytes;
  const std::function<void(const std::string&)> logger;
  const std::chrono::milliseconds lock_timeout;
  const std::chrono::milliseconds lock_wait_notice_after;
  const std::chrono::milliseconds lock_wait_notice_every;
  std::mutex log_mutex;

  std::atomic<std::uint64_t> hits{0}, misses{0}, corrupt{0}, stores{0}, store_failures{0}, bytes_read{0},
      bytes_written{0}, evictions{0}, builds{0}, build_us{0};

  void log(const std::string& line);
  // Notices for a wait on the lock of `what` (a key), logged as "lock wait: ...; <then> after
  // <timeout>" so a stopped holder is never a silent wait.
  LockWaitNotices lock_notices(const std::string& what, const std::string& then);
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

// The helpers below take a key that has passed validate_entry_key(): the public entry points
// (DiskCache's load/store/get_or_build, a bundle's reader) check each key once, where it arrives.

// Looks up and verifies without counting hits/misses (callers count); counts and handles
// corrupt entries (log + remove). load_entry finds the arch folder under `root` (a missing one is
// a miss); load_entry_in uses one already opened.
Result<std::optional<std::string>> load_entry(DiskCache::State& s, const PrivateDir& root, const EntryKey& key,
                                              LoadMode mode);
Result<std::optional<std::string>> load_entry_in(DiskCache::State& s, const ArchDir& arch, const EntryKey& key,
                                                 LoadMode mode);

// Publishes into `arch` without locking and without enforcing the cap; counts the store. First
// removes the folder's stale temp files (crashed writers' leftovers).
Status store_entry(DiskCache::State& s, const ArchDir& arch, const EntryKey& key, std::string_view payload);

// The maintenance lock, waited for like a key's lock (State::lock_timeout, with notices naming the
// holder): a holder stopped with it (`cache prune` under Ctrl-Z) must not stall every store and
// every prune for good. When the wait runs out, `lock` is empty and `ran_out` says how long it
// was and who holds the lock; `then` (for the notices) says what the caller does after the wait.
struct MaintenanceLock {
  std::optional<FileLock> lock;
  std::string ran_out;  // "waited 300 s for the cache maintenance lock '<path>', held by pid 12 (T (stopped))"
};
Result<MaintenanceLock> take_maintenance_lock(DiskCache::State& s, const PrivateDir& root, const std::string& then);

// Takes the maintenance lock and evicts down to the cap, sparing the entry at `protect_path`. When
// the wait for the lock runs out it logs so and leaves the cap to a later store.
Status enforce_cap(DiskCache::State& s, const PrivateDir& root, const std::string& protect_path);

// A file found in a folder of the cache, by name (contents unchecked).
struct FoundFile {
  std::shared_ptr<const ArchDir> arch;  // the folders it was found through
  std::string name;
  std::string path;  // for messages and reports
};

// One entry file found on disk: anything named like an entry, so that a FIFO or a folder at an
// entry's name is seen (and reported) too. Only regular files count towards the size.
struct ScannedEntry : FoundFile {
  std::string arch_name;
  bool regular = false;
  std::uint64_t bytes = 0;  // 0 unless regular
  timespec mtime{};
  FileId id;
};

// Entry files of one arch or all, and the temp files (in arch folders) and lock files (in locks/
// folders) beside them.
struct ScanResult {
  std::vector<std::string> arches;  // arch folders walked, sorted
  std::vector<ScannedEntry> entries;
  std::vector<FoundFile> temp_files;
  std::vector<FoundFile> lock_files;  // FoundFile::arch->locks holds them
};
Result<ScanResult> scan_files(const PrivateDir& root, const std::optional<std::string>& arch);

// An entry as `cache list` shows it, with what is needed to read it.
struct ListedEntry {
  EntryInfo info;
  ScannedEntry file;
};
Result<std::vector<ListedEntry>> list_entries(const PrivateDir& root, const std::optional<std::string>& arch);

struct EvictResult {
  std::uint64_t evicted = 0;
  std::uint64_t bytes_freed = 0;
  std::uint64_t bytes_after = 0;
};
// LRU eviction down to `max_bytes`; the caller holds the maintenance lock.
Result<EvictResult> evict_lru(DiskCache::State& s, const PrivateDir& root, std::uint64_t max_bytes,
                              const std::string& protect_path);

// Removes the file `name` of `arch` only if it is still the one identified by `id` (a builder may
// have replaced it with a good entry since it was read). Takes the key's lock unless the caller
// holds it. Returns whether it removed the file (never a folder).
bool remove_bad_entry(const ArchDir& arch, const std::string& name, const FileId& id, bool holding_key_lock);

// "<name>-<16 hex>.lock" for the entry file "<name>-<16 hex>.fjk".
std::string lock_name_for(const std::string& entry_file);

}  // namespace flashjit::cache
