// One attention problem on the GPU with random inputs, in a chosen memory layout, plus its
// float64 CPU reference: shared by the demo, the bench tool and the GPU tests. Covers every
// semantic the engine takes: GQA, Dqk != Dv, masks, varlen batches, windows, softcap, ALiBi,
// sinks and the LSE.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "device.hpp"
#include "flashjit/flashjit.hpp"

namespace flashjit::tools {

enum class Layout {
  bshd,       // contiguous [B, S, H, D]
  bhsd,       // contiguous [B, H, S, D]
  padded,     // [B, S, H, D] with padded row strides and a base 4 bytes past alignment
  strided_d,  // head dim with stride 2 (every other element)
  packed_qkv  // q, k, v interleaved in one [B*S, 3*H*D] projection buffer (needs Hq == Hkv, Dqk == Dv)
};
const char* layout_name(Layout);

struct CaseSpec {
  std::int64_t batch = 1, seqlen_q = 128, seqlen_k = 128, heads_q = 4, heads_kv = 4;
  std::int64_t head_dim_qk = 64, head_dim_v = 64;
  DType dtype = DType::f16;
  Mask mask = Mask::none;
  Fp32Math fp32_math = Fp32Math::exact;
  bool lse = false;
  Layout layout = Layout::bshd;
  std::uint64_t seed = 1;
  std::optional<float> softmax_scale;
  // Varlen: the query and key lengths of each sequence (same count; batch, seqlen_q and
  // seqlen_k are then ignored); the tensors are packed [1, sum, H, D].
  std::vector<std::int64_t> varlen_q, varlen_k;
  std::optional<Window> window;
  std::optional<float> softcap;
  bool alibi = false;            // random slopes in (0, 1] per query head
  bool alibi_per_batch = false;  // ... and per sequence ([batch, heads_q] rows)
  bool sinks = false;            // random sink logits per query head
  float sink_mean = 0;           // sinks are drawn around this (large ones dominate rows)
  // Keys each sequence uses of its cache (kv_lens; the cache holds seqlen_k, or varlen_k[b]).
  std::vector<std::int64_t> kv_lens;
  // > 0: k and v live in page pools of this many keys a page, reached through a shuffled block
  // table (needs kv_lens; layout bshd).
  std::int64_t page_size = 0;
  // Set: every K/V slot no sequence owns holds this value (NaN, Inf, ...), as a serving
  // framework's uninitialized cache does: slots past kv_lens, a last page's spare slots, pages no
  // table row uses, block-table entries past a sequence's pages (out of range), and with varlen
  // rows past the last sequence in every tensor.
  std::optional<float> unowned_fill;

  bool varlen() const { return !varlen_q.empty(); }
  bool paged() const { return page_size > 0; }
  std::int64_t sequences() const { return varlen() ? std::int64_t(varlen_q.size()) : batch; }
  std::string describe() const;
};

struct CheckResult {
  double rel_l2 = 0;           // ||out - ref|| / ||ref||
  double max_abs = 0;
  std::int64_t unwritten = 0;  // output elements still holding the NaN poison (or any NaN/inf)
  double lse_max_abs = 0;      // over rows whose reference LSE is finite
  std::int64_t lse_bad = 0;    // poisoned / wrong-infinity LSE entries
};

// Forward FLOPs as anchors.md counts them: 4 B Hq Sq Sk D, halved for causal when Sq == Sk
// (varlen: summed over the sequences).
double attention_flops(const CaseSpec& s);

class AttentionCase {
 public:
  // Random normal inputs (never zeros), quantized to the dtype, uploaded in the spec's layout.
  // `keep_host` false skips the host copies and reference data (for timing huge shapes).
  static Result<AttentionCase> create(const GpuContext& gpu, const CaseSpec& spec, bool keep_host = true);

  const CaseSpec& spec() const { return spec_; }
  const AttentionArgs& args() const { return args_; }
  // Fills o (and lse) with 0xFF bytes: NaN in every float format, so unwritten elements show.
  Status poison() const;
  // Draws new random q, k and v (same shapes and buffers) and uploads them.
  Status refill(std::uint64_t seed);
  // New per-sequence key counts in the same device slot (what a decode step does between calls).
  Status set_kv_lens(const std::vector<std::int64_t>& lens);
  // Downloads o (and lse) and compares with the float64 reference (multi-threaded).
  Result<CheckResult> check() const;

 private:
  Status fill_inputs(std::uint64_t seed);
  // Writes spec_.unowned_fill into every K/V slot of `staging` no sequence owns.
  void fill_unowned(std::vector<unsigned char>& staging) const;
  // Keys sequence b's cache holds, and how many of them it uses (kv_lens, clamped).
  std::int64_t key_capacity(std::int64_t b) const;
  std::int64_t used_keys(std::int64_t b) const;

  CaseSpec spec_;
  AttentionArgs args_;
  const GpuContext* gpu_ = nullptr;
  DeviceBuffer qkv_, out_, lse_buf_, extras_;
  std::vector<float> q_, k_, v_;  // quantized values in logical [TB, TS, H, D] tensor order
  std::vector<float> alibi_, sinks_;
  std::vector<std::int64_t> cu_q_, cu_k_;  // varlen prefix sums
  std::vector<std::int32_t> table_;        // paged: block table [sequences, table_stride_]
  std::int64_t table_stride_ = 0, max_pages_ = 0, pool_pages_ = 0;
  std::size_t kv_lens_offset_ = 0;  // where kv_lens sit in extras_
  std::int64_t tb_ = 0, tsq_ = 0, tsk_ = 0;  // the tensors' batch and seq dims
  std::int64_t place_[4][5] = {};  // per q, k, v, o: strides[4], offset in elements
  std::size_t out_offset_bytes_ = 0;
  bool keep_host_ = true;
};

}  // namespace flashjit::tools
