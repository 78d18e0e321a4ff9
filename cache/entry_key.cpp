#include "cache/entry_key.hpp"

#include "cache/cache_dir.hpp"

#include "base/printable.hpp"

namespace flashjit::cache {

namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == '-';
}

bool is_lower_hex(std::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string stem(const EntryKey& key) { return key.name + "-" + key.content_hash.substr(0, kFileHashDigits); }

}  // namespace

bool is_valid_entry_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxEntryNameBytes || name.front() == '.') return false;
  for (char c : name)
    if (!is_name_char(c)) return false;
  return true;
}

bool is_valid_content_hash(std::string_view hash) {
  return hash.size() >= kMinContentHashDigits && hash.size() <= kMaxContentHashDigits && is_lower_hex(hash);
}

Status validate_entry_key(const EntryKey& key) {
  FJ_TRY(validate_arch(key.arch));
  if (!is_valid_entry_name(key.name))
    return Error(Code::invalid_argument,
                 "cache entry name '" + printable(key.name) + "' must be 1 to " + std::to_string(kMaxEntryNameBytes) +
                     " characters from [A-Za-z0-9_.-], not starting with '.'")
        .with("name", printable(key.name));
  if (!is_valid_content_hash(key.content_hash))
    return Error(Code::invalid_argument,
                 "cache entry content_hash '" + printable(key.content_hash) + "' must be " +
                     std::to_string(kMinContentHashDigits) + " to " + std::to_string(kMaxContentHashDigits) +
                     " lowercase hex digits")
        .with("content_hash", printable(key.content_hash));
  return {};
}

std::string entry_file_name(const EntryKey& key) { return stem(key) + kEntryExtension; }

std::string lock_file_name(const EntryKey& key) { return stem(key) + kLockExtension; }

std::string entry_identity(const EntryKey& key) { return key.arch + "/" + key.name + "/" + key.content_hash; }

std::optional<EntryKey> parse_entry_identity(std::string_view identity) {
  auto first = identity.find('/');
  if (first == std::string_view::npos) return std::nullopt;
  auto second = identity.find('/', first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  EntryKey key{std::string(identity.substr(0, first)), std::string(identity.substr(first + 1, second - first - 1)),
               std::string(identity.substr(second + 1))};
  if (!validate_entry_key(key)) return std::nullopt;
  return key;
}

std::optional<EntryFileName> parse_entry_file_name(std::string_view file_name) {
  std::string_view ext = kEntryExtension;
  if (!ends_with(file_name, ext)) return std::nullopt;
  file_name.remove_suffix(ext.size());
  if (file_name.size() < kFileHashDigits + 2) return std::nullopt;
  std::string_view hash = file_name.substr(file_name.size() - kFileHashDigits);
  std::string_view name = file_name.substr(0, file_name.size() - kFileHashDigits - 1);
  if (file_name[name.size()] != '-' || !is_lower_hex(hash) || !is_valid_entry_name(name)) return std::nullopt;
  return EntryFileName{std::string(name), std::string(hash)};
}

}  // namespace flashjit::cache
