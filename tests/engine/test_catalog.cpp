// The public catalog (flashjit/catalog.hpp) says what the family registry, the disk cache's key
// and the versions say, with errors that name the family and the reason: what the tools build on.
#include <doctest/doctest.h>

#include <algorithm>

#include "flashjit/catalog.hpp"
#include "flashjit/flashjit.hpp"
#include "kernel_binaries.hpp"
#include "kernel_family.hpp"
#include "template_store.hpp"

using namespace flashjit;

namespace {

bool has(const std::string& s, const char* text) { return s.find(text) != std::string::npos; }

const Arch sm75 = Arch::parse("sm_75").value();
const Arch sm80 = Arch::parse("sm_80").value();
const Arch sm90a = Arch::parse("sm_90a").value();

// q, k, v, o as contiguous [2, 1024, heads, 128] f16 views at fake, aligned device addresses
// (nothing reads them: validation needs no GPU).
AttentionArgs prefill_args(std::int64_t heads_q, std::int64_t heads_kv) {
  AttentionArgs a;
  TensorView* views[] = {&a.q, &a.k, &a.v, &a.o};
  for (std::uintptr_t i = 0; i < 4; ++i) {
    const void* data = reinterpret_cast<const void*>(0x7f0000000000ull + ((i + 1) << 32));
    const bool kv = views[i] == &a.k || views[i] == &a.v;
    *views[i] = TensorView::bshd(data, DType::f16, 2, 1024, kv ? heads_kv : heads_q, 128);
  }
  return a;
}

}  // namespace

TEST_CASE("families_serving lists the registry's families for (arch, semantics) in priority order") {
  const Semantics s;
  auto names = families_serving(sm90a, s);
  REQUIRE(names.ok());
  std::vector<std::string> expected;
  for (const KernelFamily* f : families_for(sm90a, s)) expected.push_back(f->name());
  CHECK(names.value() == expected);
  const auto at = [&](const char* name) { return std::find(names->begin(), names->end(), name) - names->begin(); };
  CHECK(at("fa3_sm90") < at("fa2_sm80"));
  CHECK(at("fa2_sm80") < std::ptrdiff_t(names->size()));
  CHECK(kernel_family_names().size() == kernel_families().size());

  auto none = families_serving(sm75, s);
  REQUIRE(!none.ok());
  CHECK(none.error().code() == Code::unsupported);
  CHECK(has(none.error().message(), "fa2_sm80 refused: needs sm_80 or newer"));

  Semantics bad;
  bad.head_dim_qk = 0;
  CHECK(families_serving(sm80, bad).error().code() == Code::invalid_argument);
}

TEST_CASE("default and candidate tilings are the family's own, or an error naming why not") {
  Semantics s;
  s.head_dim_qk = s.head_dim_v = 64;
  const auto names = families_serving(sm90a, s);
  REQUIRE(names.ok());
  for (const std::string& name : names.value()) {
    CAPTURE(name);
    const KernelFamily* f = find_family(name);
    CHECK(default_tilings(name, sm90a, s).value() == f->default_tilings(sm90a, s));
    CHECK(candidate_tilings(name, sm90a, s).value() == f->candidate_tilings(sm90a, s));
  }
  auto unknown = candidate_tilings("fa9", sm80, s);
  REQUIRE(!unknown.ok());
  CHECK(has(unknown.error().message(), "unknown kernel family 'fa9'"));
  auto refused = default_tilings("fa3_sm90", sm80, s);
  REQUIRE(!refused.ok());
  CHECK(refused.error().code() == Code::unsupported);
  CHECK(has(refused.error().message(), "fa3_sm90 cannot build"));
  CHECK(has(refused.error().message(), "sm_80"));
}

TEST_CASE("the backward's families and tilings are listed like the forward's, with its own refusals") {
  Semantics s;
  s.head_dim_qk = s.head_dim_v = 64;
  CHECK(kernel_family_names(Pass::backward) == std::vector<std::string>{"bwd_sm90", "bwd_sm80"});
  for (const std::string& name : kernel_family_names(Pass::forward)) CHECK(family_pass(name).value() == Pass::forward);
  CHECK(family_pass("bwd_sm80").value() == Pass::backward);
  CHECK(has(family_pass("fa9").error().message(), "unknown kernel family 'fa9'"));
  CHECK(std::string(pass_name(Pass::backward)) == "backward");

  for (const Arch& arch : {sm80, sm90a}) {
    CAPTURE(arch.name());
    auto names = families_serving(arch, s, Pass::backward);
    REQUIRE(names.ok());
    // On sm_90a bwd_sm90 serves every shape of these semantics: bwd_sm80 would never run them.
    CHECK(names.value() == std::vector<std::string>{arch == sm80 ? "bwd_sm80" : "bwd_sm90"});
    const KernelFamily* f = find_family("bwd_sm80");
    CHECK(default_tilings("bwd_sm80", arch, s).value() == f->default_tilings(arch, s));
    CHECK(candidate_tilings("bwd_sm80", arch, s).value() == f->candidate_tilings(arch, s));
    // The forward's list is unchanged: no backward family in it.
    const auto forward = families_serving(arch, s);
    for (const std::string& name : forward.value()) CHECK(name != "bwd_sm80");
  }
  // A tiling names its family by its letters, backward ones too.
  const Tiling wide = default_tilings("bwd_sm80", sm80, s).value().front();
  CHECK(parse_tiling("", wide.name()).value() == wide);

  Semantics f32 = s;
  f32.dtype = DType::f32;
  f32.vec = 4;
  CHECK(families_serving(sm80, f32, Pass::backward).value() == std::vector<std::string>{"bwd_sm80"});
  Semantics paged = s;
  paged.paged = true;
  auto refused = families_serving(sm80, paged, Pass::backward);
  REQUIRE(!refused.ok());
  CHECK(refused.error().code() == Code::unsupported);
  CHECK(has(refused.error().message(), "no backward kernel family serves"));
  CHECK(has(refused.error().message(), "bwd_sm80 refused: paged"));
  CHECK(families_serving(sm75, s, Pass::backward).error().code() == Code::unsupported);
}

TEST_CASE("the catalog's backward variant is the one Engine::plan_backward() plans") {
  BackwardArgs b;
  b.forward = prefill_args(8, 2);
  b.forward.lse = LseView::contiguous(reinterpret_cast<float*>(0x7f0000000000ull + (6ull << 32)), 2, 8, 1024);
  b.dout = b.forward.o;
  b.dout.data = reinterpret_cast<const void*>(0x7f0000000000ull + (7ull << 32));
  TensorView* grads[] = {&b.dq, &b.dk, &b.dv};
  const TensorView* of[] = {&b.forward.q, &b.forward.k, &b.forward.v};
  for (std::uintptr_t i = 0; i < 3; ++i) {
    *grads[i] = *of[i];
    grads[i]->data = reinterpret_cast<const void*>(0x7f0000000000ull + ((8 + i) << 32));
  }
  for (const Arch& arch : {sm80, sm90a}) {
    CAPTURE(arch.name());
    auto engine = Engine::create().value();
    auto planned = engine->plan_backward(b, arch.name());
    REQUIRE(planned.ok());
    const Semantics s = planned->variant.semantics;
    CHECK(!s.write_lse);  // the backward reads the LSE
    auto forward = engine->plan(b.forward, arch.name());
    REQUIRE(forward.ok());
    CHECK(forward->variant.semantics.write_lse);
    CHECK(backward_semantics(forward->variant.semantics) == s);
    CHECK(families_serving(arch, s, Pass::backward).value().front() == planned->variant.family);
    CHECK(default_tilings(planned->variant.family, arch, s).value().front() == planned->variant.tiling);
    CHECK(check_buildable(planned->variant, arch).ok());
  }
}

TEST_CASE("family_variant plans a call on the family the caller names, with its default tiling for the shape") {
  const AttentionArgs args = prefill_args(8, 2);
  auto planned = Engine::create().value()->plan(args, "sm_90a");
  REQUIRE(planned.ok());
  auto same = family_variant(planned->variant.family, args, sm90a);
  REQUIRE(same.ok());
  CHECK(same.value() == planned->variant);

  auto fa2 = family_variant("fa2_sm80", args, sm90a);
  REQUIRE(fa2.ok());
  CHECK(fa2->family == "fa2_sm80");
  CHECK(fa2->semantics == planned->variant.semantics);
  CHECK(check_buildable(fa2.value(), sm90a).ok());

  CHECK(family_variant("fa3_sm90", args, sm80).error().code() == Code::unsupported);
  CHECK(has(family_variant("fa9", args, sm80).error().message(), "unknown kernel family 'fa9'"));
  const AttentionArgs bad = prefill_args(12, 5);
  auto refused = family_variant("fa2_sm80", bad, sm80);
  REQUIRE(!refused.ok());
  CHECK(refused.error().code() == Code::invalid_argument);
  CHECK(refused.error().message() == validate_args(bad).error().message());
}

TEST_CASE("validate_args accepts what forward() accepts and names the rule it refuses") {
  CHECK(validate_args(prefill_args(8, 2)).ok());
  auto gqa = validate_args(prefill_args(12, 5));
  REQUIRE(!gqa.ok());
  CHECK(has(gqa.error().message(), "must be a multiple of"));
  AttentionArgs null_q = prefill_args(8, 8);
  null_q.q.data = nullptr;
  CHECK(validate_args(null_q).error().code() == Code::invalid_argument);
}

TEST_CASE("check_buildable is the engine's own check of a variant for an arch") {
  Semantics s;
  const KernelVariant fits{"fa2_sm80", s, default_tilings("fa2_sm80", sm80, s).value().front()};
  CHECK(check_buildable(fits, sm80).ok());
  KernelVariant huge = fits;
  huge.tiling = parse_tiling("fa2_sm80", "m128n256w4s4").value();
  auto st = check_buildable(huge, sm80);
  REQUIRE(!st.ok());
  CHECK(st.error().message() == check_variant(huge, sm80).error().message());
  CHECK(has(st.error().message(), "shared memory"));
}

TEST_CASE("the disk cache key and the versions are what the engine files kernels under") {
  Semantics s;
  const KernelVariant v{"fa2_sm80", s, default_tilings("fa2_sm80", sm80, s).value().front()};
  auto nvrtc = nvrtc_info();
  auto key = disk_cache_key(v, sm80);
  REQUIRE(key.ok() == nvrtc.ok());
  if (key.ok()) {
    const auto internal = KernelBinaries::cache_key(v, sm80).value();
    CHECK(key->arch == internal.arch);
    CHECK(key->name == internal.name);
    CHECK(key->content_hash == internal.content_hash);
    CHECK(key->name == v.code_name());
    CHECK(!nvrtc->version.empty());
    CHECK(has(version(), ("(NVRTC " + nvrtc->version + ")").c_str()));
  } else {
    CHECK(key.error().code() == Code::library_missing);
  }
  CHECK(version().rfind("flashjit " + library_version(), 0) == 0);
  CHECK(library_version().find_first_not_of("0123456789.") == std::string::npos);  // "0.1.0"
  CHECK(engine_format_version() == kEngineFormatVersion);
  CHECK(templates_hash() == TemplateStore::instance().content_hash());
  CHECK(templates_hash().size() == 32);
}
