// Helpers shared by the cache tests: a private temp folder per test, opening a cache, keys, build
// callbacks and raw file access. Environment overrides, the log sink, file helpers and forked
// children come from tests/support/test_support.hpp.
#pragma once

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "cache/disk_cache.hpp"
#include "cache/entry_key.hpp"
#include "cache/private_dir.hpp"
#include "base/content_hash.hpp"
#include "tests/support/test_support.hpp"

namespace flashjit::cache::test {

using test_support::ChildToKill;
using test_support::EnvGuard;
using test_support::LogSink;
using test_support::exists;
using test_support::files_in;
using test_support::read_file;
using test_support::wait_child;
using test_support::write_file;

// A fresh folder /tmp/fj-cache-test-XXXXXX, removed with everything in it at the end.
class TempDir : public test_support::TempDir {
 public:
  TempDir() : test_support::TempDir("fj-cache-test") {}
};

// Opens a cache at `root` (optionally logging to `log`, with a size cap); the test stops if that fails.
inline DiskCache open_cache(const std::string& root, LogSink* log = nullptr,
                            std::optional<std::uint64_t> max_bytes = {}) {
  Options o;
  o.root = root;
  o.max_bytes = max_bytes;
  if (log) o.logger = log->fn();
  auto c = DiskCache::open(o);
  REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.error().to_string()));
  return std::move(c).value();
}

// A folder opened and checked as the cache does (a TempDir is private: mkdtemp makes it 0700).
inline PrivateDir private_dir(const std::string& path) {
  auto d = PrivateDir::open_root(path, /*create=*/false);
  REQUIRE_MESSAGE(d.ok(), (d.ok() ? "" : d.error().to_string()));
  return std::move(d).value();
}

inline EntryKey make_key(const std::string& name, const std::string& arch = "sm_90a") {
  return EntryKey{arch, name, hash_hex("content of " + arch + "/" + name)};
}

// A build callback for get_or_build that returns `payload`, counting its runs in `runs` if given.
inline std::function<Result<std::string>()> builder_of(std::string payload, int* runs = nullptr) {
  return [payload, runs]() -> Result<std::string> {
    if (runs) ++*runs;
    return payload;
  };
}

// Forks `child` as a process that opens a cache at `root` and builds `key`: holding the key's lock,
// it tells the parent, then runs `while_building` (sleeps or stops: the parent kills it).
template <class WhileBuilding>
void start_building_child(ChildToKill& child, const std::string& root, const EntryKey& key,
                          WhileBuilding while_building) {
  child.start([&]() -> int {
    Options o;
    o.root = root;
    auto cache = DiskCache::open(o);
    if (!cache.ok()) ::_exit(3);
    (void)cache->get_or_build(key, [&]() -> Result<std::string> {
      child.tell_parent();
      while_building();
      return std::string("from child");
    });
    ::_exit(0);
  });
}

inline std::string payload_for(const EntryKey& key, std::size_t size = 256) {
  std::string p;
  std::string seed = key.arch + "/" + key.name + "/" + key.content_hash;
  while (p.size() < size) p += seed;
  p.resize(size);
  return p;
}

inline unsigned mode_of(const std::string& path) {
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

inline std::size_t count_with_prefix(const std::string& dir, const std::string& prefix) {
  std::size_t n = 0;
  for (const auto& f : files_in(dir))
    if (f.compare(0, prefix.size(), prefix) == 0) ++n;
  return n;
}

}  // namespace flashjit::cache::test
