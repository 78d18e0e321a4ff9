// The plans a thread's last calls ran, found again by comparing the call's key with a few kept
// ones: no family choice (every family's refusal()), no hash of the semantics, no shared lock and
// no reference count on the dispatch path, and nothing shared between threads, so callers on
// several threads do not bounce a lock's cache line between their cores.
// The key is everything the answer depends on: the planner (a unique id, never an address that
// a later planner may reuse) and its generation (forget() bumps it), the context (which fixes the
// device, so the arch), the pass, the semantics and the exact shape (family refusals look at the
// shape itself; plans only at its buckets). Only successes are remembered.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>

#include "base/problem_shape.hpp"
#include "flashjit/variant.hpp"
#include "kernel_family.hpp"

namespace flashjit {

struct Plan;

class PlanMemo {
 public:
  struct Key {
    std::uint64_t planner;
    std::uint64_t generation;
    CUcontext ctx;
    Pass pass;
    Semantics semantics;
    ProblemShape shape;
    bool operator==(const Key& o) const;
  };

  // The calling thread's memo.
  static PlanMemo& this_thread();

  // The plan remembered for `key`, or null.
  const Plan* find(const Key& key) const;
  // Keeps `plan` for `key` (in place of the least recently remembered one) and returns it.
  const Plan* remember(const Key& key, std::shared_ptr<const Plan> plan);

 private:
  // Room for a few problems a thread alternates between (layers of different shapes, a forward
  // and a backward); each entry holds its plan alive until it is replaced or the thread ends.
  static constexpr int kEntries = 4;
  struct Entry {
    Key key;
    std::shared_ptr<const Plan> plan;
  };
  Entry entries_[kEntries]{};
  int next_ = 0;
};

}  // namespace flashjit
