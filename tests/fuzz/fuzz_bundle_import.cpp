// `flashjit cache import`: an arbitrary file imported as a bundle into a scratch cache.
//
// Input: one flags byte, then the bundle's bytes. With flag bit 0 set, the target first rewrites
// every checksum the format has (each payload's, then the whole bundle's) where the structure
// allows, so the fuzzer also reaches what lies past them (key checks, duplicate keys, publishing
// entries) instead of stopping at the first checksum; bit 0 clear leaves the bytes as given.
//
// Checks besides the sanitizers: a refused bundle leaves the cache folder exactly as it was
// (nothing written); a refusal's message is safe to print.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "base/content_hash.hpp"
#include "cache/bundle.hpp"
#include "cache/disk_cache.hpp"
#include "cache/le_codec.hpp"
#include "fuzz_support.hpp"

using namespace flashjit;

namespace {

constexpr std::uint8_t kRepairChecksums = 1;
// Keeps a long run from filling the disk with imported entries; eviction then runs too.
constexpr std::uint64_t kScratchCacheBytes = 1 << 20;

struct Scratch {
  std::string dir, bundle, root;
  std::optional<cache::DiskCache> cache;

  Scratch() {
    std::string tmpl = std::filesystem::temp_directory_path().string() + "/fj-fuzz-bundle-XXXXXX";
    if (!::mkdtemp(tmpl.data())) fuzz::fail("mkdtemp", tmpl);
    dir = tmpl;
    bundle = dir + "/input.fjb";
    root = dir + "/cache";
    cache::Options o;
    o.root = root;
    o.max_bytes = kScratchCacheBytes;
    o.logger = [](const std::string&) {};
    auto c = cache::DiskCache::open(o);
    if (!c.ok()) fuzz::fail("open the scratch cache", c.error().to_string());
    cache.emplace(std::move(c).value());
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

Scratch& scratch() {
  static Scratch s;
  return s;
}

// Every file under the cache root with its size and modification time: what "unchanged" means.
std::set<std::string> snapshot(const std::string& root) {
  std::set<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(root, ec); !ec && it != std::filesystem::end(it);
       it.increment(ec)) {
    std::error_code e2;
    const auto size = it->is_regular_file(e2) ? it->file_size(e2) : 0;
    const auto time = it->last_write_time(e2).time_since_epoch().count();
    out.insert(it->path().string() + " " + std::to_string(size) + " " + std::to_string(time));
  }
  return out;
}

// Rewrites the payload checksums and the end checksum in place, following the format of
// cache/bundle.hpp as far as the bytes allow.
void repair_checksums(std::string& b) {
  std::size_t p = sizeof cache::kBundleMagic + 4;
  while (p < b.size() && b[p] == 1) {
    ++p;
    for (int field = 0; field < 3; ++field) {
      if (p + 2 > b.size()) return;
      p += 2 + cache::get_le(b.data() + p, 2);
    }
    if (p + 16 > b.size()) return;
    const std::uint64_t size = cache::get_le(b.data() + p, 8);
    if (size > b.size() - p - 16) return;
    std::string sum;
    cache::put_u64(sum, hash64(std::string_view(b).substr(p + 16, size)));
    b.replace(p + 8, 8, sum);
    p += 16 + size;
  }
  if (p >= b.size() || b[p] != 0 || p + 17 > b.size()) return;
  std::string sum;
  cache::put_u64(sum, hash64(std::string_view(b).substr(0, p + 9)));
  b.replace(p + 9, 8, sum);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  scratch();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  Scratch& s = scratch();
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & kRepairChecksums) repair_checksums(bytes);
  {
    std::ofstream out(s.bundle, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    if (!out) fuzz::fail("write the bundle file", s.bundle);
  }
  const auto before = snapshot(s.root);
  auto report = cache::import_bundle(*s.cache, s.bundle);
  if (!report.ok()) {
    fuzz::check_printable(report.error().to_string(), "import error message has raw bytes");
    fuzz::check(snapshot(s.root) == before, "a refused bundle changed the cache folder", report.error().to_string());
  }
  return 0;
}
