// flashjit's catalog: the kernel families and the tilings they offer, whether a variant can be
// built, what keys its compiled binary in the disk cache, and the versions in play. Every call
// works without an Engine or a GPU, for what offline work needs: warming a fleet's cache for
// named archs, benchmarking each tiling of a family, telling whether a shipped bundle will hit.
// Forward and backward families alike: a call that lists families takes the pass it lists.
// flashjit.hpp includes this header.
//
//   auto families = flashjit::families_serving(arch, semantics);    // an error says why none
//   // (families_serving(arch, semantics, flashjit::Pass::backward) for the backward's)
//   for (const std::string& family : families.value()) {
//     auto tilings = flashjit::candidate_tilings(family, arch, semantics);
//     for (const flashjit::Tiling& tiling : tilings.value()) engine->compile({family, semantics, tiling}, arch.name());
//   }
#pragma once

#include <string>
#include <vector>

#include "flashjit/status.hpp"
#include "flashjit/variant.hpp"

namespace flashjit {

struct AttentionArgs;  // flashjit.hpp

// ---- Families and their tilings -------------------------------------------------------------

// Which pass of attention a family's kernels compute. Engine::forward() runs forward families
// only and Engine::backward() backward ones; a backward variant is keyed apart by its family's
// name (both passes share the forward's result-changing semantics, with write_lse off in the
// backward's, which reads the LSE rather than writing it).
enum class Pass { forward, backward };
const char* pass_name(Pass pass);  // "forward", "backward"

// The semantics a backward call's variant has, given its forward call's: the same, with
// write_lse off (the backward reads the LSE, so its variant is not named for writing it). What
// families_serving(..., Pass::backward) and the tilings are asked with to warm a training job.
Semantics backward_semantics(const Semantics& forward);
// The semantics a forward call's variant has: deterministic off (every forward kernel gives the
// same bits every call already; the field picks the backward's fixed order of dQ sums).
Semantics forward_semantics(const Semantics& s);

// The names of every kernel family of `pass`, in the priority order the engine tries them.
std::vector<std::string> kernel_family_names(Pass pass = Pass::forward);

// The pass a family computes; an `invalid_argument` error for an unknown name.
Result<Pass> family_pass(const std::string& family);

// The families of `pass` that serve `semantics` on `arch` for some problem shape, in priority
// order: what ahead-of-time warmup compiles (the engine picks among them per call, by shape).
// Never empty: when none serves, an `unsupported` error gives each family's reason (also for an
// arch older than every family's); semantics that break Semantics::check() are
// `invalid_argument`. A backward call's semantics are its forward's with write_lse off.
Result<std::vector<std::string>> families_serving(const Arch& arch, const Semantics& semantics,
                                                  Pass pass = Pass::forward);

// Every tiling `family` (of either pass) may pick by default for `semantics` on `arch` (one per
// class of shapes), without tuning: warming these makes every untuned call a cache hit. An error
// names an unknown family or says why the family refuses (arch, semantics).
Result<std::vector<Tiling>> default_tilings(const std::string& family, const Arch& arch, const Semantics& semantics);

// Every tiling of `family` worth timing for `semantics` on `arch`: structurally valid and within
// the arch's shared memory. The autotuner chooses among these, so warming them all keeps any tuned
// choice warm. Errors as default_tilings().
Result<std::vector<Tiling>> candidate_tilings(const std::string& family, const Arch& arch, const Semantics& semantics);

// The variant `family` would run for these arguments on `arch`, with its default tiling for their
// shape: Engine::plan() for a family the caller picks rather than the first that serves (to
// compare families on one problem). The arguments are validated as forward() validates them; a
// family that refuses the call is an `unsupported` error saying why.
Result<KernelVariant> family_variant(const std::string& family, const AttentionArgs& args, const Arch& arch);

// A family's tiling from its readable name: parse_tiling("fa2_sm80", "m128n64w4s2"). With an empty
// family, the family of either pass whose knob letters the text spells (each family's are its
// own). A refusal quotes the text and shows the form that family's tilings take.
Result<Tiling> parse_tiling(const std::string& family, const std::string& text);

// The block of the score matrix one CTA of a tiling computes at a time: `rows` query rows against
// a K/V tile of `keys` keys (decode_sm80's rows are (query, head) pairs of one GQA group). What a
// count of the tiles a mask or window visits needs, whichever family's knobs give it.
struct TileShape {
  int rows = 0;
  int keys = 0;
};
Result<TileShape> tile_shape(const Tiling& tiling);

// Whether `variant` can be compiled for `arch`: its family is known and serves the semantics there,
// the tiling is that family's, structurally valid, and fits the arch's shared memory. Engine::
// compile() checks the same; asking first lets a planner refuse a whole job list before any work.
Status check_buildable(const KernelVariant& variant, const Arch& arch);

// ---- The disk cache's key and the versions that make it ---------------------------------------

// What the disk cache files a variant's compiled binary under (content only: the engine format,
// the templates' hash, every field the code depends on, the compile options, the NVRTC version and
// the arch). Tilings that differ only in plan-only knobs share one key. The cache layer's
// cache::EntryKey has these fields.
struct DiskCacheKey {
  std::string arch;          // "sm_90a": the cache's folder
  std::string name;          // the variant's code_name(), readable
  std::string content_hash;  // hex digest of everything that affects the binary
};

// The key `variant` is (or would be) cached under for `arch` by this process: where a tool looks
// for it, or why two machines miss each other's entries. Needs NVRTC (its version is part of the
// key): a `library_missing` error when it cannot be loaded. Does not check the variant is buildable.
Result<DiskCacheKey> disk_cache_key(const KernelVariant& variant, const Arch& arch);

// The library's version number, "0.1.0".
std::string library_version();

// The NVRTC this process compiles with.
struct NvrtcInfo {
  std::string version;  // "13.0": part of every cache key
  std::string path;     // the file that was opened
};
// Loads NVRTC if needed ($FLASHJIT_NVRTC_PATH, else the usual names); the error says why it cannot.
Result<NvrtcInfo> nvrtc_info();

// The format version of cached binaries, bumped when their meaning changes with the same inputs.
int engine_format_version();

// The content hash of the kernel templates built into this library (part of every cache key).
std::string templates_hash();

// The library's version and the NVRTC version it loads: "flashjit 0.1.0 (NVRTC 13.0)", or
// "flashjit 0.1.0" when NVRTC is missing.
std::string version();

}  // namespace flashjit
