// Issue 6, defect 1, for the tuning results folder (<cache>/tuning/): the folder-swap race of
// tests/cache/test_folder_swap.cpp against the tuning store, which lives under the same root.
// A forged tuning file in a swapped-in tree must never be read, and no write may land there.
// The same modelling and the same limits apply (see that file): "another user's" folder is one
// owned by another uid when the test runs as root, else one writable by others; the forged file
// itself is ours and mode 0600, so only checking the folders actually used keeps it out.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>

#include "autotune/tuning_file.hpp"
#include "autotune/tuning_store.hpp"
#include "autotune_test_util.hpp"
#include "tests/support/folder_swap.hpp"

using namespace flashjit;
using namespace flashjit::autotune;
using namespace flashjit::autotune::test;
using namespace std::chrono_literals;
using test_support::FolderSwapper;
using test_support::make_forged_tree;
using test_support::tree_changes;
using test_support::tree_of;

namespace {

const char* kDevice = "NVIDIA H100 80GB HBM3";
const char* kArch = "sm_90a";

TuningKey key_for(std::int64_t seqlen) {
  Semantics s;
  s.mask = Mask::causal;
  return make_tuning_key("fa2_sm80", s, seqlen, seqlen, 32);
}

TuningRecord record(const Tiling& t) {
  TuningRecord r;
  r.tiling = t;
  r.ms = 1.0;
  r.default_tiling = kDefault;
  r.candidate_set_hash = "hash";
  r.nvrtc_version = "12.4";
  r.driver_version = "12040";
  return r;
}

}  // namespace

TEST_CASE("tuning folder swap: a forged tuning file in a swapped-in folder is never used, nothing is written there") {
  TempDir tmp;
  const std::string parent = tmp / "shared";  // stands for the attacker's folder that holds the root
  REQUIRE(::mkdir(parent.c_str(), 0700) == 0);
  const std::string root = parent + "/cache", evil = parent + "/evil";
  auto opened = TuningStore::open(root, kDevice, kArch, "12.4", "12040", Logger([](const std::string&) {}), test_knobs);
  REQUIRE(opened.ok());
  TuningStore store = std::move(opened).value();
  const Tiling mine = T(128, 64, 4, 2), forged = T(64, 32, 4, 2);
  REQUIRE(store.put(key_for(64), record(mine)).ok());

  // The attacker's tree: a tuning file for the same device and arch that picks another tiling.
  const TuningFileHeader header{kDevice, kArch, "12.4", "12040"};
  REQUIRE(make_forged_tree(evil, {"tuning", "tuning/locks"}, "tuning/" + tuning_file_name(kArch, kDevice),
                           serialize_tuning_file(header, {{key_for(64).to_string(), record(forged)},
                                                          {key_for(4096).to_string(), record(forged)}})));
  const auto evil_before = tree_of(evil);

  long forged_seen = 0, refused = 0, fine = 0;
  {
    FolderSwapper swapper(parent, "cache", "evil");
    const auto deadline = std::chrono::steady_clock::now() + 3s;
    for (int i = 0; i < 100000 && std::chrono::steady_clock::now() < deadline; ++i) {
      if (Status st = store.reload(); !st.ok()) ++refused;
      else ++fine;
      if (i % 64 == 0 && !store.put(key_for(128 << (i % 5)), record(mine)).ok()) ++refused;
      for (const auto& [k, r] : store.records())
        if (r.tiling == forged) ++forged_seen;
    }
    swapper.stop();
    REQUIRE_FALSE(swapper.failed());
    MESSAGE("swaps " << swapper.swaps() << ", fine " << fine << ", refused " << refused << ", forged records seen "
                     << forged_seen);
  }
  CHECK(forged_seen == 0);
  CHECK(tree_changes(evil_before, tree_of(evil)) == "");  // nothing was written in the swapped-in tree
  CHECK(refused > 0);  // the race was exercised: some operations met the swapped-in root
  CHECK(fine > 0);
  CHECK(store.find(key_for(64), "hash")->tiling == mine);
}
