#include "cache/bundle.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "cache/atomic_file.hpp"
#include "cache/disk_cache_state.hpp"
#include "cache/entry_file.hpp"
#include "cache/file_lock.hpp"
#include "cache/le_codec.hpp"
#include "base/content_hash.hpp"
#include "base/printable.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace flashjit::cache {

namespace {

constexpr std::uint8_t kTagEnd = 0;
constexpr std::uint8_t kTagEntry = 1;
constexpr std::size_t kMaxFieldBytes = 1024;  // arch/name/hash are all far shorter

// Streams a bundle into an AtomicFileWriter while hashing every byte for the end record.
class BundleWriter {
 public:
  explicit BundleWriter(AtomicFileWriter writer) : w_(std::move(writer)), state_(XXH3_createState()) {
    XXH3_64bits_reset(state_);
  }
  ~BundleWriter() { XXH3_freeState(state_); }
  BundleWriter(const BundleWriter&) = delete;
  BundleWriter& operator=(const BundleWriter&) = delete;

  Status write(std::string_view bytes) {
    XXH3_64bits_update(state_, bytes.data(), bytes.size());
    return w_.write(bytes);
  }
  std::uint64_t digest() const { return XXH3_64bits_digest(state_); }
  Status raw_write(std::string_view bytes) { return w_.write(bytes); }  // the checksum itself
  Status commit() { return w_.commit(); }

 private:
  AtomicFileWriter w_;
  XXH3_state_t* state_;
};

void put_field(std::string& out, const std::string& s) {
  put_u16(out, static_cast<std::uint16_t>(s.size()));
  out.append(s);
}

// One checked record of a bundle being imported; payload points into the bundle's bytes.
struct BundleRecord {
  EntryKey key;
  std::string_view payload;
};

// "bundle '<path>' <outcome>: <reason>", with the path and the reason as details.
Error bundle_error(Code code, const std::string& path, const std::string& outcome, const std::string& reason) {
  return Error(code, "bundle '" + printable(path) + "' " + outcome + ": " + reason)
      .with("path", printable(path))
      .with("reason", reason);
}

Error rejected(Code code, const std::string& path, const std::string& reason) {
  return bundle_error(code, path, "rejected, nothing imported", reason);
}

// Export publishes by renaming over `path`: over a FIFO or a device node that replaces the node
// itself (run as root on /dev/null, it replaced /dev/null). So, as import reads, export replaces
// regular files only; a symlink counts as what it points to.
Status check_export_target(const std::string& path) {
  struct stat st{};
  // Absent is fine (the usual case); any other trouble is reported by creating the temp file.
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return {};
  return bundle_error(Code::invalid_argument, path, "refused, nothing written",
                      "is not a regular file (" + file_type_name(st.st_mode) +
                          "); export replaces a regular file or creates a new one");
}

Status check_bundle_header(const std::string& path, std::string_view head) {
  if (head.size() < sizeof kBundleMagic || std::memcmp(head.data(), kBundleMagic, sizeof kBundleMagic) != 0)
    return rejected(Code::corrupt, path, "bad magic (not a flashjit bundle)");
  ByteReader in(head.substr(sizeof kBundleMagic));
  auto version = in.uint(4);
  if (!version || *version != kBundleFormatVersion)
    return rejected(Code::corrupt, path,
                    "format version " + (version ? std::to_string(*version) : std::string("?")) +
                        ", this build reads version " + std::to_string(kBundleFormatVersion));
  return {};
}

// The whole file, read only once it is known to be a regular file of at most `max_bytes` whose
// header is a bundle's: a FIFO never blocks, and a large file of anything else costs 12 bytes.
Result<std::string> read_bundle_file(const std::string& path, std::uint64_t max_bytes) {
  auto file = open_regular_file(path);
  if (!file) {
    if (file.error().code() == Code::invalid_argument)
      return rejected(Code::invalid_argument, path, file.error().detail("reason").value_or("is not a regular file"));
    return std::move(file).error();
  }
  const std::uint64_t size = file->size;
  if (size > max_bytes)
    return rejected(Code::invalid_argument, path,
                    std::to_string(size) + " bytes exceed ImportOptions.max_bundle_bytes (" +
                        std::to_string(max_bytes) + ")");
  std::string bytes(kBundleHeaderBytes, '\0');
  auto got = read_up_to(file->fd.get(), bytes.data(), bytes.size(), path);
  if (!got) return std::move(got).error();
  bytes.resize(*got);
  FJ_TRY(check_bundle_header(path, bytes));
  // The rest, never more than fstat's size; one byte beyond it tells a file that grew.
  const std::size_t head = bytes.size();
  bytes.resize(static_cast<std::size_t>(std::max<std::uint64_t>(size, head)) + 1);
  auto rest = read_up_to(file->fd.get(), bytes.data() + head, bytes.size() - head, path);
  if (!rest) return std::move(rest).error();
  bytes.resize(head + *rest);
  if (bytes.size() != size) return rejected(Code::corrupt, path, "file changed size while being read");
  return bytes;
}

// Checks everything about the bundle; returns its records only if all of it is sound.
Result<std::vector<BundleRecord>> parse_bundle(const std::string& path, std::string_view bytes) {
  FJ_TRY(check_bundle_header(path, bytes));
  ByteReader in(bytes.substr(kBundleHeaderBytes));
  std::vector<BundleRecord> records;
  std::set<std::string> seen;
  for (;;) {
    std::string where = "record #" + std::to_string(records.size() + 1);
    auto tag = in.uint(1);
    if (!tag) return rejected(Code::corrupt, path, "truncated before the end record");
    if (*tag == kTagEnd) break;
    if (*tag != kTagEntry) return rejected(Code::corrupt, path, where + ": unknown tag " + std::to_string(*tag));
    if (records.size() >= kMaxBundleEntries)
      return rejected(Code::corrupt, path, "more than " + std::to_string(kMaxBundleEntries) + " entries");
    std::string fields[3];
    for (std::string& f : fields) {
      auto len = in.uint(2);
      if (!len || *len > kMaxFieldBytes) return rejected(Code::corrupt, path, where + ": bad field length");
      auto text = in.take(*len);
      if (!text) return rejected(Code::corrupt, path, where + ": truncated");
      f = std::string(*text);
    }
    EntryKey key{fields[0], fields[1], fields[2]};
    if (Status valid = validate_entry_key(key); !valid)
      return rejected(Code::invalid_argument, path, where + ": " + valid.error().message());
    auto size = in.uint(8);
    auto checksum = in.uint(8);
    if (!size || !checksum) return rejected(Code::corrupt, path, where + ": truncated");
    if (*size > kMaxBundlePayloadBytes)
      return rejected(Code::corrupt, path, where + ": payload of " + std::to_string(*size) + " bytes exceeds the " +
                                               std::to_string(kMaxBundlePayloadBytes) + "-byte limit");
    auto payload = in.take(*size);
    if (!payload) return rejected(Code::corrupt, path, where + ": payload truncated");
    if (hash64(*payload) != *checksum)
      return rejected(Code::corrupt, path, where + " (" + entry_identity(key) + "): payload checksum mismatch");
    if (!seen.insert(entry_identity(key)).second)
      return rejected(Code::corrupt, path, where + ": duplicate entry " + entry_identity(key));
    records.push_back(BundleRecord{std::move(key), *payload});
  }
  auto count = in.uint(8);
  const std::size_t hashed = bytes.size() - in.remaining();
  auto checksum = in.uint(8);
  if (!count || !checksum) return rejected(Code::corrupt, path, "truncated end record");
  if (*count != records.size())
    return rejected(Code::corrupt, path, "end record counts " + std::to_string(*count) + " entries, found " +
                                             std::to_string(records.size()));
  if (XXH3_64bits(bytes.data(), hashed) != *checksum) return rejected(Code::corrupt, path, "bundle checksum mismatch");
  if (in.remaining() != 0)
    return rejected(Code::corrupt, path, std::to_string(in.remaining()) + " unexpected bytes after the end record");
  return records;
}

}  // namespace

Result<ExportReport> export_bundle(DiskCache& cache, const std::string& bundle_path,
                                   const std::optional<std::string>& arch) {
  if (arch) FJ_TRY(validate_arch(*arch));
  FJ_TRY(check_export_target(bundle_path));
  DiskCache::State& s = DiskCacheAccess::state(cache);
  std::vector<ListedEntry> entries;
  if (auto root = s.dir.open_root(/*create=*/false)) {
    auto listed = list_entries(*root, arch);
    if (!listed) return std::move(listed).error();
    entries = std::move(listed).value();
  } else if (root.error().code() != Code::not_found) {
    return std::move(root).error();
  }
  auto file = AtomicFileWriter::create(bundle_path);
  if (!file) return std::move(file).error();
  BundleWriter out(std::move(file).value());

  std::string head(kBundleMagic, sizeof kBundleMagic);
  put_u32(head, kBundleFormatVersion);
  FJ_TRY(out.write(head));

  ExportReport report;
  for (const ListedEntry& e : entries) {
    const EntryInfo& info = e.info;
    if (!info.problem.empty()) {
      report.skipped.push_back(BadEntry{info.path, info.problem});
      continue;
    }
    auto payload = read_entry(e.file.arch->dir, e.file.name, entry_identity(info.key));
    if (!payload) {
      if (payload.error().code() == Code::not_found) continue;  // evicted since the listing
      if (payload.error().code() != Code::corrupt) return std::move(payload).error();
      report.skipped.push_back(BadEntry{info.path, payload.error().detail("reason").value_or("corrupt")});
      continue;
    }
    std::string rec;
    rec.push_back(static_cast<char>(kTagEntry));
    put_field(rec, info.key.arch);
    put_field(rec, info.key.name);
    put_field(rec, info.key.content_hash);
    put_u64(rec, payload->size());
    put_u64(rec, hash64(*payload));
    FJ_TRY(out.write(rec));
    FJ_TRY(out.write(*payload));
    report.entries += 1;
    report.payload_bytes += payload->size();
  }
  std::string end;
  end.push_back(static_cast<char>(kTagEnd));
  put_u64(end, report.entries);
  FJ_TRY(out.write(end));
  std::string sum;
  put_u64(sum, out.digest());
  FJ_TRY(out.raw_write(sum));
  FJ_TRY(out.commit());
  return report;
}

namespace {

// What the cache holds at a record's file, under the record's key lock.
enum class AtFile { nothing, same_key_valid, replaceable, other_key };

Result<AtFile> inspect_target(const ArchDir& arch, const std::string& name, const std::string& identity,
                              std::string* other_key) {
  auto header = read_entry_header(arch.dir, name);
  if (!header) {
    if (header.error().code() == Code::not_found) return AtFile::nothing;
    if (header.error().code() == Code::corrupt) return AtFile::replaceable;
    return std::move(header).error();
  }
  const std::string& held = header->key;
  if (held == identity) return read_entry(arch.dir, name, identity) ? AtFile::same_key_valid : AtFile::replaceable;
  // Another key's sound entry is a collision; a damaged one may be replaced.
  if (!parse_entry_identity(held) || !read_entry(arch.dir, name, held)) return AtFile::replaceable;
  *other_key = held;
  return AtFile::other_key;
}

}  // namespace

Result<ImportReport> import_bundle(DiskCache& cache, const std::string& bundle_path, const ImportOptions& options) {
  auto bytes = read_bundle_file(bundle_path, options.max_bundle_bytes);
  if (!bytes) return std::move(bytes).error();
  auto records = parse_bundle(bundle_path, *bytes);
  if (!records) return std::move(records).error();

  DiskCache::State& s = DiskCacheAccess::state(cache);
  ImportReport report;
  report.entries = records->size();
  auto stopped = [&](const Error& e) {
    return Error(e.code(), "bundle '" + bundle_path + "': publishing stopped after " +
                               std::to_string(report.imported) + " of " + std::to_string(report.entries) +
                               " entries: " + e.message())
        .with("path", bundle_path)
        .with("imported", std::to_string(report.imported));
  };
  if (records->empty()) return report;
  auto root = s.dir.open_root(/*create=*/true);
  if (!root) return stopped(root.error());
  std::map<std::string, ArchDir> arches;
  for (const BundleRecord& r : *records) {
    auto it = arches.find(r.key.arch);
    if (it == arches.end()) {
      auto arch = CacheDir::create_arch_dir(*root, r.key.arch);
      if (!arch) return stopped(arch.error());
      it = arches.emplace(r.key.arch, std::move(arch).value()).first;
    }
    const ArchDir& arch = it->second;
    const std::string name = entry_file_name(r.key), identity = entry_identity(r.key);
    // Same discipline as DiskCache::store: hold the key's lock while looking and publishing.
    auto lock = FileLock::acquire_for(*arch.locks, lock_file_name(r.key), s.lock_timeout,
                                      s.lock_notices(identity, "importing without it"));
    if (!lock) return stopped(lock.error());
    std::string other;
    auto at = inspect_target(arch, name, identity, &other);
    if (!at) return stopped(at.error());
    if (*at == AtFile::other_key) {
      report.collisions.push_back(ImportCollision{identity, other, arch.dir.path_of(name)});
      s.log("bundle '" + bundle_path + "': not importing '" + identity + "': its file '" + arch.dir.path_of(name) +
            "' holds '" + other + "' (the names agree up to the first " + std::to_string(kFileHashDigits) +
            " hex digits of the hash)");
      continue;
    }
    if (*at == AtFile::same_key_valid && !options.replace_existing) {
      report.already_present += 1;
      continue;
    }
    if (Status st = store_entry(s, arch, r.key, r.payload); !st) return stopped(st.error());
    report.imported += 1;
    report.payload_bytes += r.payload.size();
  }
  // One cap check for the whole import rather than one per entry.
  if (report.imported > 0) {
    if (Status st = enforce_cap(s, *root, ""); !st) return stopped(st.error());
  }
  s.log("imported " + std::to_string(report.imported) + " of " + std::to_string(report.entries) +
        " entries from bundle '" + bundle_path + "'");
  return report;
}

}  // namespace flashjit::cache
