#include "base/content_hash.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstdio>

namespace flashjit {

ContentHasher::ContentHasher() : state_(XXH3_createState()) { XXH3_128bits_reset(static_cast<XXH3_state_t*>(state_)); }
ContentHasher::~ContentHasher() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void ContentHasher::raw(std::string_view bytes) {
  std::uint64_t n = bytes.size();
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), &n, sizeof n);
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), bytes.data(), bytes.size());
}

ContentHasher& ContentHasher::field(std::string_view name, std::string_view value) {
  raw(name);
  raw(value);
  return *this;
}

ContentHasher& ContentHasher::field(std::string_view name, std::int64_t value) {
  return field(name, std::to_string(value));
}

static std::string to_hex(XXH128_hash_t h) {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return buf;
}

std::string ContentHasher::hex() const { return to_hex(XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_))); }

std::string hash_hex(std::string_view bytes) { return to_hex(XXH3_128bits(bytes.data(), bytes.size())); }

std::uint64_t hash64(std::string_view bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

}  // namespace flashjit
