// DiskCache: opening, lookups, stores, get_or_build and the size cap. Management walks
// (scan/list/verify/prune/clear) live in disk_cache_manage.cpp.
#include "cache/disk_cache.hpp"

#include "cache/byte_size.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "cache/atomic_file.hpp"
#include "cache/disk_cache_state.hpp"
#include "cache/entry_file.hpp"
#include "cache/file_lock.hpp"
#include "base/printable.hpp"

namespace flashjit::cache {

namespace {

// The key whose build callback is running on this thread, if any: used to refuse nested builds
// (holding one key's lock while another compiles) and to keep store() from waiting on a lock
// this very thread holds.
thread_local const EntryKey* t_building = nullptr;

class BuildingGuard {
 public:
  explicit BuildingGuard(const EntryKey& key) : saved_(t_building) { t_building = &key; }
  ~BuildingGuard() { t_building = saved_; }
  BuildingGuard(const BuildingGuard&) = delete;
  BuildingGuard& operator=(const BuildingGuard&) = delete;

 private:
  const EntryKey* saved_;
};

timespec now_realtime() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return ts;
}

// Advances the LRU clock of an entry that was just read; purely advisory, so failures (say, a
// read-only mount) are ignored. Full precision for the same reason as in write_entry().
void touch_entry(const DirFd& dir, const std::string& name) {
  timespec now = now_realtime();
  timespec times[2] = {now, now};
  ::utimensat(dir.fd(), name.c_str(), times, AT_SYMLINK_NOFOLLOW);
}

std::string seconds_text(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ms < std::chrono::seconds(10) ? "%.1f s" : "%.0f s",
                static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

}  // namespace

std::function<void(const std::string&)> env_logger() {
  const char* v = std::getenv("FLASHJIT_LOG");
  if (!v || !*v || std::string(v) == "0") return {};
  return [](const std::string& line) { std::cerr << "[flashjit cache] " << line << '\n'; };
}

// ---- State ----

void DiskCache::State::log(const std::string& line) {
  if (!logger) return;
  std::lock_guard<std::mutex> guard(log_mutex);
  logger(line);
}

LockWaitNotices DiskCache::State::lock_notices(const std::string& what, const std::string& then) {
  LockWaitNotices n;
  n.first_after = lock_wait_notice_after;
  n.every = lock_wait_notice_every;
  if (!logger) return n;
  n.notify = [this, what, then](const LockWait& w) {
    log("lock wait: waited " + seconds_text(w.waited) + " for the lock of '" + what + "' ('" + w.path +
        "'), held by " + w.holder + "; " + then + " after " + seconds_text(w.timeout));
  };
  return n;
}

// ---- shared internals ----

std::string lock_name_for(const std::string& entry_file) {
  std::string stem = entry_file;
  const std::string ext = kEntryExtension;
  if (stem.size() > ext.size() && stem.compare(stem.size() - ext.size(), ext.size(), ext) == 0)
    stem.resize(stem.size() - ext.size());
  return stem + kLockExtension;
}

bool remove_bad_entry(const ArchDir& arch, const std::string& name, const FileId& id, bool holding_key_lock) {
  auto remove_if_same = [&] {
    auto now = stat_at(arch.dir, name);
    if (!now || FileId{static_cast<unsigned long long>(now->st_dev), static_cast<unsigned long long>(now->st_ino)} != id)
      return false;  // gone, or already replaced by a new entry
    return ::unlinkat(arch.dir.fd(), name.c_str(), 0) == 0;  // fails for a folder: left for a person
  };
  if (holding_key_lock) return remove_if_same();
  // Whoever holds the key's lock is about to publish a replacement; leave the file to them.
  if (!arch.locks) return false;
  auto lock = FileLock::try_acquire(*arch.locks, lock_name_for(name));
  if (!lock || !lock->has_value()) return false;
  return remove_if_same();
}

Result<std::optional<std::string>> load_entry_in(DiskCache::State& s, const ArchDir& arch, const EntryKey& key,
                                                 LoadMode mode) {
  const std::string name = entry_file_name(key);
  FileId id;
  auto payload = read_entry(arch.dir, name, entry_identity(key), &id);
  if (payload) {
    if (mode.touch) touch_entry(arch.dir, name);
    return std::optional<std::string>(std::move(payload).value());
  }
  const Error& e = payload.error();
  if (e.code() == Code::not_found) return std::optional<std::string>();
  if (e.code() != Code::corrupt) return std::move(payload).error();
  s.corrupt.fetch_add(1);
  bool removed = remove_bad_entry(arch, name, id, mode.holding_key_lock);
  s.log(e.message() + (removed ? "; removed it, it will be rebuilt" : "; left it for the process rebuilding it"));
  return std::optional<std::string>();
}

Result<std::optional<std::string>> load_entry(DiskCache::State& s, const PrivateDir& root, const EntryKey& key,
                                              LoadMode mode) {
  auto arch = CacheDir::existing_arch_dir(root, key.arch);
  if (!arch) {
    if (arch.error().code() == Code::not_found) return std::optional<std::string>();  // nothing for this arch yet
    return std::move(arch).error();
  }
  return load_entry_in(s, *arch, key, mode);
}

Status store_entry(DiskCache::State& s, const ArchDir& arch, const EntryKey& key, std::string_view payload) {
  for (const std::string& path : remove_stale_temps(arch.dir))
    s.log("removed stale temp file '" + path + "' (its writer is gone and it is older than " +
          std::to_string(std::chrono::duration_cast<std::chrono::minutes>(kStaleTempAge).count()) + " minutes)");
  FJ_TRY(write_entry(arch.dir, entry_file_name(key), entry_identity(key), payload));
  s.stores.fetch_add(1);
  s.bytes_written.fetch_add(entry_file_bytes(entry_identity(key).size(), payload.size()));
  return {};
}

Result<MaintenanceLock> take_maintenance_lock(DiskCache::State& s, const PrivateDir& root, const std::string& then) {
  auto lock =
      FileLock::acquire_for(root, kMaintenanceLockName, s.lock_timeout, s.lock_notices("cache maintenance", then));
  if (!lock) return std::move(lock).error();
  MaintenanceLock out;
  if (lock->has_value()) {
    out.lock = std::move(*lock);
    return out;
  }
  out.ran_out = "waited " + seconds_text(s.lock_timeout) + " for the cache maintenance lock '" +
                root.path_of(kMaintenanceLockName) + "', held by " + describe_lock_holder(root, kMaintenanceLockName);
  return out;
}

Status enforce_cap(DiskCache::State& s, const PrivateDir& root, const std::string& protect_path) {
  auto lock = take_maintenance_lock(s, root, "not enforcing the size cap");
  if (!lock) return std::move(lock).error();
  if (!lock->lock) {
    // The entry is published already; the next store that gets the lock enforces the cap.
    s.log(lock->ran_out + "; not enforcing the size cap this time");
    return {};
  }
  auto r = evict_lru(s, root, s.max_bytes, protect_path);
  if (!r) return std::move(r).error();
  return {};
}

Result<EvictResult> evict_lru(DiskCache::State& s, const PrivateDir& root, std::uint64_t max_bytes,
                              const std::string& protect_path) {
  auto scan = scan_files(root, std::nullopt);
  if (!scan) return std::move(scan).error();
  EvictResult out;
  std::uint64_t total = 0;
  for (const ScannedEntry& e : scan->entries) total += e.bytes;
  if (total > max_bytes) {
    auto& entries = scan->entries;
    std::sort(entries.begin(), entries.end(), [](const ScannedEntry& a, const ScannedEntry& b) {
      if (a.mtime.tv_sec != b.mtime.tv_sec) return a.mtime.tv_sec < b.mtime.tv_sec;
      if (a.mtime.tv_nsec != b.mtime.tv_nsec) return a.mtime.tv_nsec < b.mtime.tv_nsec;
      return a.path < b.path;
    });
    for (const ScannedEntry& e : entries) {
      if (total <= max_bytes) break;
      if (!e.regular || e.path == protect_path) continue;
      auto st = stat_at(e.arch->dir, e.name);
      if (!st) {  // someone else removed it already
        total -= e.bytes;
        continue;
      }
      // Used or replaced since the scan: no longer the least recently used one.
      if (static_cast<unsigned long long>(st->st_ino) != e.id.ino || st->st_mtim.tv_sec != e.mtime.tv_sec ||
          st->st_mtim.tv_nsec != e.mtime.tv_nsec)
        continue;
      if (::unlinkat(e.arch->dir.fd(), e.name.c_str(), 0) != 0) continue;
      total -= e.bytes;
      out.evicted += 1;
      out.bytes_freed += e.bytes;
      s.evictions.fetch_add(1);
      s.log("evicted '" + e.path + "' (" + std::to_string(e.bytes) + " bytes, least recently used; cap " +
            std::to_string(max_bytes) + " bytes)");
    }
  }
  out.bytes_after = total;
  return out;
}

// ---- DiskCache ----

DiskCache::DiskCache(std::unique_ptr<State> state) : s_(std::move(state)) {}
DiskCache::DiskCache(DiskCache&&) noexcept = default;
DiskCache& DiskCache::operator=(DiskCache&&) noexcept = default;
DiskCache::~DiskCache() = default;

Result<DiskCache> DiskCache::open(Options options) {
  std::string root;
  if (options.root) {
    if (options.root->empty()) return Error(Code::invalid_argument, "Options.root is set but empty");
    root = *options.root;
  } else {
    auto resolved = resolve_cache_root();
    if (!resolved) return std::move(resolved).error();
    root = std::move(resolved).value();
  }
  std::uint64_t max_bytes = kDefaultMaxBytes;
  if (options.max_bytes) {
    if (*options.max_bytes == 0) return Error(Code::invalid_argument, "Options.max_bytes must be positive");
    max_bytes = *options.max_bytes;
  } else if (const char* env = std::getenv("FLASHJIT_CACHE_MAX_BYTES"); env && *env) {
    auto parsed = parse_byte_size(env, "FLASHJIT_CACHE_MAX_BYTES");
    if (!parsed) return std::move(parsed).error();
    // A cap of nothing is a mistake, not a way to disable the cache (FLASHJIT_DISK_CACHE=0 is).
    if (*parsed == 0) return Error(Code::invalid_argument, "FLASHJIT_CACHE_MAX_BYTES must be positive, got '" + printable(env) + "'");
    max_bytes = *parsed;
  }
  auto dir = CacheDir::open(root);
  if (!dir) return std::move(dir).error();
  auto logger = options.logger ? std::move(options.logger) : env_logger();
  return DiskCache(std::make_unique<State>(std::move(dir).value(), max_bytes, std::move(logger), options));
}

const std::string& DiskCache::root() const { return s_->dir.root(); }

std::uint64_t DiskCache::max_bytes() const { return s_->max_bytes; }

std::string DiskCache::entry_path(const EntryKey& key) const {
  return join_path(s_->dir.arch_path(key.arch), entry_file_name(key));
}

Result<std::optional<std::string>> DiskCache::load(const EntryKey& key) {
  FJ_TRY(validate_entry_key(key));
  auto root = s_->dir.open_root(/*create=*/false);
  Result<std::optional<std::string>> r = std::optional<std::string>();
  if (root) r = load_entry(*s_, *root, key, LoadMode{});
  else if (root.error().code() != Code::not_found) return std::move(root).error();  // deleted: a miss
  if (!r) return r;
  if (r->has_value()) {
    s_->hits.fetch_add(1);
    s_->bytes_read.fetch_add((*r)->size());
  } else {
    s_->misses.fetch_add(1);
  }
  return r;
}

Status DiskCache::store(const EntryKey& key, std::string_view payload) {
  FJ_TRY(validate_entry_key(key));
  auto root = s_->dir.open_root(/*create=*/true);
  if (!root) return std::move(root).error();
  auto arch = CacheDir::create_arch_dir(*root, key.arch);
  if (!arch) return std::move(arch).error();
  {
    // Writers of a key take its lock so a reader dropping a corrupt file never removes a fresh
    // one. Inside a build callback this thread may already hold it: do not wait on ourselves.
    std::optional<FileLock> held;
    if (!t_building) {
      auto lock = FileLock::acquire_for(*arch->locks, lock_file_name(key), s_->lock_timeout,
                                        s_->lock_notices(entry_identity(key), "storing without it"));
      if (!lock) return std::move(lock).error();
      held = std::move(lock).value();
      if (!held)
        s_->log("waited " + std::to_string(s_->lock_timeout.count()) + " ms for the lock of '" +
                entry_identity(key) + "', storing without it");
    }
    FJ_TRY(store_entry(*s_, *arch, key, payload));
  }
  return enforce_cap(*s_, *root, entry_path(key));
}

Result<std::string> DiskCache::get_or_build(const EntryKey& key, const std::function<Result<std::string>()>& build,
                                            LookupOutcome* outcome, std::optional<Error>* store_error) {
  FJ_TRY(validate_entry_key(key));
  auto hit = [&](std::string payload, LookupOutcome how) -> Result<std::string> {
    s_->hits.fetch_add(1);
    s_->bytes_read.fetch_add(payload.size());
    if (outcome) *outcome = how;
    return payload;
  };

  // One root for the whole call: the folder checked is the folder read, locked and written.
  auto root = s_->dir.open_root(/*create=*/true);
  if (!root) return std::move(root).error();
  auto first = load_entry(*s_, *root, key, LoadMode{});
  if (!first) {
    // Unsafe folders and bad keys are the caller's to see; plain I/O trouble only costs a build.
    if (first.error().code() != Code::io_error) return std::move(first).error();
    s_->log("lookup of '" + entry_identity(key) + "' failed, building anyway: " + first.error().message());
  } else if (first->has_value()) {
    return hit(std::move(**first), LookupOutcome::hit);
  }

  if (t_building)
    return Error(Code::invalid_argument,
                 "get_or_build for '" + entry_identity(key) + "' was called from inside the build of '" +
                     entry_identity(*t_building) +
                     "' and missed: building it would hold one key's lock while another compiles; build it "
                     "before, not during, the outer build")
        .with("key", entry_identity(key))
        .with("outer_key", entry_identity(*t_building));

  auto arch = CacheDir::create_arch_dir(*root, key.arch);
  if (!arch) return std::move(arch).error();
  const std::string path = entry_path(key);

  std::optional<FileLock> lock;
  auto acquired = FileLock::acquire_for(*arch->locks, lock_file_name(key), s_->lock_timeout,
                                        s_->lock_notices(entry_identity(key), "building without it"));
  if (!acquired)
    s_->log("cannot lock '" + entry_identity(key) + "', building without the lock: " + acquired.error().message());
  else if (!acquired->has_value())
    s_->log("waited " + std::to_string(s_->lock_timeout.count()) + " ms for the lock of '" + entry_identity(key) +
            "', building without it");
  else
    lock = std::move(**acquired);

  // Whoever held the lock before us has probably just published the entry.
  auto again = load_entry_in(*s_, *arch, key, LoadMode{lock.has_value(), true});
  if (again && again->has_value()) return hit(std::move(**again), LookupOutcome::hit_after_wait);
  if (!again && again.error().code() != Code::io_error) return std::move(again).error();

  s_->misses.fetch_add(1);
  Result<std::string> built = Error(Code::internal, "build callback did not run");
  {
    BuildingGuard guard(key);
    auto t0 = std::chrono::steady_clock::now();
    built = build();
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
    s_->builds.fetch_add(1);
    s_->build_us.fetch_add(static_cast<std::uint64_t>(us));
  }
  if (!built) return built;

  Status stored = store_entry(*s_, *arch, key, *built);
  lock.reset();  // never hold a key's lock longer than its own build and publish
  if (!stored) {
    s_->store_failures.fetch_add(1);
    s_->log("could not store '" + entry_identity(key) + "': " + stored.error().message());
    if (store_error) *store_error = stored.error();
  } else if (Status capped = enforce_cap(*s_, *root, path); !capped) {
    s_->log("could not enforce the cache size cap: " + capped.error().message());
  }
  if (outcome) *outcome = LookupOutcome::built;
  return built;
}

CacheStats DiskCache::stats() const {
  CacheStats c;
  c.hits = s_->hits.load();
  c.misses = s_->misses.load();
  c.corrupt = s_->corrupt.load();
  c.stores = s_->stores.load();
  c.store_failures = s_->store_failures.load();
  c.bytes_read = s_->bytes_read.load();
  c.bytes_written = s_->bytes_written.load();
  c.evictions = s_->evictions.load();
  c.builds = s_->builds.load();
  c.build_ms = static_cast<double>(s_->build_us.load()) / 1000.0;
  return c;
}

}  // namespace flashjit::cache
