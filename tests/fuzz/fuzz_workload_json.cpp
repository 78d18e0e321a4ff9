// tune --workload: arbitrary text through the file parser and workload_from_json. Checks: no
// crash or sanitizer report (the 200,000-deep reproducer of issue 6, defect 3 is in the corpus);
// every accepted job has sizes the engine accepts and a buildable variant; every refusal's
// message is safe to print.
#include "json_fuzz_support.hpp"
#include "workload.hpp"

using namespace flashjit;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto doc = fuzz::parse_checked(fuzz::as_text(data, size));
  if (!doc.ok()) return 0;
  auto jobs = tools::workload_from_json(doc.value(), "fuzz.json");
  if (!jobs.ok()) {
    fuzz::check_printable(jobs.error().message(), "workload error message has raw bytes");
    return 0;
  }
  for (const auto& j : jobs.value()) {
    fuzz::check(j.semantics.check().ok(), "accepted a variant no kernel can be built for", j.semantics.name());
    fuzz::check(j.seqlen_q >= 1 && j.seqlen_q <= kMaxSeqLen, "seqlen_q out of range");
    fuzz::check(j.seqlen_k >= 1 && j.seqlen_k <= kMaxSeqLen, "seqlen_k out of range");
    fuzz::check(j.batch_x_heads >= 1 && j.batch_x_heads <= tools::kMaxBatchXHeads, "batch_x_heads out of range");
  }
  return 0;
}
