// Tuning results kept on disk, one JSON file per (device, arch) (format: tuning_file.hpp):
//
//   <cache root>/tuning/<arch>-<device slug>.json     e.g. tuning/sm_90a-nvidia-h100-80gb-hbm3.json
//   <cache root>/tuning/locks/                         the file's lock, and per-key tuning locks
//
// The cache root is the kernel cache's (cache/cache_dir.hpp: $FLASHJIT_CACHE_DIR, ...), with the
// same private-folder rules, applied the same way: each operation opens the root once, checks it
// on its descriptor, and reaches tuning/, tuning/locks/ and the files in them only through
// descriptors (cache/private_dir.hpp), so a root swapped by whoever owns its parent folder is
// never read or written. The tuning file itself must be a regular file, ours and writable by
// nobody else, or it is treated as corrupt. The kernel cache ignores the "tuning" folder (not an
// arch name).
//
// Every put() rewrites the whole file at once (temp file + rename), so a finished key survives
// the process being killed a moment later, and readers never see half a file. Writers take the
// file's flock, re-read the file and merge before writing, so processes tuning at the same time
// never lose each other's keys. A file that cannot be parsed is logged, renamed aside
// (".corrupt-<unix time>") and treated as empty: tuning results can always be redone.
//
// Lookups read memory only: the file is read at open(), by reload(), and as part of put().
// Every method is safe to call from many threads at once.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "autotune/log.hpp"
#include "autotune/problem_bucket.hpp"
#include "autotune/tuning_record.hpp"
#include "base/variant_json.hpp"
#include "cache/private_dir.hpp"
#include "flashjit/status.hpp"

namespace flashjit::autotune {

// Folder of tuning files under the cache root, and of their locks under it.
inline constexpr const char* kTuningDirName = "tuning";
inline constexpr const char* kTuningLocksDirName = "locks";
// Tuning files are JSON; lock files share their stem.
inline constexpr std::string_view kTuningFileExtension = ".json";
// A tuning file is a few KB per key; anything this large is damage, not data.
inline constexpr std::size_t kMaxTuningFileBytes = 64u << 20;
// Writers hold the file lock only to read, merge and write a small file; a wait this long
// means something is wrong, and put() reports it rather than hang.
inline constexpr std::chrono::seconds kTuningFileLockTimeout{60};
// Device names are short ("NVIDIA H100 80GB HBM3"); the cap keeps file names well under
// NAME_MAX whatever a driver reports.
inline constexpr std::size_t kMaxDeviceSlugLength = 96;

// Lowercase ASCII letters and digits; every run of anything else becomes one '-'; no leading or
// trailing '-'; capped at kMaxDeviceSlugLength; "unknown-device" when nothing is left.
std::string device_slug(std::string_view device_name);

// "<arch>-<device slug>.json"
std::string tuning_file_name(std::string_view arch, std::string_view device_name);

class TuningStore {
 public:
  // Resolves the root (unset: cache::resolve_cache_root()), creates <root>/tuning/locks (mode
  // 0700, checked private like the kernel cache) and reads the file if present. `arch` must be
  // a valid arch name ("sm_90a"), `device_name` non-empty. The versions identify the toolchain
  // whose timings count; records made under others are ignored. An empty logger: default_logger().
  // `knobs` finds each family's knob table, to read stored tilings.
  static Result<TuningStore> open(std::optional<std::string> root, std::string device_name, std::string arch,
                                  std::string nvrtc_version, std::string driver_version, Logger logger,
                                  KnobTableLookup knobs);

  TuningStore(TuningStore&&) noexcept;
  TuningStore& operator=(TuningStore&&) noexcept;
  ~TuningStore();

  // The stored record for `key`, if it was made under this store's nvrtc and driver versions
  // and for the same candidate set; a record failing either check is ignored (logged once per
  // key), so stale tuning is never used. Memory only.
  std::optional<TuningRecord> find(const TuningKey& key, const std::string& candidate_set_hash) const;
  // Whether any record, current or stale, is stored for `key` (no candidate set needed to ask).
  bool has(const TuningKey& key) const;

  // Stores `record` (stamped with this store's versions) under `key`, in memory and then on
  // disk at once: under the file lock, re-read the file, merge, write atomically. On failure
  // the record is still kept in memory for this process, and the error says why the file was
  // not written (Code::unsupported for a file of a newer format, which is left untouched).
  Status put(const TuningKey& key, const TuningRecord& record);

  // Re-reads the file, adding or replacing records from it (records only in memory stay).
  // Picks up what other processes stored since open().
  Status reload();

  // Every record in memory, by key string, sorted; stale ones included (for tools).
  std::vector<std::pair<std::string, TuningRecord>> records() const;

  // <root>/tuning/locks, opened (created if need be) and checked now: the folder for per-key
  // tuning locks of this store's file.
  Result<cache::PrivateDir> open_locks_dir() const;

  const std::string& path() const;       // the tuning file (for messages)
  const std::string& locks_dir() const;  // <root>/tuning/locks (for messages)
  const std::string& device_name() const;
  const std::string& arch() const;

 private:
  struct State;
  explicit TuningStore(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace flashjit::autotune
