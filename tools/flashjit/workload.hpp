// What `flashjit tune` is asked to time: variants and shapes, from flags or a workload file.
// A workload file is a JSON list of objects, each a variant (variant_spec.hpp's fields) plus
// its shape: seqlen_q (required), seqlen_k (default seqlen_q), batch_x_heads (default 64).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "base/problem_shape.hpp"
#include "flashjit/catalog.hpp"
#include "flashjit/status.hpp"
#include "flashjit/variant.hpp"

namespace flashjit::tools {

// batch * heads of one problem: the engine accepts up to 65535 of each.
inline constexpr std::int64_t kMaxBatchXHeads = kMaxBatch * kMaxHeads;
// When neither the flags nor the workload entry say: a typical prefill batch * heads.
inline constexpr std::int64_t kDefaultBatchXHeads = 64;

struct TuneJob {
  Semantics semantics;
  std::int64_t seqlen_q = 0, seqlen_k = 0, batch_x_heads = kDefaultBatchXHeads;
  std::string origin;  // for messages: "--dtype/--head-dim", "w.json[3]"
  Pass pass = Pass::forward;  // which call is timed: the forward, or its backward
};

// The jobs of a parsed workload; `source` names it in errors.
Result<std::vector<TuneJob>> workload_from_json(const nlohmann::json& doc, const std::string& source);
// tune --workload: the file is read and its nesting bounded before parsing (json_input.hpp).
Result<std::vector<TuneJob>> workload_from_file(const std::string& path);

}  // namespace flashjit::tools
