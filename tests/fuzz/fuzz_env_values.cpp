// The parsers of short values people type into environment variables and flags:
// FLASHJIT_CACHE_MAX_BYTES / --max-bytes (byte sizes), FLASHJIT_TUNE (tune modes), arch strings
// (--arch, the C ABI's arch, bundle records), tilings, dtypes and masks, and printable() itself.
// The first byte picks the parser, the rest is the value.
//
// Checks: no crash or sanitizer report; every refusal's message is safe to print; and each
// parser agrees with a simple restatement of its rule (plain digits are their own value, an
// accepted tiling spells itself, the two arch parsers accept the same strings, ...).
#include <cstdint>
#include <string>

#include "autotune/tune_mode.hpp"
#include "cache/byte_size.hpp"
#include "cache/cache_dir.hpp"
#include "flashjit/flashjit.hpp"
#include "base/printable.hpp"
#include "flashjit/variant.hpp"
#include "fuzz_support.hpp"
#include "variant_spec.hpp"

using namespace flashjit;

namespace {

enum Parser : std::uint8_t { byte_size, tune_mode, arch, tiling, dtype_mask, printable_text, kParsers };

template <class R>
void check_refusal(const R& r, const char* what) {
  if (!r.ok()) fuzz::check_printable(r.error().to_string(), what);
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

void fuzz_byte_size(const std::string& text) {
  auto r = cache::parse_byte_size(text, "FLASHJIT_CACHE_MAX_BYTES");
  check_refusal(r, "byte size message has raw bytes");
  if (all_digits(text) && text.size() < 20) {  // below 10^19: fits in uint64 exactly
    fuzz::check(r.ok() && r.value() == std::stoull(text), "plain digits are not their own byte count", text);
  }
}

void fuzz_tune_mode(const std::string& text) {
  auto r = autotune::parse_tune_mode(text);
  check_refusal(r, "tune mode message has raw bytes");
  if (r.ok()) fuzz::check(autotune::parse_tune_mode(autotune::tune_mode_name(r.value())).value() == r.value(), "name does not parse back");
}

void fuzz_arch(const std::string& text) {
  auto r = Arch::parse(text);
  check_refusal(r, "arch message has raw bytes");
  const Status cache_view = cache::validate_arch(text);
  check_refusal(cache_view, "cache arch message has raw bytes");
  fuzz::check(r.ok() == cache_view.ok(), "Arch::parse and cache::validate_arch disagree", text);
  if (r.ok()) fuzz::check(Arch::parse(r->name()).value() == r.value(), "arch name does not parse back", text);
}

// Every refusal quotes the text as given (issue 21 G6), and a tiling with no family named is
// the one family, forward or backward, whose tiling it is.
void fuzz_tiling(const std::string& text) {
  const std::string quoted = "'" + printable(text) + "'";
  int accepted_by = 0;
  for (Pass pass : {Pass::forward, Pass::backward})
    for (const std::string& family : kernel_family_names(pass)) {
      auto r = parse_tiling(family, text);
      check_refusal(r, "tiling message has raw bytes");
      if (r.ok()) fuzz::check(r->name() == text, "accepted a tiling that is not its own name", text);
      if (!r.ok()) fuzz::check(r.error().message().find(quoted) != std::string::npos, "tiling refusal misquotes the text", text);
      accepted_by += r.ok();
    }
  auto any = parse_tiling("", text);
  check_refusal(any, "tiling message has raw bytes");
  fuzz::check(accepted_by <= 1, "two families accept one tiling", text);
  fuzz::check(any.ok() == (accepted_by == 1), "parse_tiling without a family disagrees with the families", text);
  if (!any.ok()) fuzz::check(any.error().message().find(quoted) != std::string::npos, "tiling refusal misquotes the text", text);
}

void fuzz_dtype_mask(const std::string& text) {
  auto d = tools::parse_dtype(text, "--dtype");
  check_refusal(d, "dtype message has raw bytes");
  fuzz::check(d.ok() == (text == "f16" || text == "bf16" || text == "f32" || text == "tf32"), "dtype rule", text);
  auto m = tools::parse_mask(text, "--mask");
  check_refusal(m, "mask message has raw bytes");
  fuzz::check(m.ok() == (text == "none" || text == "causal"), "mask rule", text);
}

void fuzz_printable(const std::string& text) {
  const std::size_t cap = text.empty() ? 0 : static_cast<unsigned char>(text[0]);
  const std::string out = printable(text, cap);
  fuzz::check_printable(out, "printable() let raw bytes through");
  // Each shown input byte becomes at most 4 output bytes ("\xNN"), plus the size suffix.
  fuzz::check(out.size() <= 4 * cap + 32, "printable() output is not bounded by its cap", out);
  if (text.size() <= cap) fuzz::check(out.find("... (") == std::string::npos || text.find("... (") != std::string::npos,
                                      "printable() cut text that fits", out);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % kParsers) {
    case byte_size: fuzz_byte_size(text); break;
    case tune_mode: fuzz_tune_mode(text); break;
    case arch: fuzz_arch(text); break;
    case tiling: fuzz_tiling(text); break;
    case dtype_mask: fuzz_dtype_mask(text); break;
    case printable_text: fuzz_printable(text); break;
  }
  return 0;
}
