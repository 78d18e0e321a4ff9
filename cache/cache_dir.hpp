// Where the kernel cache lives and how its folders are reached.
//
// Layout:   <root>/<arch>/<entry files>   e.g. ~/.cache/flashjit/sm_90a/fa2_...-0123456789abcdef.fjk
//           <root>/<arch>/locks/          per-key lock files
//
// Every folder is opened through its parent's descriptor and checked on its own (private_dir.hpp):
// a root, arch or locks folder that another user could write to, that is owned by another uid,
// or (below the root) that is a symlink, is refused with Code::permission_denied.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/private_dir.hpp"
#include "flashjit/status.hpp"

namespace flashjit::cache {

// The folder used when no explicit root is given, first match wins:
//   $FLASHJIT_CACHE_DIR (must be absolute), $XDG_CACHE_HOME/flashjit (ignored unless absolute,
//   as the XDG spec says), $HOME/.cache/flashjit, <passwd home>/.cache/flashjit.
// Creates nothing.
Result<std::string> resolve_cache_root();

// "sm_" + 2 to 4 digits + an optional "a" or "f" suffix (sm_80, sm_90a, sm_100f). Anything else
// is refused, so an arch can never name a path outside the root.
bool is_valid_arch(std::string_view arch);
Status validate_arch(std::string_view arch);

inline constexpr const char* kLocksDirName = "locks";

// One arch's folders, opened and checked.
struct ArchDir {
  PrivateDir dir;                   // <root>/<arch>
  std::optional<PrivateDir> locks;  // <root>/<arch>/locks; absent until the first build makes it
};

class CacheDir {
 public:
  // Creates the root if missing (mode 0700) and checks it.
  static Result<CacheDir> open(std::string root);

  const std::string& root() const { return root_; }

  // Opens and checks the root now: its mode, owner or the folder itself may have changed since
  // open(). Each cache operation opens it once and reaches everything else through it.
  Result<PrivateDir> open_root(bool create) const;

  // Paths, for messages and tools only; the cache never opens them.
  std::string arch_path(std::string_view arch) const;
  std::string locks_path(std::string_view arch) const;

  // The arch folder below an opened root, checked, and its locks/ folder, checked too when it
  // exists (an unsafe locks folder makes the arch unusable, like an unsafe root). Code::not_found
  // if the arch folder does not exist yet.
  static Result<ArchDir> existing_arch_dir(const PrivateDir& root, std::string_view arch);

  // The same, creating the arch folder and its locks/ folder as needed.
  static Result<ArchDir> create_arch_dir(const PrivateDir& root, std::string_view arch);

  // Arch folders present under an opened root (names that fail validation are ignored), sorted.
  static Result<std::vector<std::string>> arches(const PrivateDir& root);

 private:
  explicit CacheDir(std::string root) : root_(std::move(root)) {}
  std::string root_;
};

}  // namespace flashjit::cache
