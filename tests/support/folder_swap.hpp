// The folder-swap race of issue 6 (defect 1), as test equipment: a thread that swaps two folders
// with renameat2(RENAME_EXCHANGE) until stopped, a way to make a folder fail the private-folder
// policy as an attacker's folder would, the attacker's tree with a forged file, and snapshots of a
// tree to show nothing was added to it.
#pragma once

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/support/test_support.hpp"

namespace flashjit::test_support {

// Swaps the names `a` and `b` in the folder `parent` until stop(), holding each arrangement for
// a random 0 to `max_hold` before the next swap (a hold of a few microseconds lets a victim's
// check and its later open see different folders, which is the race); leaves the names as they
// were found. failed() tells that a swap was refused (then the race never ran).
class FolderSwapper {
 public:
  FolderSwapper(const std::string& parent, std::string a, std::string b,
                std::chrono::microseconds max_hold = std::chrono::microseconds(300))
      : a_(std::move(a)), b_(std::move(b)) {
    dir_ = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    thread_ = std::thread([this, max_hold] {
      std::minstd_rand rng(12345);
      while (!stop_.load()) {
        if (::renameat2(dir_, a_.c_str(), dir_, b_.c_str(), RENAME_EXCHANGE) != 0) {
          failed_ = true;
          return;
        }
        swaps_.fetch_add(1);
        const auto until = std::chrono::steady_clock::now() +
                           std::chrono::microseconds(rng() % (static_cast<unsigned>(max_hold.count()) + 1));
        while (std::chrono::steady_clock::now() < until && !stop_.load()) {
        }
      }
    });
  }
  ~FolderSwapper() { stop(); }
  FolderSwapper(const FolderSwapper&) = delete;
  FolderSwapper& operator=(const FolderSwapper&) = delete;

  void stop() {
    if (!thread_.joinable()) return;
    stop_ = true;
    thread_.join();
    if (swaps_.load() % 2 == 1) (void)::renameat2(dir_, a_.c_str(), dir_, b_.c_str(), RENAME_EXCHANGE);
    ::close(dir_);
  }
  bool failed() const { return failed_.load(); }
  long swaps() const { return swaps_.load(); }

 private:
  std::string a_, b_;
  int dir_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<bool> failed_{false};
  std::atomic<long> swaps_{0};
  std::thread thread_;
};

// Makes the folder `path` fail the private-folder policy the way another user's folder does:
// owned by another uid where the test may give it away (running as root), else writable by
// others. Returns false if that could not be done.
inline bool make_foreign(const std::string& path) {
  if (::geteuid() == 0) return ::chown(path.c_str(), 54321, 54321) == 0;
  return ::chmod(path.c_str(), 0777) == 0;
}

// Every path under `dir` (files with their size), sorted.
inline std::vector<std::string> tree_of(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); !ec && it != std::filesystem::end(it);
       it.increment(ec))
    out.push_back(it->path().string() + (it->is_regular_file() ? " " + std::to_string(it->file_size()) : "/"));
  std::sort(out.begin(), out.end());
  return out;
}

// Builds the attacker's folder `evil`: its sub-folders `subdirs` (each after its parent), a forged
// file `file` under it holding `bytes` (ours, mode 0600), then every folder made foreign as
// make_foreign does. False if a step failed.
inline bool make_forged_tree(const std::string& evil, const std::vector<std::string>& subdirs, const std::string& file,
                             const std::string& bytes) {
  std::vector<std::string> dirs{evil};
  for (const auto& d : subdirs) dirs.push_back(evil + "/" + d);
  for (const auto& d : dirs)
    if (::mkdir(d.c_str(), 0700) != 0) return false;
  const std::string path = evil + "/" + file;
  write_file(path, bytes);
  if (::chmod(path.c_str(), 0600) != 0) return false;
  for (const auto& d : dirs)
    if (!make_foreign(d)) return false;
  return true;
}

// What differs between two tree_of snapshots: " +path" for each path added, " -path" for each
// removed (a file whose size changed is both); empty when nothing changed.
inline std::string tree_changes(const std::vector<std::string>& before, const std::vector<std::string>& after) {
  std::vector<std::string> added, removed;
  std::set_difference(after.begin(), after.end(), before.begin(), before.end(), std::back_inserter(added));
  std::set_difference(before.begin(), before.end(), after.begin(), after.end(), std::back_inserter(removed));
  std::string out;
  for (const auto& p : added) out += " +" + p;
  for (const auto& p : removed) out += " -" + p;
  return out;
}

}  // namespace flashjit::test_support
