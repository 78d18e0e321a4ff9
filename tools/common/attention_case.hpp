// One attention problem on the GPU with random inputs, in a chosen memory layout, plus its
// float64 CPU reference: shared by the demo, the bench tool and the GPU tests.
#pragma once

#include <cstdint>
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
  std::string describe() const;
};

struct CheckResult {
  double rel_l2 = 0;           // ||out - ref|| / ||ref||
  double max_abs = 0;
  std::int64_t unwritten = 0;  // output elements still holding the NaN poison (or any NaN/inf)
  double lse_max_abs = 0;      // over rows that saw keys
  std::int64_t lse_bad = 0;    // poisoned / wrong-infinity LSE entries
};

// Forward FLOPs as anchors.md counts them: 4 B Hq Sq Sk D, halved for causal when Sq == Sk.
double attention_flops(const CaseSpec& s);

class AttentionCase {
 public:
  // Random normal inputs (never zeros), quantized to the dtype, uploaded in the spec's layout.
  // `upload` false skips the host copies and reference data (for timing huge shapes).
  static Result<AttentionCase> create(const GpuContext& gpu, const CaseSpec& spec, bool keep_host = true);

  const CaseSpec& spec() const { return spec_; }
  const AttentionArgs& args() const { return args_; }
  // Fills o (and lse) with 0xFF bytes: NaN in every float format, so unwritten elements show.
  Status poison() const;
  // Downloads o (and lse) and compares with the float64 reference (multi-threaded).
  Result<CheckResult> check() const;

 private:
  CaseSpec spec_;
  AttentionArgs args_;
  const GpuContext* gpu_ = nullptr;
  DeviceBuffer qkv_, out_, lse_buf_;
  std::vector<float> q_, k_, v_;  // quantized values in logical [B, S, H, D] order
  std::size_t out_offset_bytes_ = 0;
  bool keep_host_ = true;
};

// Rows of the float64 reference for one (batch, head): out [Sq, Dv], lse [Sq].
void reference_head(const CaseSpec& s, const float* q, const float* k, const float* v, std::int64_t b,
                    std::int64_t h, double* out, double* lse);

}  // namespace flashjit::tools
