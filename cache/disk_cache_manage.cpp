// DiskCache management: walking the folder for scan/list/verify, and removing things for
// prune/clear. Lookups and stores are in disk_cache.cpp. Like them, every walk starts from the
// root opened once and reaches everything through descriptors.
#include <sys/stat.h>
#include <unistd.h>

#include <map>

#include "cache/atomic_file.hpp"
#include "cache/disk_cache.hpp"
#include "cache/disk_cache_state.hpp"
#include "cache/entry_file.hpp"
#include "cache/file_lock.hpp"
#include "base/printable.hpp"

namespace flashjit::cache {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::chrono::system_clock::time_point to_time_point(const timespec& ts) {
  return std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(
      std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec)));
}

// The key an entry file claims by its place and name; content_hash holds only the name's prefix.
EntryKey key_from_file_name(const ScannedEntry& e) {
  auto parsed = parse_entry_file_name(e.name);
  return EntryKey{e.arch_name, parsed ? parsed->name : std::string(), parsed ? parsed->hash_prefix : std::string()};
}

// Checks that the identity stored in a header agrees with the file's arch folder and name, so an
// entry copied or renamed to another key's place is caught. Returns the full key, or the problem.
Result<EntryKey> key_from_header(const ScannedEntry& e, const std::string& stored_identity) {
  auto claimed = key_from_file_name(e);
  auto stored = parse_entry_identity(stored_identity);
  if (!stored)
    return Error(Code::corrupt, "stored key '" + printable(stored_identity) + "' is malformed")
        .with("reason", "malformed key");
  if (stored->arch != claimed.arch || stored->name != claimed.name ||
      stored->content_hash.compare(0, kFileHashDigits, claimed.content_hash) != 0)
    return Error(Code::corrupt, "stored key '" + printable(stored_identity) + "' does not match the file's place")
        .with("reason", "key does not match file name");
  return std::move(stored).value();
}

std::string reason_of(const Error& e) { return e.detail("reason").value_or(e.message()); }

// Removes stale temp files and unheld lock files, what a crashed or finished writer leaves
// behind, counting them in `out`.
Status remove_leftovers(DiskCache::State& s, const ScanResult& scan, RemovalReport& out) {
  for (const FoundFile& f : scan.temp_files) {
    // A live writer may still be filling it; prune was asked for, so the looser rule applies.
    if (!is_stale_temp(f.arch->dir, f.name, StaleRule::old_or_writer_gone)) continue;
    if (::unlinkat(f.arch->dir.fd(), f.name.c_str(), 0) == 0) {
      out.temp_files_removed += 1;
      s.log("removed stale temp file '" + f.path + "'");
    }
  }
  for (const FoundFile& f : scan.lock_files) {
    auto removed = remove_lock_file_if_unheld(*f.arch->locks, f.name);
    if (!removed) return std::move(removed).error();
    if (*removed) out.lock_files_removed += 1;
  }
  return {};
}

// Opens the root for a management walk: a root that does not exist holds nothing.
Result<std::optional<PrivateDir>> open_root_if_any(const DiskCache::State& s) {
  auto root = s.dir.open_root(/*create=*/false);
  if (root) return std::optional<PrivateDir>(std::move(root).value());
  if (root.error().code() == Code::not_found) return std::optional<PrivateDir>();
  return std::move(root).error();
}

// prune and clear wait for the maintenance lock as a store does, but going on without it would
// race the holder's own removals: when the wait runs out they fail, naming the holder.
Result<FileLock> maintenance_lock_or_fail(DiskCache::State& s, const PrivateDir& root, const std::string& what) {
  auto lock = take_maintenance_lock(s, root, "giving up");
  if (!lock) return std::move(lock).error();
  if (lock->lock) return std::move(*lock->lock);
  return Error(Code::io_error, what + " gave up, nothing removed: " + lock->ran_out +
                                   "; its holder is another prune or clear, or a store evicting down to the size "
                                   "cap (a stopped one, as under Ctrl-Z, keeps it until it is resumed or ended)")
      .with("path", root.path_of(kMaintenanceLockName));
}

}  // namespace

Result<ScanResult> scan_files(const PrivateDir& root, const std::optional<std::string>& arch) {
  ScanResult out;
  std::vector<std::string> names;
  if (arch) {
    names.push_back(*arch);
  } else {
    auto arches = CacheDir::arches(root);
    if (!arches) return std::move(arches).error();
    names = std::move(arches).value();
  }
  for (const std::string& a : names) {
    auto opened = CacheDir::existing_arch_dir(root, a);
    if (!opened) {
      if (opened.error().code() == Code::not_found) continue;  // absent, or removed while we walked
      return std::move(opened).error();
    }
    out.arches.push_back(a);
    auto dir = std::make_shared<const ArchDir>(std::move(opened).value());
    auto files = list_dir(dir->dir);
    if (!files) {
      if (files.error().code() == Code::not_found) continue;
      return std::move(files).error();
    }
    for (const DirEntry& f : *files) {
      const std::string path = dir->dir.path_of(f.name);
      if (f.name.compare(0, std::string(kTempPrefix).size(), kTempPrefix) == 0) {
        if (f.is_regular) out.temp_files.push_back(FoundFile{dir, f.name, path});
        continue;
      }
      if (!parse_entry_file_name(f.name)) continue;
      auto st = stat_at(dir->dir, f.name);
      if (!st) continue;  // removed meanwhile
      ScannedEntry e;
      static_cast<FoundFile&>(e) = FoundFile{dir, f.name, path};
      e.arch_name = a;
      e.regular = S_ISREG(st->st_mode);
      e.bytes = e.regular ? static_cast<std::uint64_t>(st->st_size) : 0;
      e.mtime = st->st_mtim;
      e.id = FileId{static_cast<unsigned long long>(st->st_dev), static_cast<unsigned long long>(st->st_ino)};
      out.entries.push_back(std::move(e));
    }
    if (!dir->locks) continue;  // no locks/ folder yet
    auto locks = list_dir(*dir->locks);
    if (!locks) continue;
    for (const DirEntry& f : *locks)
      if (f.is_regular && ends_with(f.name, kLockExtension))
        out.lock_files.push_back(FoundFile{dir, f.name, dir->locks->path_of(f.name)});
  }
  return out;
}

Result<std::vector<ListedEntry>> list_entries(const PrivateDir& root, const std::optional<std::string>& arch) {
  auto found = scan_files(root, arch);
  if (!found) return std::move(found).error();
  std::vector<ListedEntry> out;
  for (ScannedEntry& e : found->entries) {
    EntryInfo info{key_from_file_name(e), e.path, e.bytes, to_time_point(e.mtime), {}};
    // A FIFO, a folder, a symlink or an unsafe file fails here with its reason, without blocking.
    auto header = read_entry_header(e.arch->dir, e.name);
    if (!header) {
      if (header.error().code() == Code::not_found) continue;  // removed meanwhile
      if (header.error().code() != Code::corrupt) return std::move(header).error();
      info.problem = reason_of(header.error());
    } else if (auto key = key_from_header(e, header->key); !key) {
      info.problem = reason_of(key.error());
    } else {
      info.key = std::move(key).value();
    }
    out.push_back(ListedEntry{std::move(info), std::move(e)});
  }
  return out;
}

Result<Summary> DiskCache::scan() const {
  auto root = open_root_if_any(*s_);
  if (!root) return std::move(root).error();
  Summary out;
  if (!*root) return out;
  auto found = scan_files(**root, std::nullopt);
  if (!found) return std::move(found).error();
  std::map<std::string, ArchSummary> by_arch;
  for (const std::string& a : found->arches) by_arch[a].arch = a;
  for (const ScannedEntry& e : found->entries) {
    if (!e.regular) continue;  // reported by list and verify, not an entry
    ArchSummary& a = by_arch[e.arch_name];
    a.entries += 1;
    a.bytes += e.bytes;
    out.entries += 1;
    out.bytes += e.bytes;
  }
  for (auto& [name, summary] : by_arch) out.arches.push_back(summary);
  out.temp_files = found->temp_files.size();
  out.lock_files = found->lock_files.size();
  return out;
}

Result<std::vector<EntryInfo>> DiskCache::list(const std::optional<std::string>& arch) const {
  if (arch) FJ_TRY(validate_arch(*arch));
  auto root = open_root_if_any(*s_);
  if (!root) return std::move(root).error();
  std::vector<EntryInfo> out;
  if (!*root) return out;
  auto listed = list_entries(**root, arch);
  if (!listed) return std::move(listed).error();
  for (ListedEntry& e : *listed) out.push_back(std::move(e.info));
  return out;
}

Result<VerifyReport> DiskCache::verify(bool remove_bad) {
  auto root = open_root_if_any(*s_);
  if (!root) return std::move(root).error();
  VerifyReport out;
  if (!*root) return out;
  auto found = scan_files(**root, std::nullopt);
  if (!found) return std::move(found).error();
  for (const ScannedEntry& e : found->entries) {
    FileId id = e.id;
    std::optional<Error> problem;
    auto header = read_entry_header(e.arch->dir, e.name);
    if (!header) {
      if (header.error().code() == Code::not_found) continue;
      problem = std::move(header).error();
    } else if (auto key = key_from_header(e, header->key); !key) {
      problem = std::move(key).error();
    } else if (auto payload = read_entry(e.arch->dir, e.name, header->key, &id); !payload) {
      if (payload.error().code() == Code::not_found) continue;
      problem = std::move(payload).error();
    }
    out.checked += 1;
    if (!problem) {
      out.good += 1;
      continue;
    }
    out.bad.push_back(BadEntry{e.path, reason_of(*problem)});
    if (remove_bad && remove_bad_entry(*e.arch, e.name, id, /*holding_key_lock=*/false)) {
      out.removed += 1;
      s_->log("verify removed '" + e.path + "': " + reason_of(*problem));
    }
  }
  return out;
}

Result<PruneReport> DiskCache::prune(std::uint64_t max_bytes) {
  auto root = open_root_if_any(*s_);
  if (!root) return std::move(root).error();
  PruneReport out;
  if (!*root) return out;
  auto lock = maintenance_lock_or_fail(*s_, **root, "cache prune");
  if (!lock) return std::move(lock).error();
  auto evicted = evict_lru(*s_, **root, max_bytes, /*protect_path=*/"");
  if (!evicted) return std::move(evicted).error();
  auto found = scan_files(**root, std::nullopt);
  if (!found) return std::move(found).error();
  out.evicted = evicted->evicted;
  out.bytes_freed = evicted->bytes_freed;
  out.bytes_after = evicted->bytes_after;
  FJ_TRY(remove_leftovers(*s_, *found, out));
  return out;
}

Result<ClearReport> DiskCache::clear(const std::optional<std::string>& arch) {
  if (arch) FJ_TRY(validate_arch(*arch));
  auto root = open_root_if_any(*s_);
  if (!root) return std::move(root).error();
  ClearReport out;
  if (!*root) return out;
  auto lock = maintenance_lock_or_fail(*s_, **root, "cache clear");
  if (!lock) return std::move(lock).error();
  auto found = scan_files(**root, arch);
  if (!found) return std::move(found).error();
  for (const ScannedEntry& e : found->entries) {
    if (::unlinkat(e.arch->dir.fd(), e.name.c_str(), 0) != 0) continue;  // already gone, or a folder
    out.entries_removed += 1;
    out.bytes_freed += e.bytes;
  }
  FJ_TRY(remove_leftovers(*s_, *found, out));
  s_->log("cleared " + std::to_string(out.entries_removed) + " entries (" + std::to_string(out.bytes_freed) +
          " bytes) from " + (arch ? "arch " + *arch : std::string("all arches")));
  return out;
}

}  // namespace flashjit::cache
