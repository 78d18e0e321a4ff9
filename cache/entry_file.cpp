#include "cache/entry_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "cache/atomic_file.hpp"
#include "cache/le_codec.hpp"
#include "base/content_hash.hpp"
#include "base/printable.hpp"

namespace flashjit::cache {

namespace {

constexpr std::size_t kFixedPrefix = 16;  // magic + version + key length
constexpr std::size_t kFixedSuffix = 16;  // payload size + checksum

Error corrupt(const std::string& path, const std::string& reason) {
  return Error(Code::corrupt, "cache entry '" + path + "' is corrupt: " + reason)
      .with("path", path)
      .with("reason", reason);
}

struct OpenEntry {
  UniqueFd fd;
  std::uint64_t file_size = 0;
  FileId id;
  EntryHeader header;
};

// Opens the file and reads/validates the header; leaves the descriptor at the payload.
// `id_out`, when given, learns which file was judged even if it then fails verification.
Result<OpenEntry> open_entry(const PrivateDir& dir, const std::string& name, FileId* id_out) {
  const std::string path = dir.path_of(name);
  auto file = open_private_file(dir, name);
  if (!file) {
    if (file.error().code() != Code::permission_denied) return std::move(file).error();
    // Not a regular file, a symlink, another owner's, writable by others: the removal that
    // follows needs to know which file that was.
    if (id_out) {
      if (auto st = stat_at(dir, name))
        *id_out = FileId{static_cast<unsigned long long>(st->st_dev), static_cast<unsigned long long>(st->st_ino)};
    }
    return corrupt(path, file.error().detail("reason").value_or(file.error().message()));
  }
  OpenEntry e;
  e.id = file->id;
  if (id_out) *id_out = e.id;
  e.file_size = file->size;
  UniqueFd fd = std::move(file->fd);

  char fixed[kFixedPrefix];
  auto got = read_up_to(fd.get(), fixed, sizeof fixed, path);
  if (!got) return std::move(got).error();
  if (*got < sizeof fixed)
    return corrupt(path, "truncated header (" + std::to_string(*got) + " bytes)");
  if (std::memcmp(fixed, kEntryMagic, sizeof kEntryMagic) != 0) return corrupt(path, "bad magic");
  e.header.version = static_cast<std::uint32_t>(get_le(fixed + 8, 4));
  if (e.header.version != kEntryFormatVersion)
    return corrupt(path, "format version " + std::to_string(e.header.version) + ", this build reads version " +
                             std::to_string(kEntryFormatVersion));
  auto key_len = static_cast<std::uint32_t>(get_le(fixed + 12, 4));
  if (key_len == 0 || key_len > kMaxEntryKeyBytes)
    return corrupt(path, "key length " + std::to_string(key_len) + " outside 1.." + std::to_string(kMaxEntryKeyBytes));

  std::string rest(key_len + kFixedSuffix, '\0');
  got = read_up_to(fd.get(), rest.data(), rest.size(), path);
  if (!got) return std::move(got).error();
  if (*got < rest.size()) return corrupt(path, "truncated header");
  e.header.key = rest.substr(0, key_len);
  e.header.payload_size = get_le(rest.data() + key_len, 8);
  e.header.checksum = get_le(rest.data() + key_len + 8, 8);
  e.header.header_bytes = kFixedPrefix + key_len + kFixedSuffix;
  if (e.file_size < e.header.header_bytes) return corrupt(path, "file shrank while being read");
  if (e.header.payload_size != e.file_size - e.header.header_bytes)
    return corrupt(path, "header says " + std::to_string(e.header.payload_size) + " payload bytes but the file holds " +
                             std::to_string(e.file_size - e.header.header_bytes));
  e.fd = std::move(fd);
  return e;
}

}  // namespace

std::string encode_entry_header(std::string_view key, std::string_view payload) {
  std::string h(kEntryMagic, sizeof kEntryMagic);
  put_u32(h, kEntryFormatVersion);
  put_u32(h, static_cast<std::uint32_t>(key.size()));
  h.append(key);
  put_u64(h, payload.size());
  put_u64(h, hash64(payload));
  return h;
}

Status write_entry(const DirFd& dir, const std::string& name, std::string_view key, std::string_view payload) {
  const std::string path = dir.path_of(name);
  if (key.empty() || key.size() > kMaxEntryKeyBytes)
    return Error(Code::invalid_argument, "cache entry key for '" + path + "' must be 1.." +
                                             std::to_string(kMaxEntryKeyBytes) + " bytes, got " +
                                             std::to_string(key.size()))
        .with("path", path);
  auto w = AtomicFileWriter::create(dir, name);
  if (!w) return std::move(w).error();
  FJ_TRY(w->write(encode_entry_header(key, payload)));
  FJ_TRY(w->write(payload));
  // Stamp the LRU clock with full precision: the kernel's own file timestamps are only as fine
  // as a clock tick, which would tie entries written in quick succession.
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return w->commit(now);
}

Result<EntryHeader> read_entry_header(const PrivateDir& dir, const std::string& name) {
  auto e = open_entry(dir, name, nullptr);
  if (!e) return std::move(e).error();
  return std::move(e->header);
}

Result<std::string> read_entry(const PrivateDir& dir, const std::string& name, std::string_view expected_key,
                               FileId* read_id) {
  const std::string path = dir.path_of(name);
  auto e = open_entry(dir, name, read_id);
  if (!e) return std::move(e).error();
  const EntryHeader& h = e->header;
  // The stored key is whatever the file holds (terminal escapes included): echoed like other input.
  if (h.key != expected_key)
    return corrupt(path, "holds key '" + printable(h.key) + "', expected '" + printable(expected_key) + "'");
  std::string payload(h.payload_size, '\0');
  auto got = read_up_to(e->fd.get(), payload.data(), payload.size(), path);
  if (!got) return std::move(got).error();
  if (*got != payload.size()) return corrupt(path, "payload shorter than its header says");
  if (hash64(payload) != h.checksum) return corrupt(path, "payload checksum mismatch");
  return payload;
}

}  // namespace flashjit::cache
