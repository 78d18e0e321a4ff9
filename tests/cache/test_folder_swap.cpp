// Issue 6, defect 1: the folder-swap race. A user who owns the folder that holds the cache root
// swaps the victim's root for a folder of its own (renameat2 RENAME_EXCHANGE, in a loop) while
// the victim reads and writes entries. Checks made on paths and followed by opens of the same
// paths let the victim read the forged tree; checks made on the descriptors that are then used
// do not.
//
// What the test can and cannot prove. Tests run as one user, so "owned by someone else" is
// modelled honestly with the other half of the same rule: the swapped-in tree is owned by another
// uid when the test runs as root, and is writable by others (mode 0777) otherwise; both fail the
// folder policy. The forged entry file itself passes every check an entry file gets (ours, mode
// 0600, the right header, key and checksum), so only checking the folders that are actually used
// can keep it out. The test shows, over a bounded number of real races, that (1) the forged
// payload is never returned, (2) nothing is ever written into the swapped-in tree, and (3) the
// race really happened (some operations met the swapped-in root and were refused). A race test
// cannot prove the absence of a window; it is a regression detector, and the code before the fix
// failed it within a few hundred iterations.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>

#include "cache/entry_file.hpp"
#include "cache_test_util.hpp"
#include "tests/support/folder_swap.hpp"

using namespace flashjit;
using namespace flashjit::cache;
using namespace flashjit::cache::test;
using namespace std::chrono_literals;

using test_support::FolderSwapper;
using test_support::make_forged_tree;
using test_support::tree_changes;
using test_support::tree_of;

TEST_CASE("folder swap: a forged entry in a swapped-in folder is never returned, nothing is written there") {
  TempDir tmp;
  const std::string parent = tmp / "shared";  // stands for the attacker's folder that holds the root
  REQUIRE(::mkdir(parent.c_str(), 0700) == 0);
  const std::string root = parent + "/cache", evil = parent + "/evil";
  auto cache = open_cache(root);
  const EntryKey key = make_key("victim");
  REQUIRE(cache.store(key, "GOOD").ok());

  // The attacker's tree: the same layout, with a forged entry for the victim's key.
  REQUIRE(make_forged_tree(evil, {"sm_90a", "sm_90a/locks"}, "sm_90a/" + entry_file_name(key),
                           encode_entry_header(entry_identity(key), "FORGED") + "FORGED"));
  const auto evil_before = tree_of(evil);

  long forged = 0, good = 0, refused = 0, misses = 0, stored = 0;
  {
    FolderSwapper swapper(parent, "cache", "evil");
    const auto deadline = std::chrono::steady_clock::now() + 3s;
    for (int i = 0; i < 200000 && std::chrono::steady_clock::now() < deadline; ++i) {
      auto r = cache.load(key);
      if (!r.ok()) ++refused;
      else if (!r->has_value()) ++misses;
      else if (**r == "FORGED") ++forged;
      else if (**r == "GOOD") ++good;
      if (i % 64 == 0) {  // writes too: each would be a file in the attacker's tree if misdirected
        if (cache.store(make_key("w" + std::to_string(i)), "mine").ok()) ++stored;
        else ++refused;
      }
    }
    swapper.stop();
    REQUIRE_FALSE(swapper.failed());
    MESSAGE("swaps " << swapper.swaps() << ", good " << good << ", refused " << refused << ", misses " << misses
                     << ", stores " << stored << ", forged " << forged);
  }
  CHECK(forged == 0);
  CHECK(tree_changes(evil_before, tree_of(evil)) == "");  // nothing was written in the swapped-in tree
  CHECK(refused > 0);  // the race was exercised: some operations met the swapped-in root
  CHECK(good > 0);
  CHECK(cache.load(key).value() == std::string("GOOD"));
}
