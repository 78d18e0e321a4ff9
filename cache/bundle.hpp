// Moving cache entries between machines: export all (or one arch's) entries into one bundle
// file, import a bundle into a cache.
//
// Bundle format (all integers little-endian):
//   magic "FJKBUNDL" (8 bytes), format version (uint32, kBundleFormatVersion)
//   records, each starting with a tag byte:
//     1 = entry: arch, name, content_hash (each: uint16 length + bytes),
//                payload size (uint64), XXH3-64 of the payload (uint64), payload
//     0 = end:   entry count (uint64), XXH3-64 of every byte before this field (uint64)
//   nothing after the end record.
//
// A bundle is untrusted input: import refuses anything but a regular file (without ever blocking
// on a FIFO or a device), refuses a file that is not a bundle from its first 12 bytes, and checks
// every record (bounded sizes, valid arch/name/hash, checksums, count, trailing bytes) before
// publishing any, so a damaged or hostile bundle changes nothing. Entries are then published one
// by one with the cache's atomic store, and the report counts what was written.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cache/disk_cache.hpp"
#include "flashjit/status.hpp"

namespace flashjit::cache {

inline constexpr char kBundleMagic[8] = {'F', 'J', 'K', 'B', 'U', 'N', 'D', 'L'};
inline constexpr std::uint32_t kBundleFormatVersion = 1;
inline constexpr std::uint64_t kMaxBundleEntries = 1'000'000;
inline constexpr std::uint64_t kMaxBundlePayloadBytes = 1ull << 30;  // per entry; cubins are MBs

struct ExportReport {
  std::uint64_t entries = 0;
  std::uint64_t payload_bytes = 0;
  std::vector<BadEntry> skipped;  // entries that failed verification and were left out
};

inline constexpr std::size_t kBundleHeaderBytes = 12;  // magic + format version

struct ImportOptions {
  // Import reads the whole bundle into memory to check it before publishing; larger files are
  // refused by their size, before anything is read.
  std::uint64_t max_bundle_bytes = 4ull << 30;
  // An entry already in the cache (and valid) is kept unless this is set: equal keys mean equal
  // content, so replacing only costs writes.
  bool replace_existing = false;
};

// A bundle entry left out because its file in the cache holds another key. Entry file names carry
// only the first kFileHashDigits hex digits of the content hash, so two keys with the same name
// and those digits share one file. A cache never exports such a pair (it has one file per name):
// a bundle holding one was made by hand or by merging bundles, and the second key is not
// imported over the first.
struct ImportCollision {
  std::string key;        // the bundle's entry that was left out
  std::string other_key;  // the key its file holds (already in the cache, or imported before it)
  std::string path;       // the shared file
};

struct ImportReport {
  std::uint64_t entries = 0;          // records in the bundle
  std::uint64_t imported = 0;         // written into the cache (what was published, not asked for)
  std::uint64_t already_present = 0;  // skipped: the cache had a valid entry for the key
  std::uint64_t payload_bytes = 0;    // bytes published
  std::vector<ImportCollision> collisions;  // not imported: see ImportCollision
};

// Writes every verified entry (of `arch`, or all) to `bundle_path`, atomically (temp file beside
// it, then rename). Entries failing verification are skipped and reported. An existing
// `bundle_path` that is not a regular file (a FIFO, a device, a folder; through a symlink too) is
// refused with Code::invalid_argument before anything is written.
Result<ExportReport> export_bundle(DiskCache& cache, const std::string& bundle_path,
                                   const std::optional<std::string>& arch = std::nullopt);

// Verifies the whole bundle, then publishes its entries. Code::corrupt (format, checksums,
// sizes) or Code::invalid_argument (not a regular file, a bad arch/name/hash) when rejected;
// nothing is written then. An error while publishing has detail "imported": how many entries
// were written before it.
Result<ImportReport> import_bundle(DiskCache& cache, const std::string& bundle_path,
                                   const ImportOptions& options = {});

}  // namespace flashjit::cache
