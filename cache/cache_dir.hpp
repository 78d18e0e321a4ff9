// Where the kernel cache lives and the rules its folders must obey.
//
// Layout:   <root>/<arch>/<entry files>   e.g. ~/.cache/flashjit/sm_90a/fa2_...-0123456789abcdef.fjk
//           <root>/<arch>/locks/          per-key lock files
//
// Cached files are machine code the process will load and run, so the folders are a security
// boundary: a root or arch folder that another user could write to (group/other write bit, or
// owned by another uid) is refused with Code::permission_denied rather than trusted.
#pragma once

#include <string>
#include <string_view>
#include <vector>

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

// The policy: a folder (the root may be reached through a symlink, nothing below it may),
// owned by the effective uid, with neither the group nor the other write bit set.
Status check_private_dir(const std::string& path, bool follow_symlink);

// mkdir -p with mode 0700 for every folder it creates (umask notwithstanding), then the policy
// check on `path` itself. Existing parents are left as they are.
Status ensure_private_dir(const std::string& path, bool follow_symlink);

class CacheDir {
 public:
  // Creates the root if missing and checks it.
  static Result<CacheDir> open(std::string root);

  const std::string& root() const { return root_; }

  // Re-checks the root: its mode or owner may have changed since open().
  Status check_root() const;

  // Path of an arch folder; `arch` must already be valid.
  std::string arch_path(std::string_view arch) const;
  std::string locks_path(std::string_view arch) const;

  // Checks root and arch folder; Code::not_found if the arch folder does not exist yet.
  Result<std::string> existing_arch_dir(std::string_view arch) const;

  // Creates the arch folder and its locks/ folder as needed; checks all of them.
  Result<std::string> create_arch_dir(std::string_view arch) const;

  // Arch folders present under the root (names that fail validation are ignored), each checked.
  Result<std::vector<std::string>> arches() const;

 private:
  explicit CacheDir(std::string root) : root_(std::move(root)) {}
  std::string root_;
};

}  // namespace flashjit::cache
