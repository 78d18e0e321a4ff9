// A kernel family is one template and its rules: which archs, semantics and shapes it serves,
// its speed-only knobs and their defaults, the kernels its module exports, and how one call
// becomes launches (the launch plan, its params struct, its workspace). fa2_sm80 today; Hopper,
// decode and paged families plug in here. The engine stays generic: it asks the registry, in
// priority order, which family serves a problem, and launches whatever plan that family makes.
#pragma once

#include <cuda.h>

#include <string>
#include <string_view>
#include <vector>

#include "base/problem_shape.hpp"
#include "device_context.hpp"
#include "flashjit/flashjit.hpp"
#include "flashjit/status.hpp"
#include "flashjit/variant.hpp"
#include "launch_plan.hpp"
#include "problem.hpp"

namespace flashjit {

// Pass (flashjit/catalog.hpp): which pass a family's kernels compute. A forward call never runs
// a backward family and the reverse: the family, not the semantics, says so.

// A kernel a family's module exports.
struct EntryPoint {
  const char* name;  // its extern "C" name
  int smem_bytes;    // dynamic shared memory it opts into
};

class KernelFamily {
 public:
  virtual ~KernelFamily() = default;
  virtual const char* name() const = 0;
  virtual const KnobTable& knobs() const = 0;
  virtual const char* entry_template() const = 0;  // path under templates/
  // Families are tried in ascending priority; the first that accepts a problem runs it.
  virtual int priority() const = 0;
  virtual Pass pass() const { return Pass::forward; }
  // Why this family cannot serve (arch, semantics, shape), or nullptr when it can. `shape` is
  // null when compiling ahead of time (any shape). The semantics have passed Semantics::check().
  // A static string: asked on every call.
  virtual const char* refusal(const Arch& arch, const Semantics& s, const ProblemShape* shape) const = 0;
  // Whether refusal() looks at the arch and semantics only: where this family serves, it serves
  // every shape, so no family after it runs those calls, and ahead-of-time warmup skips them.
  virtual bool serves_every_shape() const { return false; }
  // Shared memory of the family's smallest tiling for `s`: past an arch's limit no tiling fits,
  // and refusal() returns smem_refusal()'s reason. Cheap: refusal() runs on every call.
  virtual int min_smem_bytes(const Semantics& s) const = 0;
  // Structural rules of a tiling (divisibility, ranges); resource limits are checked apart.
  virtual Status check_tiling(const Semantics& s, const Tiling& t) const = 0;
  // The tiling used when nothing was tuned. `shape` is null ahead of time (any shape); a rule
  // may look at it only through its power-of-two size buckets (autotune/problem_bucket.hpp),
  // since plans are cached per bucket. Where refusal() accepts, it fits the arch's shared memory.
  virtual Tiling default_tiling(const Arch& arch, const Semantics& s, const ProblemShape* shape) const = 0;
  // Every tiling default_tiling() may return for some shape: what warming a cache compiles.
  virtual std::vector<Tiling> default_tilings(const Arch& arch, const Semantics& s) const {
    return {default_tiling(arch, s, nullptr)};
  }
  // Every tiling worth timing on this arch (structurally valid and fitting shared memory).
  virtual std::vector<Tiling> candidate_tilings(const Arch& arch, const Semantics& s) const = 0;
  // The score block one CTA computes at a time under a tiling of this family (see tile_shape()).
  virtual TileShape tile_shape(const Tiling& t) const = 0;
  // The kernels of a variant's module, in the order launch plans refer to them.
  virtual std::vector<EntryPoint> entry_points(const KernelVariant& v) const = 0;
  // The launches for one call: fills `out` (grids, params) for a validated problem, taking from
  // `workspace` the device scratch memory the call needs (split-KV partials; most families need
  // none). Runs on every call: no allocation, no driver calls of its own.
  virtual Status plan(const AttentionProblem& p, const KernelVariant& v, const DeviceContextInfo& device,
                      WorkspaceSource& workspace, LaunchPlan& out) const = 0;
};

// What every family has alike: a knob table (which names the family), a template, a priority,
// and how check_tiling() words a broken rule.
class KernelFamilyBase : public KernelFamily {
 public:
  KernelFamilyBase(const KnobTable& knobs, const char* entry_template, int priority)
      : knobs_(knobs), entry_template_(entry_template), priority_(priority) {}
  const char* name() const final { return knobs_.family; }
  const KnobTable& knobs() const final { return knobs_; }
  const char* entry_template() const final { return entry_template_; }
  int priority() const final { return priority_; }

 protected:
  // The error for tiling `t` breaking `rule`, naming both.
  static Error broken(const Tiling& t, const std::string& rule) {
    return Error(Code::invalid_argument, "tiling " + t.name() + ": " + rule);
  }
  // Where every check_tiling() starts: a tiling of another family is refused by name.
  Status check_table(const Tiling& t) const {
    if (t.table != &knobs_) return broken(t, std::string("is not a ") + knobs_.family + " tiling");
    return {};
  }

 private:
  const KnobTable& knobs_;
  const char* entry_template_;
  int priority_;
};

// The refusal of the mma.sync families on GPUs before Ampere.
inline constexpr const char* kNeedsSm80 = "needs sm_80 or newer (mma.sync on 16-bit types, cp.async)";

// Shared memory one block may use on an arch (opt-in maximum), used to prune tilings without a
// GPU; at run time the device's own attribute is used instead.
int arch_smem_limit(const Arch& arch);

// refusal()'s reason when even a family's smallest tiling needs more shared memory than `arch`
// allows one block (fp32 at large head dims on sm_86 and sm_89), else nullptr.
const char* smem_refusal(const KernelFamily& family, const Arch& arch, const Semantics& s);

// A refusal as an error message says: `why_not`, with the numbers when it is smem_refusal()'s
// (dtype, head dims, bytes needed, the arch's limit).
std::string explain_refusal(const KernelFamily& family, const Arch& arch, const Semantics& s, const char* why_not);

// Every family of one pass, in ascending priority.
const std::vector<const KernelFamily*>& kernel_families(Pass pass = Pass::forward);
const KernelFamily* find_family(std::string_view name);  // of either pass
const KnobTable* family_knobs(std::string_view family);  // nullptr for an unknown family

// The family that runs a problem: the first by priority that accepts it (dispatch path).
const KernelFamily* pick_family(const Arch& arch, const Semantics& s, const ProblemShape* shape,
                                Pass pass = Pass::forward);

// The same choice, explained: which family runs and why each one before it refused.
struct FamilyChoice {
  const KernelFamily* family = nullptr;
  std::string why;
};
Result<FamilyChoice> choose_family(const Arch& arch, const Semantics& s, const ProblemShape* shape,
                                   Pass pass = Pass::forward);

// Families that serve (arch, semantics) for some shape, up to the first that serves every shape:
// what ahead-of-time warmup compiles.
std::vector<const KernelFamily*> families_for(const Arch& arch, const Semantics& s, Pass pass = Pass::forward);

// Checks a whole variant can be built for an arch (family known and willing, tiling valid, fits).
Status check_variant(const KernelVariant& v, const Arch& arch);

// The largest dynamic shared memory of a variant's kernels.
int variant_smem_bytes(const KernelVariant& v);

}  // namespace flashjit
