#include "workload.hpp"

#include "base/printable.hpp"
#include "json_input.hpp"
#include "variant_spec.hpp"

namespace flashjit::tools {

Result<std::vector<TuneJob>> workload_from_json(const nlohmann::json& doc, const std::string& source) {
  if (!doc.is_array()) return Error(Code::invalid_argument, source + " must hold a JSON list of shape objects");
  std::vector<TuneJob> jobs;
  for (std::size_t i = 0; i < doc.size(); ++i) {
    const nlohmann::json& v = doc[i];
    const std::string where = source + "[" + std::to_string(i) + "]";
    if (!v.is_object()) return Error(Code::invalid_argument, where + " must be an object");
    auto size = [&](const char* key, std::int64_t fallback, std::int64_t max) -> Result<std::int64_t> {
      if (!v.contains(key)) return fallback;
      return json_integer(v[key], where + "." + key, 1, max);
    };
    if (!v.contains("seqlen_q")) return Error(Code::invalid_argument, where + ".seqlen_q is required");
    auto sq = size("seqlen_q", 0, kMaxSeqLen);
    if (!sq.ok()) return std::move(sq).error();
    auto sk = size("seqlen_k", sq.value(), kMaxSeqLen);
    if (!sk.ok()) return std::move(sk).error();
    auto bh = size("batch_x_heads", kDefaultBatchXHeads, kMaxBatchXHeads);
    if (!bh.ok()) return std::move(bh).error();
    auto spec = variant_from_json(v, where, {"seqlen_q", "seqlen_k", "batch_x_heads"});
    if (!spec.ok()) return std::move(spec).error();
    jobs.push_back({spec->semantics, sq.value(), sk.value(), bh.value(), where});
  }
  return jobs;
}

Result<std::vector<TuneJob>> workload_from_file(const std::string& path) {
  auto doc = read_json_file(path, "--workload");
  if (!doc.ok()) return std::move(doc).error();
  return workload_from_json(doc.value(), printable(path));
}

}  // namespace flashjit::tools
