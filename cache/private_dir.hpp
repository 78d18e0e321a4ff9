// The cache's trust rule, applied to what is actually used. Cached kernels are machine code the
// process will load and run, so each folder of the cache and each file read from it must be
// private to the user: a folder owned by this user and writable by nobody else, a regular file
// owned by this user and writable by nobody else.
//
// Checking a path and then opening the path again is not enough: whoever owns the folder that
// holds the cache root can swap the root for a folder of its own between the two (issue 6,
// defect 1). So a folder is opened once, checked with fstat on that descriptor, and everything
// below it is reached relative to the descriptor (openat with O_NOFOLLOW | O_DIRECTORY), each
// level checked the same way; what was checked is what is used. Only the root may be reached
// through a symlink (it is where the user points the cache); nothing below it may be one.
#pragma once

#include <string>

#include "cache/posix_io.hpp"
#include "flashjit/status.hpp"

namespace flashjit::cache {

// The folder policy on an open descriptor: a folder, owned by the effective uid, with neither
// the group nor the other write bit set. Code::permission_denied naming `path` and the rule
// (details "path", "rule", and "mode" for a mode problem) otherwise.
Status check_private_dir(int fd, const std::string& path);

// A folder of the cache that passed check_private_dir on the descriptor it holds.
class PrivateDir : public DirFd {
 public:
  PrivateDir() = default;

  // Opens the cache root by path (a symlink to it is followed) and checks it. With `create`,
  // missing folders on the way are made with mode 0700 (the umask notwithstanding), each one
  // created through its parent's descriptor. Code::not_found when it is missing and !create.
  static Result<PrivateDir> open_root(const std::string& path, bool create);

  // A folder directly below this one, never through a symlink, checked. With `create` it is made
  // (mode 0700) when missing. Code::not_found when it is missing and !create.
  Result<PrivateDir> open_sub(const std::string& name, bool create) const;

 private:
  explicit PrivateDir(DirFd dir) : DirFd(std::move(dir)) {}
};

// Opens a file of a private folder for reading, without following a symlink and without
// blocking (see open_regular_file_at), and checks the descriptor: a regular file, owned by this
// user, not writable by group or others. Code::not_found when there is no file;
// Code::permission_denied with detail "reason", which reads on from the path ("is not a regular
// file (a FIFO)", "is a symbolic link", "is owned by uid 1001, ...", "is writable by group or
// others (mode 0666)"), when it fails a check.
Result<OpenedFile> open_private_file(const PrivateDir& dir, const std::string& name);

}  // namespace flashjit::cache
