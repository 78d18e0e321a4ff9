// Where a variant's cubin comes from: the on-disk cache when a verified entry exists, else NVRTC
// (and then the cache). The key is content only: engine format version, the embedded templates'
// hash, every variant field, the compile options, the NVRTC version and the target arch.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cache/disk_cache.hpp"
#include "cache/entry_key.hpp"
#include "flashjit/status.hpp"
#include "flashjit/variant.hpp"

namespace flashjit {

// Bumped whenever the meaning of a cached cubin changes without its inputs changing (e.g. the
// kernel parameter struct is reinterpreted).
// 2: launch plans (entry points named per family, params FjAttentionParams), varlen, windows,
// softcap, ALiBi, sinks.
constexpr int kEngineFormatVersion = 2;

enum class BinaryOrigin { disk, compiled };

struct KernelBinary {
  std::string cubin;
  BinaryOrigin origin = BinaryOrigin::compiled;
  double compile_ms = 0;  // 0 for disk hits
  std::string nvrtc_log;
  // Why this kernel is not in the disk cache although the disk cache is on: a refused folder
  // (then it was compiled in memory), a failed store. Empty when it is there or the cache is off.
  std::string disk_cache_problem;
};

class KernelBinaries {
 public:
  using Log = std::function<void(const std::string&)>;

  // use_disk false: compile every time (no files read or written). A cache folder that fails
  // its safety checks (the root, an arch folder or its locks/ folder) is refused: the engine
  // logs why and compiles in memory instead; so it does when the cache fails for any other
  // reason (only a failed compile is the caller's error).
  KernelBinaries(bool use_disk, std::optional<std::string> cache_dir, Log log);

  static Result<cache::EntryKey> cache_key(const KernelVariant& v, const Arch& arch);
  // The same key from explicit inputs (what cache_key() reads from the running process).
  static cache::EntryKey cache_key_from(const KernelVariant& v, const Arch& arch, const std::string& templates_hash,
                                        const std::string& nvrtc_version, const std::vector<std::string>& options,
                                        int engine_format = kEngineFormatVersion);
  Result<KernelBinary> get(const KernelVariant& v, const Arch& arch);

  // The disk cache, if one is open (tools manage it directly).
  cache::DiskCache* disk();

 private:
  cache::DiskCache* open_disk();
  bool use_disk_;
  std::optional<std::string> cache_dir_;
  Log log_;
  std::once_flag open_once_;
  std::unique_ptr<cache::DiskCache> disk_;
  std::string disk_open_problem_;  // why the disk cache could not be opened
};

}  // namespace flashjit
