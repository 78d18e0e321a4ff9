// The on-disk format of one cache entry, and reading/writing it safely.
//
//   offset  size  field
//   0       8     magic "FJKCACHE"
//   8       4     format version (kEntryFormatVersion), little-endian uint32
//   12      4     key length k (at most kMaxEntryKeyBytes), little-endian uint32
//   16      k     key: the entry's full identity, including the complete content hash
//   16+k    8     payload size, little-endian uint64 (must equal file size - header size)
//   24+k    8     XXH3-64 of the payload, little-endian uint64
//   32+k    ...   payload (cubin bytes)
//
// The file name carries only a prefix of the content hash; the key inside the file is what
// proves the entry answers the question being asked. Files are written with AtomicFileWriter,
// so a reader finds a complete entry or none; verification still guards against disks, other
// tools and format changes. Entries are read from a checked folder (PrivateDir) by name, and
// the file itself is checked on its descriptor before a byte is read: a regular file (a FIFO
// would block the reader forever), owned by this user, writable by nobody else. A file failing
// those checks is corrupt like one with a bad checksum: never used, and replaced by a rebuild.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "cache/posix_io.hpp"
#include "cache/private_dir.hpp"
#include "flashjit/status.hpp"

namespace flashjit::cache {

inline constexpr char kEntryMagic[8] = {'F', 'J', 'K', 'C', 'A', 'C', 'H', 'E'};
// Bump whenever the layout above changes: older entries then read as corrupt and are rebuilt.
inline constexpr std::uint32_t kEntryFormatVersion = 1;
inline constexpr std::uint32_t kMaxEntryKeyBytes = 512;

struct EntryHeader {
  std::uint32_t version = 0;
  std::string key;
  std::uint64_t payload_size = 0;
  std::uint64_t checksum = 0;
  std::uint64_t header_bytes = 0;  // offset of the payload
};

// Size of the file holding a payload of `payload_bytes` under a key of `key_bytes`.
inline std::uint64_t entry_file_bytes(std::size_t key_bytes, std::uint64_t payload_bytes) {
  return 32 + key_bytes + payload_bytes;
}

// Header bytes for `payload` stored under `key` (key must fit kMaxEntryKeyBytes).
std::string encode_entry_header(std::string_view key, std::string_view payload);

// Atomically publishes header + payload as `name` in `dir`, stamping the file's mtime with `now`
// (the LRU clock). Code::invalid_argument if the key is empty or too long.
Status write_entry(const DirFd& dir, const std::string& name, std::string_view key, std::string_view payload);

// Reads and checks the header only (the file checks, magic, version, key length, size against
// the file size). Code::not_found if there is no file, Code::corrupt with the reason if the file
// or its header is bad.
Result<EntryHeader> read_entry_header(const PrivateDir& dir, const std::string& name);

// Reads the payload and verifies everything: the file checks, magic, version, key ==
// expected_key, payload size == file size - header, checksum. Code::not_found if there is no
// file, Code::corrupt (message and detail "reason") if verification fails, Code::io_error for
// read failures. When `read_id` is given it receives the identity of the file that was judged, so
// a caller can later remove exactly that file and not a good one that replaced it meanwhile.
Result<std::string> read_entry(const PrivateDir& dir, const std::string& name, std::string_view expected_key,
                               FileId* read_id = nullptr);

}  // namespace flashjit::cache
