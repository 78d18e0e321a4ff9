#include "plan_memo.hpp"

namespace flashjit {

bool PlanMemo::Key::operator==(const Key& o) const {
  // The fields that most often differ first: another planner or context, another shape.
  return planner == o.planner && generation == o.generation && ctx == o.ctx && pass == o.pass &&
         shape.batch == o.shape.batch && shape.seqlen_q == o.shape.seqlen_q && shape.seqlen_k == o.shape.seqlen_k &&
         shape.heads_q == o.shape.heads_q && shape.heads_kv == o.shape.heads_kv &&
         shape.page_size == o.shape.page_size && semantics == o.semantics;
}

// Not inlined: each use of a thread_local in a shared library is a call into the dynamic linker
// (__tls_get_addr); the caller keeps the reference instead.
[[gnu::noinline]] PlanMemo& PlanMemo::this_thread() {
  thread_local PlanMemo memo;
  return memo;
}

const Plan* PlanMemo::find(const Key& key) const {
  for (const Entry& e : entries_)
    if (e.plan && e.key == key) return e.plan.get();
  return nullptr;
}

const Plan* PlanMemo::remember(const Key& key, std::shared_ptr<const Plan> plan) {
  Entry& e = entries_[next_];
  next_ = (next_ + 1) % kEntries;
  e.key = key;
  e.plan = std::move(plan);
  return e.plan.get();
}

}  // namespace flashjit
