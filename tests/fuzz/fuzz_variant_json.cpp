// warmup --variants: arbitrary text through the file parser and variants_from_json. Checks: no
// crash or sanitizer report; every accepted variant is one a kernel can be built for (head dims
// in range, a valid vec); every refusal's message is safe to print.
#include "json_fuzz_support.hpp"
#include "variant_spec.hpp"

using namespace flashjit;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto doc = fuzz::parse_checked(fuzz::as_text(data, size));
  if (!doc.ok()) return 0;
  auto specs = tools::variants_from_json(doc.value(), "fuzz.json");
  if (!specs.ok()) {
    fuzz::check_printable(specs.error().message(), "variant error message has raw bytes");
    return 0;
  }
  for (const auto& s : specs.value()) {
    fuzz::check(s.semantics.check().ok(), "accepted a variant no kernel can be built for", s.semantics.name());
    fuzz::check(s.semantics.head_dim_qk >= 1 && s.semantics.head_dim_qk <= kMaxHeadDim, "head_dim out of range");
    fuzz::check(s.semantics.head_dim_v >= 1 && s.semantics.head_dim_v <= kMaxHeadDim, "head_dim_v out of range");
  }
  return 0;
}
