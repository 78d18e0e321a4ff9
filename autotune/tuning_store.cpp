#include "autotune/tuning_store.hpp"

#include <stdio.h>

#include <cerrno>
#include <cstdio>
#include <ctime>
#include <map>
#include <mutex>
#include <set>

#include "autotune/tuning_file.hpp"
#include "cache/atomic_file.hpp"
#include "cache/cache_dir.hpp"
#include "cache/file_lock.hpp"
#include "cache/posix_io.hpp"

namespace flashjit::autotune {

namespace {

// Read size per call: a typical tuning file fits in one or two reads.
constexpr std::size_t kReadChunkBytes = 64 * 1024;

// Reads the whole file `name` of `dir`; nullopt when it does not exist. The file is checked on its
// descriptor before a byte is read (a regular file, ours, writable by nobody else; a FIFO never
// blocks): one that fails, or is too large, is Code::corrupt, so it is moved aside.
Result<std::optional<std::string>> read_small_file(const cache::PrivateDir& dir, const std::string& name) {
  const std::string path = dir.path_of(name);
  auto file = cache::open_private_file(dir, name);
  if (!file) {
    if (file.error().code() == Code::not_found) return std::optional<std::string>();
    if (file.error().code() == Code::permission_denied)
      return Error(Code::corrupt, file.error().message()).with("path", path);
    return std::move(file).error();
  }
  auto too_large = [&] {
    return Error(Code::corrupt, "tuning file '" + path + "' is larger than " + std::to_string(kMaxTuningFileBytes) +
                                    " bytes")
        .with("path", path);
  };
  if (file->size > kMaxTuningFileBytes) return too_large();
  std::string data;
  std::string buf(kReadChunkBytes, '\0');
  for (;;) {
    auto n = cache::read_up_to(file->fd.get(), buf.data(), buf.size(), path);
    if (!n) return std::move(n).error();
    data.append(buf.data(), *n);
    if (data.size() > kMaxTuningFileBytes) return too_large();
    if (*n < buf.size()) return std::optional<std::string>(std::move(data));
  }
}

}  // namespace

std::string device_slug(std::string_view device_name) {
  std::string slug;
  bool pending_dash = false;
  for (char c : device_name) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z');
    if (!alnum) {
      pending_dash = !slug.empty();
      continue;
    }
    if (pending_dash) slug += '-';
    pending_dash = false;
    slug += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  }
  if (slug.size() > kMaxDeviceSlugLength) slug.resize(kMaxDeviceSlugLength);
  while (!slug.empty() && slug.back() == '-') slug.pop_back();
  return slug.empty() ? "unknown-device" : slug;
}

std::string tuning_file_name(std::string_view arch, std::string_view device_name) {
  return std::string(arch) + "-" + device_slug(device_name) + std::string(kTuningFileExtension);
}

struct TuningStore::State {
  std::string root, dir, locks, path, lock_path;  // for messages
  std::string file_name, lock_name;
  TuningFileHeader header;  // this process: device, arch and the versions records must match
  Logger logger;
  KnobTableLookup knobs;

  mutable std::mutex mutex;  // guards records and warned
  std::map<std::string, TuningRecord> records;
  mutable std::set<std::string> warned;  // notices already logged, so each appears once

  void log(const std::string& line) const {
    if (logger) logger(line);
  }
  void log_once(const std::string& id, const std::string& line) const {
    {
      std::lock_guard<std::mutex> guard(mutex);
      if (!warned.insert(id).second) return;
    }
    log(line);
  }

  // <root>/tuning and <root>/tuning/locks, opened through the root's descriptor and checked now;
  // created when missing (the cache may have been cleared while we ran).
  struct Dirs {
    cache::PrivateDir tuning, locks;
  };
  Result<Dirs> open_dirs() const {
    auto r = cache::PrivateDir::open_root(root, /*create=*/true);
    if (!r) return std::move(r).error();
    auto tuning = r->open_sub(kTuningDirName, /*create=*/true);
    if (!tuning) return std::move(tuning).error();
    auto locks_dir = tuning->open_sub(kTuningLocksDirName, /*create=*/true);
    if (!locks_dir) return std::move(locks_dir).error();
    return Dirs{std::move(tuning).value(), std::move(locks_dir).value()};
  }

  cache::LockWaitNotices lock_notices() const {
    cache::LockWaitNotices n;
    if (logger)
      n.notify = [this](const cache::LockWait& w) {
        log("lock wait: waited " + std::to_string(w.waited.count() / 1000) + " s for the tuning file lock '" + w.path +
            "', held by " + w.holder + "; giving up after " + std::to_string(w.timeout.count() / 1000) + " s");
      };
    return n;
  }

  Result<cache::FileLock> lock_file(const Dirs& d) const {
    auto lock = cache::FileLock::acquire_for(d.locks, lock_name, kTuningFileLockTimeout, lock_notices());
    if (!lock) return std::move(lock).error();
    if (!lock->has_value())
      return Error(Code::io_error, "timed out after " + std::to_string(kTuningFileLockTimeout.count()) +
                                       " s waiting for the tuning file lock '" + lock_path + "'")
          .with("path", lock_path);
    return std::move(**lock);
  }

  // Renames a corrupt file out of the way, keeping it for inspection. Only under the file lock:
  // a reader without it could rename a good file another writer had just published.
  void move_aside(const Dirs& d, const std::string& problem) const {
    const std::string base = file_name + ".corrupt-" + std::to_string(static_cast<long long>(std::time(nullptr)));
    std::string aside = base;
    for (int n = 2; cache::stat_at(d.tuning, aside).ok(); ++n) aside = base + "-" + std::to_string(n);
    if (::renameat(d.tuning.fd(), file_name.c_str(), d.tuning.fd(), aside.c_str()) == 0)
      log("tuning file '" + path + "' is unusable (" + problem + "); moved aside to '" + d.tuning.path_of(aside) +
          "', starting empty");
    else
      log("tuning file '" + path + "' is unusable (" + problem + ") and could not be moved aside: " +
          cache::sys_error(Code::io_error, "rename", path, errno).message() + "; ignoring it");
  }

  // Reads and parses the file (missing: empty). With `holding_lock`, a corrupt file is moved
  // aside and the result is an empty, ok file.
  Result<ParsedTuningFile> load(const Dirs& d, bool holding_lock) const {
    auto text = read_small_file(d.tuning, file_name);
    ParsedTuningFile parsed;
    if (!text) {
      if (text.error().code() != Code::corrupt) return std::move(text).error();
      parsed.state = TuningFileState::corrupt;
      parsed.problem = text.error().message();
    } else if (text->has_value()) {
      parsed = parse_tuning_file(**text, header, knobs);
    }
    if (parsed.state == TuningFileState::corrupt && holding_lock) {
      move_aside(d, parsed.problem);
      return ParsedTuningFile{};
    }
    if (parsed.state == TuningFileState::newer_format)
      log_once("newer-format", "tuning file '" + path + "': " + parsed.problem +
                                   "; its results are not used and it is never overwritten");
    for (const std::string& bad : parsed.bad_records)
      log_once("bad-record " + bad, "tuning file '" + path + "': ignoring record " + bad);
    return parsed;
  }

  // load() for readers: the lock is taken only when the file turns out corrupt, to move it aside.
  Result<ParsedTuningFile> load_for_reading() const {
    auto d = open_dirs();
    if (!d) return std::move(d).error();
    auto parsed = load(*d, /*holding_lock=*/false);
    if (!parsed || parsed->state != TuningFileState::corrupt) return parsed;
    auto lock = lock_file(*d);
    if (!lock) {
      log("tuning file '" + path + "' is unusable (" + parsed->problem + "); ignoring it (" +
          lock.error().message() + ")");
      return ParsedTuningFile{};
    }
    return load(*d, /*holding_lock=*/true);  // it may have been replaced by a good one meanwhile
  }

  void merge_into_memory(const std::map<std::string, TuningRecord>& from_disk) {
    std::lock_guard<std::mutex> guard(mutex);
    for (const auto& [k, r] : from_disk) records[k] = r;
  }
};

TuningStore::TuningStore(std::unique_ptr<State> state) : s_(std::move(state)) {}
TuningStore::TuningStore(TuningStore&&) noexcept = default;
TuningStore& TuningStore::operator=(TuningStore&&) noexcept = default;
TuningStore::~TuningStore() = default;

Result<TuningStore> TuningStore::open(std::optional<std::string> root, std::string device_name, std::string arch,
                                      std::string nvrtc_version, std::string driver_version, Logger logger,
                                      KnobTableLookup knobs) {
  FJ_TRY(cache::validate_arch(arch));
  if (device_name.empty()) return Error(Code::invalid_argument, "tuning store: the device name is empty");
  if (!root) {
    auto resolved = cache::resolve_cache_root();
    if (!resolved) return std::move(resolved).error();
    root = std::move(resolved).value();
  }
  auto dir = cache::CacheDir::open(*root);  // creates the root and applies the private-folder rules
  if (!dir) return std::move(dir).error();

  auto s = std::make_unique<State>();
  s->root = dir->root();
  s->dir = cache::join_path(s->root, kTuningDirName);
  s->locks = cache::join_path(s->dir, kTuningLocksDirName);
  s->file_name = tuning_file_name(arch, device_name);
  s->lock_name = s->file_name.substr(0, s->file_name.size() - kTuningFileExtension.size()) + ".lock";
  s->path = cache::join_path(s->dir, s->file_name);
  s->lock_path = cache::join_path(s->locks, s->lock_name);
  s->header = TuningFileHeader{std::move(device_name), std::move(arch), std::move(nvrtc_version),
                               std::move(driver_version)};
  s->logger = logger ? serialized_logger(std::move(logger)) : default_logger();
  s->knobs = std::move(knobs);

  auto parsed = s->load_for_reading();
  if (!parsed) return std::move(parsed).error();
  s->records = std::move(parsed->records);
  return TuningStore(std::move(s));
}

bool TuningStore::has(const TuningKey& key) const {
  std::lock_guard<std::mutex> guard(s_->mutex);
  return s_->records.count(key.to_string()) > 0;
}

std::optional<TuningRecord> TuningStore::find(const TuningKey& key, const std::string& candidate_set_hash) const {
  const std::string k = key.to_string();
  std::optional<TuningRecord> r;
  {
    std::lock_guard<std::mutex> guard(s_->mutex);
    auto it = s_->records.find(k);
    if (it == s_->records.end()) return std::nullopt;
    r = it->second;
  }
  const TuningFileHeader& h = s_->header;
  if (r->nvrtc_version != h.nvrtc_version) {
    s_->log_once("nvrtc " + k, "stored tuning for " + k + " was made with NVRTC '" + r->nvrtc_version +
                                   "', this process uses '" + h.nvrtc_version + "'; ignoring it");
    return std::nullopt;
  }
  if (r->driver_version != h.driver_version) {
    s_->log_once("driver " + k, "stored tuning for " + k + " was made with driver '" + r->driver_version +
                                    "', this process uses '" + h.driver_version + "'; ignoring it");
    return std::nullopt;
  }
  if (r->candidate_set_hash != candidate_set_hash) {
    s_->log_once("candidates " + k, "stored tuning for " + k +
                                        " searched a different candidate set; ignoring it");
    return std::nullopt;
  }
  return r;
}

Status TuningStore::put(const TuningKey& key, const TuningRecord& record) {
  const std::string k = key.to_string();
  TuningRecord r = record;
  r.nvrtc_version = s_->header.nvrtc_version;
  r.driver_version = s_->header.driver_version;
  {
    std::lock_guard<std::mutex> guard(s_->mutex);
    s_->records[k] = r;
  }

  auto d = s_->open_dirs();  // one root for the whole put: the folder checked is the folder written
  if (!d) return std::move(d).error();
  auto lock = s_->lock_file(*d);
  if (!lock) return std::move(lock).error();
  auto parsed = s_->load(*d, /*holding_lock=*/true);
  if (!parsed) return std::move(parsed).error();
  if (parsed->state == TuningFileState::newer_format)
    return Error(Code::unsupported, "tuning file '" + s_->path + "': " + parsed->problem +
                                        "; not overwriting it, the result is kept in memory only")
        .with("path", s_->path);
  std::map<std::string, TuningRecord> merged = std::move(parsed->records);
  merged[k] = r;
  for (const std::string& stale : cache::remove_stale_temps(d->tuning))
    s_->log("removed stale temp file '" + stale + "' (left by a writer that is gone)");
  FJ_TRY(cache::write_file_atomic(d->tuning, s_->file_name, serialize_tuning_file(s_->header, merged)));
  lock->release();
  s_->merge_into_memory(merged);  // other processes' keys come along for free
  return {};
}

Status TuningStore::reload() {
  auto parsed = s_->load_for_reading();
  if (!parsed) return std::move(parsed).error();
  s_->merge_into_memory(parsed->records);
  return {};
}

std::vector<std::pair<std::string, TuningRecord>> TuningStore::records() const {
  std::lock_guard<std::mutex> guard(s_->mutex);
  return {s_->records.begin(), s_->records.end()};
}

Result<cache::PrivateDir> TuningStore::open_locks_dir() const {
  auto d = s_->open_dirs();
  if (!d) return std::move(d).error();
  return std::move(d->locks);
}

const std::string& TuningStore::path() const { return s_->path; }
const std::string& TuningStore::locks_dir() const { return s_->locks; }
const std::string& TuningStore::device_name() const { return s_->header.device_name; }
const std::string& TuningStore::arch() const { return s_->header.arch; }

}  // namespace flashjit::autotune
