// flashjit C++ API: run-time specialized fused attention.
//
//   auto engine = flashjit::Engine::create().value();
//   flashjit::AttentionArgs args;
//   args.q = flashjit::TensorView::bshd(q_ptr, flashjit::DType::f16, B, Sq, Hq, D);  // ... k, v, o
//   args.mask = flashjit::Mask::causal;
//   if (auto st = engine->forward(args, stream); !st) fprintf(stderr, "%s\n", st.error().to_string().c_str());
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "flashjit/catalog.hpp"  // families, tilings, cache keys, versions: no Engine needed
#include "flashjit/status.hpp"
#include "flashjit/variant.hpp"

typedef struct CUstream_st* CUstream;  // as cuda.h declares it

namespace flashjit {

// A device tensor seen as [batch, seq, heads, head_dim] with element strides. Any layout whose
// strides fit works without copies: [B,S,H,D], [B,H,S,D], a packed [S, H*D] projection, ...
struct TensorView {
  const void* data = nullptr;
  DType dtype = DType::f16;
  std::int64_t shape[4] = {0, 0, 0, 0};
  std::int64_t stride[4] = {0, 0, 0, 0};

  static TensorView bshd(const void* data, DType dtype, std::int64_t b, std::int64_t s,
                         std::int64_t h, std::int64_t d);  // contiguous [B,S,H,D]
  static TensorView bhsd(const void* data, DType dtype, std::int64_t b, std::int64_t s,
                         std::int64_t h, std::int64_t d);  // contiguous [B,H,S,D] storage
};

// Optional log-sum-exp output: fp32, [batch, heads_q, seq_q] with element strides.
struct LseView {
  float* data = nullptr;
  std::int64_t shape[3] = {0, 0, 0};
  std::int64_t stride[3] = {0, 0, 0};
  static LseView contiguous(float* data, std::int64_t b, std::int64_t h, std::int64_t s);
};

// A ragged batch packed along the sequence axis (FlashAttention's varlen): q, k, v and o are
// [1, total tokens, heads, head_dim] views and sequence i owns rows [cu[i], cu[i + 1]). The
// prefix sums live on the device (never read by the host); rows past max_seqlen_q of a
// sequence are not computed, so the max lengths must hold every sequence's length.
struct Varlen {
  const std::int32_t* cu_seqlens_q = nullptr;  // [batch + 1], device, cu[0] = 0, non-decreasing
  const std::int32_t* cu_seqlens_k = nullptr;  // [batch + 1], device
  std::int64_t batch = 0;                      // number of sequences
  std::int64_t max_seqlen_q = 0;
  std::int64_t max_seqlen_k = 0;
};

// Sliding window, aligned to the bottom right like the causal mask: query i of a sequence with
// Sq queries and Sk keys sees keys j with i + Sk - Sq - left <= j <= i + Sk - Sq + right.
struct Window {
  static constexpr std::int64_t kUnbounded = -1;
  std::int64_t left = kUnbounded;   // keys before the diagonal a row sees; -1: all
  std::int64_t right = kUnbounded;  // keys after the diagonal; -1: all (0 with a causal mask)
};

// ALiBi: -slope * |i + Sk - Sq - j| joins each score (after the softcap), slope per query head.
struct Alibi {
  const float* slopes = nullptr;  // fp32 on the device: [heads_q], or [batch, heads_q] rows
  std::int64_t batch_stride = 0;  // elements between batches' rows; 0: one row for all
};

// K and V as page pools (vLLM's paged KV cache): k and v are [num_pages, page_size, heads_kv,
// head_dim] views, and key j of sequence b lives in page block_table[b * table_stride + j /
// page_size], slot j % page_size. Needs kv_lens: how many keys each sequence uses.
struct PagedKv {
  const std::int32_t* block_table = nullptr;  // device int32, a row of max_pages per sequence
  std::int64_t table_stride = 0;              // elements between sequences' rows (>= max_pages)
  std::int64_t max_pages = 0;                 // pages a sequence may use
};

// A caller's workspace starts at a multiple of this: the alignment cuMemAlloc gives, which the
// families' workspace layouts (256-byte aligned parts) build on.
constexpr std::uint64_t kWorkspaceAlignment = 256;

struct AttentionArgs {
  TensorView q, k, v;
  TensorView o;                        // written; same dtype as q
  std::optional<LseView> lse;          // written when present (with sinks, includes the sink)
  Mask mask = Mask::none;              // causal aligns to the bottom right when Sq != Sk
  std::optional<float> softmax_scale;  // default 1/sqrt(head_dim_qk); must be finite and > 0
  Fp32Math fp32_math = Fp32Math::exact;
  std::optional<Varlen> varlen;        // ragged batch; lse is then [1, heads_q, total_q]
  std::optional<Window> window;        // unbounded on both sides is the same as none
  // The per-call scalars (flashjit/scalars.h has each one's meaning and rule): softcap (scores
  // become cap * tanh(scale * q.k / cap); cap > 0). Unset: the semantic is off.
#define FJ_ARGS_SCALAR(type, field, rule, constant, tag, typical, backward, params, why) std::optional<type> field;
  FLASHJIT_SCALAR_ROWS(FJ_ARGS_SCALAR)
#undef FJ_ARGS_SCALAR
  std::optional<Alibi> alibi;
  // The per-call device arrays (flashjit/device_arrays.h has each one's meaning): sinks (fp32
  // [heads_q]), kv_lens and kv_starts (int32 [batch]); null: not used. Values past a sequence's
  // cache are clamped.
#define FJ_ARGS_DEVICE_ARRAY(elem, field, extent, constant, tag, why) const elem* field = nullptr;
  FLASHJIT_DEVICE_ARRAY_ROWS(FJ_ARGS_DEVICE_ARRAY)
#undef FJ_ARGS_DEVICE_ARRAY
  std::optional<PagedKv> paged;        // K and V in page pools (with kv_lens)
  // Device scratch memory the caller owns for this call (a framework's allocator, a CUDA graph's
  // memory pool), used instead of the engine's per-stream pool: a call captured on a stream the
  // engine has never seen then needs no allocation. At least workspace_size() bytes, aligned to
  // kWorkspaceAlignment; the engine zeroes what must start zeroed, on the stream. Null: the pool.
  struct Workspace {
    void* data = nullptr;
    std::uint64_t bytes = 0;
  } workspace;
  // Checked mode for this call (or every call: EngineOptions::check_metadata, FLASHJIT_CHECK=1):
  // varlen prefix sums, kv_lens and block-table entries are read back and checked before the
  // launch, and a bad entry is an INVALID_ARGUMENT naming the array, the index and the rule.
  // Costs one synchronization of the stream (not allowed while capturing a graph). Off: bad
  // entries are clamped on the device, sync-free (memory-safe, but silent).
  bool check_metadata = false;
  // SMs to leave to other kernels running beside this call (NCCL's in a ring, FlashAttention-3's
  // sm_margin): persistent grids and split-KV counts size to the device's SMs minus this. It
  // changes no result. 0: the engine's default (EngineOptions::sm_margin, FLASHJIT_SM_MARGIN).
  // At most the device's SM count minus one.
  int sm_margin = 0;
};

// The backward pass of one forward call: the gradients of a loss with respect to q, k and v,
// given its gradient with respect to o. `forward` holds the forward's arguments exactly as the
// forward was called (its semantics: mask, scale, dtype, ...), except that o and lse are now
// read: lse is required (the backward recomputes the probabilities from it). So far fp16, bf16
// and fp32 (forward.fp32_math: exact 3xTF32 products or tf32), head dims 1 to 256 (q/k's and v's
// may differ), causal or not, GQA/MQA, sliding windows, softcap, ALiBi (no slope gradient), sinks,
// varlen and kv_lens (keys past a sequence's kv_lens get dk = dv = 0; rows of dq that no varlen
// sequence covers are not written); anything else is refused with UNSUPPORTED naming the argument
// (paged, kv_starts). With sinks, dsinks receives their
// gradient (summed in a fixed order: the same bits run to run).
struct BackwardArgs {
  AttentionArgs forward;        // forward.workspace must be empty: the backward's is below
  TensorView dout;              // dL/do: o's shape and dtype
  TensorView dq, dk, dv;        // written: q's, k's and v's shapes and dtype, any strides
  float* dsinks = nullptr;      // written: dL/dsinks, fp32 [heads_q] on the device; with sinks only; null: not computed
  bool deterministic = false;   // dq summed in a fixed order: the same bits every call (without
                                // it, in the order the K/V blocks finish: the last bits may differ)
  // Device scratch memory the caller owns (an fp32 dq accumulator and one float per query row),
  // as AttentionArgs::workspace: at least backward_workspace_size() bytes, aligned to
  // kWorkspaceAlignment; its contents on entry do not matter. Null: the engine's per-stream pool.
  AttentionArgs::Workspace workspace;
};

// How the engine picks a tiling for a problem it has not seen (FLASHJIT_TUNE overrides the default):
//   off:       the family's default tiling for the arch and head dim, always;
//   offline:   tuned results stored by `flashjit tune` (or an earlier first-use run), else default;
//   first_use: stored results, else tune the problem's bucket right away (seconds, once per
//              bucket and device; the result is stored for every later process).
enum class TuneMode { off, offline, first_use };

struct EngineOptions {
  // Receives progress and diagnostics (compiles, timings). Default: silent unless FLASHJIT_LOG=1.
  std::function<void(const std::string&)> log;
  // Keep compiled kernels on disk across processes (FLASHJIT_DISK_CACHE=0 turns it off).
  bool disk_cache = true;
  // Cache root; default FLASHJIT_CACHE_DIR, else $XDG_CACHE_HOME/flashjit, else ~/.cache/flashjit.
  std::optional<std::string> cache_dir;
  // Unset: FLASHJIT_TUNE (off | offline | first-use), else offline.
  std::optional<TuneMode> tune_mode;
  // Every call in checked mode (see AttentionArgs::check_metadata). Unset: FLASHJIT_CHECK=1 turns it on.
  std::optional<bool> check_metadata;
  // SMs every call leaves free unless it names its own (AttentionArgs::sm_margin); also
  // Engine::set_sm_margin(). Unset: FLASHJIT_SM_MARGIN, else 0.
  std::optional<int> sm_margin;
};

// One offline tuning job: a result-changing variant and a shape; shapes in the same bucket
// (powers of two of Sq, Sk and batch*heads) share the result.
struct TuneRequest {
  Semantics semantics;  // the forward call's; with Pass::backward, the backward of that call is timed
  Pass pass = Pass::forward;
  std::int64_t seqlen_q = 4096, seqlen_k = 4096, batch_x_heads = 64;
  bool retune = false;  // time again even if a current result is stored
  // Called as each candidate finishes: (done, total, tiling just handled, seconds so far).
  std::function<void(std::size_t, std::size_t, const std::string&, double)> progress;
};

struct TuneCandidate {
  std::string tiling;
  std::string status;  // timed, pruned, failed, not_reached
  std::optional<double> ms;
  std::string reason;
};

struct TuneReport {
  std::string key;          // readable bucket key
  KernelVariant chosen;
  double ms = 0;            // chosen tiling's median time on the bucket's representative shape
  Tiling default_tiling;
  std::optional<double> default_ms;
  double flops = 0;         // of the representative shape, for TFLOP/s
  std::vector<TuneCandidate> candidates;
  double seconds = 0;       // wall time of the tuning (0 when an existing result was reused)
  bool reused = false;      // a stored result was current, nothing was timed
  std::string store_path;
};

// What compiling one variant produced.
struct CompileReport {
  KernelVariant variant;
  std::string arch;
  std::size_t cubin_bytes = 0;
  double compile_ms = 0;  // 0 when it came from the disk cache
  bool from_disk = false;
  std::string nvrtc_log;
  // Why the kernel is not in the disk cache although the disk cache is on (an unsafe cache
  // folder, so it was compiled in memory; a failed store). Empty when it is there, or the disk
  // cache is off.
  std::string disk_cache_problem;
};

// Which kernel runs a call, and why that family: the first by priority that serves the
// arch, semantics and shape, after the reasons each one before it gave.
struct PlanReport {
  KernelVariant variant;
  std::string why;
};

// Counters of the in-memory module cache.
struct EngineStats {
  std::uint64_t launches = 0;
  std::uint64_t module_loads = 0;  // kernels loaded into a context (compiled or from disk)
  std::uint64_t disk_hits = 0;     // binaries read from the disk cache instead of compiled
  std::uint64_t compiles = 0;      // NVRTC compilations
  std::uint64_t plan_hits = 0;     // calls served from the in-memory plan cache
  std::uint64_t tunes = 0;         // buckets tuned at run time
  std::uint64_t workspace_buffers = 0;  // device workspaces held (one per stream that needed one)
  std::uint64_t workspace_bytes = 0;
  double compile_ms = 0;
};

class Engine {
 public:
  // Never fails for lack of a GPU: the driver and NVRTC load on first use.
  static Result<std::unique_ptr<Engine>> create(EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Runs attention on `stream` (null: the legacy default stream) of the calling thread's
  // current CUDA context. Validates everything before touching memory; on error nothing is
  // written. Compiles the variant on first use in this context; later calls only launch.
  Status forward(const AttentionArgs& args, CUstream stream = nullptr);

  // forward() with an explicit tiling instead of the engine's choice (benchmarks, tuning): runs
  // the tiling's family (see parse_tiling), which must serve the problem.
  Status forward_with_tiling(const AttentionArgs& args, const Tiling& tiling, CUstream stream = nullptr);

  // Bytes of workspace forward() would take for these arguments on `stream`'s GPU (0 for most
  // calls; split-KV decode needs some): the size of a caller's AttentionArgs::workspace. Plans
  // the call as forward() would (compiling the kernel if it is not cached), launches nothing.
  Result<std::uint64_t> workspace_size(const AttentionArgs& args, CUstream stream = nullptr);

  // The backward pass on `stream`: three kernels in order (row sums and accumulator zeroing, the
  // main pass, dq's conversion), all on `stream`, capturable into a CUDA graph once warm.
  // Validates everything first; on error nothing is written.
  Status backward(const BackwardArgs& args, CUstream stream = nullptr);
  // backward() with an explicit tiling of a backward family (benchmarks): see forward_with_tiling.
  Status backward_with_tiling(const BackwardArgs& args, const Tiling& tiling, CUstream stream = nullptr);

  // Bytes of workspace backward() takes for these arguments on `stream`'s GPU (the size of a
  // caller's BackwardArgs::workspace). Plans as backward() would (compiling if not cached).
  Result<std::uint64_t> backward_workspace_size(const BackwardArgs& args, CUstream stream = nullptr);

  // The backward variant backward() would run on this arch (no GPU needed; default tiling).
  Result<PlanReport> plan_backward(const BackwardArgs& args, const std::string& arch) const;

  // Tunes one bucket on the current context's GPU and stores the result (the offline tuner).
  Result<TuneReport> tune(const TuneRequest& request);

  // The variant forward() would run for these arguments on this arch, and why its family (no
  // GPU needed; the default tiling, since tuned results belong to a device).
  Result<PlanReport> plan(const AttentionArgs& args, const std::string& arch) const;

  // Specializes and compiles a variant for a named arch without a GPU.
  Result<CompileReport> compile(const KernelVariant& variant, const std::string& arch) const;

  // Default tiling for a result-changing variant on an arch ("" family: chosen by arch).
  Result<KernelVariant> default_variant(const Semantics& semantics, const std::string& arch) const;

  // The default of AttentionArgs::sm_margin for later calls (0 to 4096), e.g. while a ring's
  // communication runs beside the attention; calls already planned keep theirs.
  Status set_sm_margin(int sm_margin);

  EngineStats stats() const;

  class Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Checks arguments as forward() checks them before anything touches memory (shapes, dtypes,
// strides, alignment, option ranges and combinations), with no Engine, no GPU and no read of
// device data: a caller can refuse bad input at its own boundary, with the same message naming
// the argument and the rule. Ok does not promise that a family serves the call on some GPU
// (Engine::plan() says which does) nor, outside checked mode, that device metadata (prefix sums,
// kv_lens, block tables) is sound.
Status validate_args(const AttentionArgs& args);

// backward()'s argument checks, with no Engine and no GPU: the forward's rules on `forward`,
// lse present, dout, dq, dk and dv against o, q, k and v, outputs overlapping nothing. Features
// no backward kernel serves yet are Engine::plan_backward()'s refusals.
Status validate_backward_args(const BackwardArgs& args);

}  // namespace flashjit
