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
// A bundle is untrusted input: import checks every record (bounded sizes, valid arch/name/hash,
// checksums, count, trailing bytes) before publishing any, so a damaged or hostile bundle
// changes nothing. Entries are then published one by one with the cache's atomic store.
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

struct ImportOptions {
  // Import reads the whole bundle into memory to check it before publishing; larger files are
  // refused.
  std::uint64_t max_bundle_bytes = 4ull << 30;
  // An entry already in the cache (and valid) is kept unless this is set: equal keys mean equal
  // content, so replacing only costs writes.
  bool replace_existing = false;
};

struct ImportReport {
  std::uint64_t entries = 0;          // records in the bundle
  std::uint64_t imported = 0;         // published into the cache
  std::uint64_t already_present = 0;  // skipped: the cache had a valid entry for the key
  std::uint64_t payload_bytes = 0;    // bytes published
};

// Writes every verified entry (of `arch`, or all) to `bundle_path`, atomically (temp file beside
// it, then rename). Entries failing verification are skipped and reported.
Result<ExportReport> export_bundle(DiskCache& cache, const std::string& bundle_path,
                                   const std::optional<std::string>& arch = std::nullopt);

// Verifies the whole bundle, then publishes its entries. Code::corrupt (format, checksums,
// sizes) or Code::invalid_argument (a bad arch/name/hash) when rejected; nothing is written then.
Result<ImportReport> import_bundle(DiskCache& cache, const std::string& bundle_path,
                                   const ImportOptions& options = {});

}  // namespace flashjit::cache
