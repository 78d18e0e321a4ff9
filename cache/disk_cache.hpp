// The on-disk cache of compiled kernels (cubins), shared by every process of a user.
//
// Readers never lock: entries are published by atomic rename and verified on every read (see
// entry_file.hpp), so a reader sees a whole, checked entry or a miss. Builders take a per-key
// flock (file_lock.hpp) and re-check before building, so concurrent processes build each key
// about once. A corrupt entry is a miss: it is logged, removed, and rebuilt by the next
// get_or_build. The total size is capped; the least recently used entries go first, with each
// entry's mtime serving purely as its last-used clock (never to judge freshness: the content
// hash in the key does that).
//
// Cached kernels are executable code: every operation opens the root once, checks it on its
// descriptor and reaches everything below through descriptors (cache_dir.hpp, private_dir.hpp),
// and every entry file is checked before it is read (entry_file.hpp).
//
// Every method is safe to call from many threads at once, and many processes may share a root.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/entry_key.hpp"
#include "cache/file_lock.hpp"
#include "flashjit/status.hpp"

namespace flashjit::cache {

inline constexpr std::uint64_t kDefaultMaxBytes = 2ull << 30;  // 2 GiB

struct Options {
  // Cache folder. Unset: resolve_cache_root() ($FLASHJIT_CACHE_DIR, $XDG_CACHE_HOME/flashjit,
  // $HOME/.cache/flashjit).
  std::optional<std::string> root;
  // Cap on the bytes of all entries of all arches. Unset: $FLASHJIT_CACHE_MAX_BYTES (a byte
  // count, optionally with a K/M/G/T suffix, binary), else kDefaultMaxBytes.
  std::optional<std::uint64_t> max_bytes;
  // Receives one line per notable event (corrupt entry dropped, eviction, a long lock wait,
  // store failure, stale temp file removed). Calls are serialized. Empty: lines go to stderr when
  // $FLASHJIT_LOG is set (and not "0"), else nowhere.
  std::function<void(const std::string&)> logger;
  // How long get_or_build (and store) wait for another process holding the same key's lock.
  // After that they go ahead without it: publishing is atomic, so the only cost is a
  // duplicate build. The cache-wide maintenance lock (eviction, prune, clear) is waited for as
  // long: then a store goes on without enforcing the size cap, and prune or clear fail.
  std::chrono::milliseconds lock_timeout = std::chrono::minutes(5);
  // A wait for a lock is logged (who holds it, how long we have waited) after this long,
  // then every `lock_wait_notice_every`, until it ends (file_lock.hpp says why these values).
  std::chrono::milliseconds lock_wait_notice_after = kLockWaitNoticeAfter;
  std::chrono::milliseconds lock_wait_notice_every = kLockWaitNoticeEvery;
};

// The logger an empty Options::logger stands for: lines to stderr when $FLASHJIT_LOG is set (and
// not "0"), else none (an empty function).
std::function<void(const std::string&)> env_logger();

// How get_or_build got its payload.
enum class LookupOutcome {
  hit,             // found on the first, lock-free look
  hit_after_wait,  // another builder published it while we waited for the key's lock
  built,           // the build callback ran
};

// Counters of one DiskCache object (not of the folder; see scan() for that).
struct CacheStats {
  std::uint64_t hits = 0;            // load()/get_or_build() calls answered from disk
  std::uint64_t misses = 0;          // ... not answered from disk
  std::uint64_t corrupt = 0;         // entries that failed verification (each also a miss)
  std::uint64_t stores = 0;          // entries published
  std::uint64_t store_failures = 0;  // publishes that failed inside get_or_build (logged)
  std::uint64_t bytes_read = 0;      // payload bytes returned from disk
  std::uint64_t bytes_written = 0;   // entry file bytes published
  std::uint64_t evictions = 0;       // entries removed by the size cap or prune()
  std::uint64_t builds = 0;          // build callbacks run
  double build_ms = 0;               // their total wall time
};

struct EntryInfo {
  EntryKey key;  // for an entry with an unreadable header: content_hash is the file name's prefix
  std::string path;
  std::uint64_t file_bytes = 0;
  std::chrono::system_clock::time_point last_used;
  std::string problem;  // empty unless the header failed its checks (verify() checks everything)
};

struct ArchSummary {
  std::string arch;
  std::uint64_t entries = 0;
  std::uint64_t bytes = 0;
};

struct Summary {
  std::vector<ArchSummary> arches;  // sorted by arch
  std::uint64_t entries = 0;
  std::uint64_t bytes = 0;
  std::uint64_t temp_files = 0;  // in-flight or crashed writes
  std::uint64_t lock_files = 0;
};

struct BadEntry {
  std::string path;
  std::string reason;
};

struct VerifyReport {
  std::uint64_t checked = 0;
  std::uint64_t good = 0;
  std::vector<BadEntry> bad;
  std::uint64_t removed = 0;
};

// What prune() and clear() both report: the bytes of the entries they removed, and the stale
// temp files and unused lock files they removed besides.
struct RemovalReport {
  std::uint64_t bytes_freed = 0;
  std::uint64_t temp_files_removed = 0;
  std::uint64_t lock_files_removed = 0;
};

struct PruneReport : RemovalReport {
  std::uint64_t evicted = 0;  // least recently used entries removed
  std::uint64_t bytes_after = 0;
};

struct ClearReport : RemovalReport {
  std::uint64_t entries_removed = 0;
};

class DiskCache {
 public:
  // Resolves the root, creates it (mode 0700) and checks it is private; resolves the size cap.
  static Result<DiskCache> open(Options options = {});

  // Move-only; a moved-from DiskCache may only be destroyed or assigned to.
  DiskCache(DiskCache&&) noexcept;
  DiskCache& operator=(DiskCache&&) noexcept;
  ~DiskCache();

  const std::string& root() const;
  std::uint64_t max_bytes() const;
  // Where the entry for `key` lives (whether or not it exists); `key` must be valid.
  std::string entry_path(const EntryKey& key) const;

  // The verified payload, or nullopt on a miss. Corrupt entries count as misses: they are
  // logged and removed. Errors: invalid_argument (bad key), permission_denied (unsafe folder),
  // io_error.
  Result<std::optional<std::string>> load(const EntryKey& key);

  // Publishes atomically (replacing any previous entry for the key), then enforces the size
  // cap, never evicting the entry just stored.
  Status store(const EntryKey& key, std::string_view payload);

  // load(); on a miss, takes the key's lock, looks again, and otherwise runs `build` and stores
  // its result. A failed build is returned as is and nothing is stored. A failed store does not
  // fail the call, since the caller has its payload: it is logged, counted, and given to
  // `store_error` when that is set (so tools can report it). `build` must not call get_or_build
  // for another key that misses (that would hold this key's lock while the other compiles): such
  // a call fails with invalid_argument.
  Result<std::string> get_or_build(const EntryKey& key, const std::function<Result<std::string>()>& build,
                                   LookupOutcome* outcome = nullptr, std::optional<Error>* store_error = nullptr);

  CacheStats stats() const;

  // --- management (walks the folder; counts all processes' entries) ---

  Result<Summary> scan() const;
  // All entries, or one arch's, sorted by arch then file name.
  Result<std::vector<EntryInfo>> list(const std::optional<std::string>& arch = std::nullopt) const;
  // Reads every entry in full; optionally removes the bad ones (a folder in an entry's place is
  // reported but never removed).
  Result<VerifyReport> verify(bool remove_bad = false);
  // Evicts least recently used entries until at most `max_bytes` remain; removes stale temp
  // files and unused lock files. Both take the maintenance lock: when another process holds it
  // past Options::lock_timeout they remove nothing and fail (io_error) naming the holder.
  Result<PruneReport> prune(std::uint64_t max_bytes);
  // Removes every entry (of one arch, or all), stale temp files and unused lock files.
  Result<ClearReport> clear(const std::optional<std::string>& arch = std::nullopt);

  struct State;  // shared with the .cpp files that implement this class

 private:
  explicit DiskCache(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
  friend class DiskCacheAccess;
};

}  // namespace flashjit::cache
