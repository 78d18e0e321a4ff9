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

struct AttentionArgs {
  TensorView q, k, v;
  TensorView o;                        // written; same dtype as q
  std::optional<LseView> lse;          // written when present
  Mask mask = Mask::none;              // causal aligns to the bottom right when Sq != Sk
  std::optional<float> softmax_scale;  // default 1/sqrt(head_dim_qk); must be finite and > 0
  Fp32Math fp32_math = Fp32Math::exact;
};

struct EngineOptions {
  // Receives progress and diagnostics (compiles, timings). Default: silent unless FLASHJIT_LOG=1.
  std::function<void(const std::string&)> log;
  // Keep compiled kernels on disk across processes (FLASHJIT_DISK_CACHE=0 turns it off).
  bool disk_cache = true;
  // Cache root; default FLASHJIT_CACHE_DIR, else $XDG_CACHE_HOME/flashjit, else ~/.cache/flashjit.
  std::optional<std::string> cache_dir;
};

// What compiling one variant produced.
struct CompileReport {
  KernelVariant variant;
  std::string arch;
  std::size_t cubin_bytes = 0;
  double compile_ms = 0;  // 0 when it came from the disk cache
  bool from_disk = false;
  std::string nvrtc_log;
};

// Counters of the in-memory module cache.
struct EngineStats {
  std::uint64_t launches = 0;
  std::uint64_t compiles = 0;
  std::uint64_t cache_hits = 0;  // in-memory module cache
  std::uint64_t disk_hits = 0;   // kernels loaded from the disk cache instead of compiled
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

  // forward() with an explicit tiling instead of the engine's choice (benchmarks, tuning).
  Status forward_with_tiling(const AttentionArgs& args, const Tiling& tiling, CUstream stream = nullptr);

  // The variant forward() would run for these arguments on this arch (no GPU needed).
  Result<KernelVariant> plan(const AttentionArgs& args, const std::string& arch) const;

  // Specializes and compiles a variant for a named arch without a GPU.
  Result<CompileReport> compile(const KernelVariant& variant, const std::string& arch) const;

  // Default tiling for a result-changing variant on an arch ("" family: chosen by arch).
  Result<KernelVariant> default_variant(const Semantics& semantics, const std::string& arch) const;

  EngineStats stats() const;

  class Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The library's version and the NVRTC version it loads (empty when NVRTC is missing).
std::string version();

}  // namespace flashjit
