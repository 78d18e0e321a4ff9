// Content hashing for variants, templates and cache keys (XXH3-128, header-only xxhash).
// Every field is framed with its length so ("ab","c") and ("a","bc") never collide.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace flashjit {

class ContentHasher {
 public:
  ContentHasher();
  ~ContentHasher();
  ContentHasher(const ContentHasher&) = delete;
  ContentHasher& operator=(const ContentHasher&) = delete;

  ContentHasher& field(std::string_view name, std::string_view value);
  ContentHasher& field(std::string_view name, std::int64_t value);

  // 32 lowercase hex digits.
  std::string hex() const;

 private:
  void raw(std::string_view bytes);
  void* state_;
};

// One-shot helpers.
std::string hash_hex(std::string_view bytes);
std::uint64_t hash64(std::string_view bytes);

}  // namespace flashjit
