#include "cache/bundle.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
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

Error rejected(Code code, const std::string& path, const std::string& reason) {
  return Error(code, "bundle '" + printable(path) + "' rejected, nothing imported: " + reason)
      .with("path", printable(path))
      .with("reason", reason);
}

Result<std::string> read_bundle_file(const std::string& path, std::uint64_t max_bytes) {
  auto fd = open_fd(path, O_RDONLY);
  if (!fd) return std::move(fd).error();
  struct stat st{};
  if (::fstat(fd->get(), &st) != 0) return sys_error(Code::io_error, "cannot stat", path, errno);
  if (!S_ISREG(st.st_mode)) return rejected(Code::invalid_argument, path, "not a regular file");
  auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > max_bytes)
    return rejected(Code::invalid_argument, path,
                    std::to_string(size) + " bytes exceed ImportOptions.max_bundle_bytes (" +
                        std::to_string(max_bytes) + ")");
  std::string bytes(size, '\0');
  auto got = read_up_to(fd->get(), bytes.data(), bytes.size(), path);
  if (!got) return std::move(got).error();
  if (*got != size) return rejected(Code::corrupt, path, "file changed size while being read");
  return bytes;
}

// Checks everything about the bundle; returns its records only if all of it is sound.
Result<std::vector<BundleRecord>> parse_bundle(const std::string& path, std::string_view bytes) {
  ByteReader in(bytes);
  auto magic = in.take(sizeof kBundleMagic);
  if (!magic || std::memcmp(magic->data(), kBundleMagic, sizeof kBundleMagic) != 0)
    return rejected(Code::corrupt, path, "bad magic (not a flashjit bundle)");
  auto version = in.uint(4);
  if (!version || *version != kBundleFormatVersion)
    return rejected(Code::corrupt, path,
                    "format version " + (version ? std::to_string(*version) : std::string("?")) +
                        ", this build reads version " + std::to_string(kBundleFormatVersion));
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
  std::size_t hashed = bytes.size() - in.remaining();
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
  auto entries = cache.list(arch);
  if (!entries) return std::move(entries).error();
  auto file = AtomicFileWriter::create(bundle_path);
  if (!file) return std::move(file).error();
  BundleWriter out(std::move(file).value());

  std::string head(kBundleMagic, sizeof kBundleMagic);
  put_u32(head, kBundleFormatVersion);
  FJ_TRY(out.write(head));

  ExportReport report;
  for (const EntryInfo& info : *entries) {
    if (!info.problem.empty()) {
      report.skipped.push_back(BadEntry{info.path, info.problem});
      continue;
    }
    auto payload = read_entry(info.path, entry_identity(info.key));
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

Result<ImportReport> import_bundle(DiskCache& cache, const std::string& bundle_path, const ImportOptions& options) {
  auto bytes = read_bundle_file(bundle_path, options.max_bundle_bytes);
  if (!bytes) return std::move(bytes).error();
  auto records = parse_bundle(bundle_path, *bytes);
  if (!records) return std::move(records).error();

  DiskCache::State& s = DiskCacheAccess::state(cache);
  ImportReport report;
  report.entries = records->size();
  for (const BundleRecord& r : *records) {
    if (!options.replace_existing) {
      auto existing = load_entry(s, r.key, LoadMode{false, /*touch=*/false});
      if (!existing) return std::move(existing).error();
      if (existing->has_value()) {
        report.already_present += 1;
        continue;
      }
    }
    auto dir = s.dir.create_arch_dir(r.key.arch);
    if (!dir) return std::move(dir).error();
    // Same discipline as DiskCache::store: hold the key's lock while publishing.
    auto lock = FileLock::acquire_for(DiskCache::State::lock_path_for(cache.entry_path(r.key)), s.lock_timeout);
    if (!lock) return std::move(lock).error();
    FJ_TRY(store_entry(s, r.key, r.payload));
    report.imported += 1;
    report.payload_bytes += r.payload.size();
  }
  // One cap check for the whole import rather than one per entry.
  if (report.imported > 0) FJ_TRY(enforce_cap(s, ""));
  s.log("imported " + std::to_string(report.imported) + " of " + std::to_string(report.entries) +
        " entries from bundle '" + bundle_path + "'");
  return report;
}

}  // namespace flashjit::cache
