// What a cache entry is filed under, and how that maps to names on disk.
//
//   <root>/<arch>/<name>-<first 16 hex of content_hash>.fjk     the entry
//   <root>/<arch>/locks/<name>-<first 16 hex>.lock               its build lock
//
// The file name is for people (ls shows which kernels are cached); the full identity
// "<arch>/<name>/<content_hash>" is stored inside the entry and compared on every read.
// Every part is validated before it touches a path, so no key can name a file elsewhere.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "flashjit/status.hpp"

namespace flashjit::cache {

struct EntryKey {
  std::string arch;          // "sm_90a": see is_valid_arch()
  std::string name;          // readable, e.g. "fa2_sm80-f16-d128x128-causal-m128n64w4s2"
  std::string content_hash;  // hex digest of everything that affects the binary (32 hex digits)

  bool operator==(const EntryKey& o) const {
    return arch == o.arch && name == o.name && content_hash == o.content_hash;
  }
  bool operator!=(const EntryKey& o) const { return !(*this == o); }
};

inline constexpr std::size_t kMaxEntryNameBytes = 160;
inline constexpr std::size_t kMinContentHashDigits = 16;
inline constexpr std::size_t kMaxContentHashDigits = 128;
inline constexpr std::size_t kFileHashDigits = 16;
inline constexpr const char* kEntryExtension = ".fjk";
inline constexpr const char* kLockExtension = ".lock";

// [A-Za-z0-9_.-], 1..kMaxEntryNameBytes, not starting with '.' (so never ".", ".." or a name
// that could pass for a temp file).
bool is_valid_entry_name(std::string_view name);
// Lowercase hex, kMinContentHashDigits..kMaxContentHashDigits digits.
bool is_valid_content_hash(std::string_view hash);

// Code::invalid_argument naming the field and the rule.
Status validate_entry_key(const EntryKey& key);

// These assume a valid key.
std::string entry_file_name(const EntryKey& key);  // "<name>-<16 hex>.fjk"
std::string lock_file_name(const EntryKey& key);   // "<name>-<16 hex>.lock"
std::string entry_identity(const EntryKey& key);   // "<arch>/<name>/<content_hash>"

// Inverse of entry_identity; nullopt unless every part is valid.
std::optional<EntryKey> parse_entry_identity(std::string_view identity);

struct EntryFileName {
  std::string name;
  std::string hash_prefix;  // kFileHashDigits hex digits
};
// Inverse of entry_file_name; nullopt for anything else (temp files, locks, strays).
std::optional<EntryFileName> parse_entry_file_name(std::string_view file_name);

}  // namespace flashjit::cache
