// The family registry and fa2_sm80's rules: choice by priority with reasons, knobs, tile rules,
// shared-memory pruning, the rendered source, the embedded templates.
#include <doctest/doctest.h>

#include "flashjit/flashjit.hpp"
#include "kernel_family.hpp"
#include "kernel_source.hpp"
#include "template_store.hpp"

using namespace flashjit;

namespace {
bool has(const std::string& s, const char* text) { return s.find(text) != std::string::npos; }
Tiling fa2(std::initializer_list<int> v) { return Tiling(find_family("fa2_sm80")->knobs(), v); }
}  // namespace

TEST_CASE("families are registered in priority order, each with a knob table of its own name") {
  const auto& all = kernel_families();
  REQUIRE(!all.empty());
  for (std::size_t i = 1; i < all.size(); ++i) CHECK(all[i - 1]->priority() <= all[i]->priority());
  for (const auto* f : all) {
    CHECK(std::string(f->knobs().family) == f->name());
    CHECK(family_knobs(f->name()) == &f->knobs());
    CHECK(f->knobs().knobs.size() <= std::size_t(Tiling::kMaxKnobs));
  }
  CHECK(family_knobs("no_such_family") == nullptr);
}

TEST_CASE("the family choice says which family runs and why the others did not") {
  const Semantics s;
  const ProblemShape shape{2, 4096, 4096, 16, 16};
  auto c = choose_family(Arch::parse("sm_90a").value(), s, &shape);
  REQUIRE(c.ok());
  CHECK(c->family == pick_family(Arch::parse("sm_90a").value(), s, &shape));
  CHECK(has(c->why, c->family->name()));
  CHECK(has(c->why, "priority"));
  auto none = choose_family(Arch::parse("sm_75").value(), s, &shape);
  REQUIRE(!none.ok());
  CHECK(has(none.error().message(), "fa2_sm80 refused: needs sm_80 or newer"));
  CHECK(families_for(Arch::parse("sm_75").value(), s).empty());
}

TEST_CASE("rendering puts every semantics field and every knob into the source") {
  KernelVariant v{"fa2_sm80", {}, fa2({64, 32, 4, 3})};
  v.semantics.dtype = DType::bf16;
  v.semantics.head_dim_qk = 200;
  v.semantics.head_dim_v = 72;
  v.semantics.window = true;
  const std::string src = render_source(*find_family("fa2_sm80"), v);
  for (const char* want : {"kDtype = 1;  // bf16", "kHeadDimQK = 200", "kHeadDimV = 72", "kMask = 0;  // none",
                           "kWindow = true", "kSinks = false", "kVarlen = false", "kBlockM = 64", "kBlockN = 32",
                           "kWarps = 4", "kStages = 3", "#include \"fa2_sm80/forward.cu\""})
    CHECK_MESSAGE(has(src, want), want);
  CHECK(has(src, v.name().c_str()));
}

TEST_CASE("templates are embedded and hashed") {
  const auto& store = TemplateStore::instance();
  CHECK(store.find("fa2_sm80/forward.cu") != nullptr);
  CHECK(store.find("common/ptx.cuh") != nullptr);
  CHECK(store.find("common/attention_params.cuh") != nullptr);
  CHECK(store.find("no/such.cuh") == nullptr);
  CHECK(store.content_hash().size() == 32);
}

TEST_CASE("fa2_sm80 tiling rules and shared-memory pruning") {
  const KernelFamily* f = find_family("fa2_sm80");
  REQUIRE(f);
  Semantics s;
  CHECK(f->check_tiling(s, fa2({128, 64, 4, 2})).ok());
  CHECK_FALSE(f->check_tiling(s, fa2({128, 64, 16, 2})).ok());  // too many warps
  CHECK_FALSE(f->check_tiling(s, fa2({48, 64, 4, 2})).ok());    // 48 rows over 4 warps
  CHECK_FALSE(f->check_tiling(s, fa2({128, 40, 4, 2})).ok());   // BLOCK_N not a multiple of 16
  CHECK_FALSE(f->check_tiling(s, fa2({128, 64, 4, 1})).ok());   // needs a second stage
  const KnobTable foreign{"other", f->knobs().knobs};
  CHECK_FALSE(f->check_tiling(s, Tiling(foreign, {128, 64, 4, 2})).ok());
  s.head_dim_qk = s.head_dim_v = 256;
  const Arch sm86 = Arch::parse("sm_86").value();
  const Arch sm90 = Arch::parse("sm_90a").value();
  for (const Tiling& t : f->candidate_tilings(sm86, s))
    CHECK(variant_smem_bytes({f->name(), s, t}) <= arch_smem_limit(sm86));
  CHECK(f->candidate_tilings(sm90, s).size() > f->candidate_tilings(sm86, s).size());
  for (const Arch& a : {sm86, sm90}) {
    const Tiling t = f->default_tiling(a, s, nullptr);
    CHECK(f->check_tiling(s, t).ok());
    CHECK(check_variant({f->name(), s, t}, a).ok());
  }
  CHECK(has(check_variant({f->name(), s, fa2({256, 256, 8, 4})}, sm86).error().message(), "shared memory"));
  CHECK(has(check_variant({"nope", s, fa2({128, 64, 4, 2})}, sm86).error().message(), "unknown kernel family"));
}

TEST_CASE("tile_shape gives each family's score block from its own knobs (issue 21 G11)") {
  // fa3_sm90 has no block_m: its rows are 64 per consumer warpgroup (flashjit-bench read
  // block_m by name and indexed the tiling at -1 there).
  CHECK(family_knobs("fa3_sm90")->index("block_m") == -1);
  const auto shape = [](const char* family, const char* text) { return tile_shape(parse_tiling(family, text).value()); };
  auto fa2 = shape("fa2_sm80", "m128n64w4s2");
  REQUIRE(fa2.ok());
  CHECK(fa2->rows == 128);
  CHECK(fa2->keys == 64);
  auto fa3 = shape("fa3_sm90", "g2n176s2p0c1");
  REQUIRE(fa3.ok());
  CHECK(fa3->rows == 128);
  CHECK(fa3->keys == 176);
  auto decode = shape("decode_sm80", "r2w8k16s2p0");  // 2 row tiles of 16; 8 warps x 16 keys
  REQUIRE(decode.ok());
  CHECK(decode->rows == 32);
  CHECK(decode->keys == 128);
  for (const auto* f : kernel_families()) {
    CAPTURE(f->name());
    const Tiling t = f->default_tiling(Arch::parse("sm_90a").value(), Semantics{}, nullptr);
    CHECK(tile_shape(t)->rows > 0);
    CHECK(tile_shape(t)->keys > 0);
  }
  auto none = tile_shape(Tiling{});
  REQUIRE(!none.ok());
  CHECK(has(none.error().message(), "no kernel family"));
}

TEST_CASE("parse_tiling without a family takes the family whose knobs the text spells (issue 21 G6)") {
  // Each family's tilings, of either pass, are told apart by their letters alone.
  std::vector<const KernelFamily*> families = kernel_families(Pass::forward);
  for (const auto* f : kernel_families(Pass::backward)) families.push_back(f);
  for (const auto* a : families)
    for (const auto* b : families)
      if (a != b) CHECK(a->knobs().form() != b->knobs().form());
  for (const auto* f : families) {
    const Tiling t = f->default_tiling(Arch::parse("sm_90a").value(), Semantics{}, nullptr);
    auto back = parse_tiling("", t.name());
    REQUIRE(back.ok());
    CHECK(back.value() == t);
  }
  auto big = parse_tiling("", "m4294967424n64w4s2");
  REQUIRE(!big.ok());
  CHECK(has(big.error().message(), "a fa2_sm80 tiling looks like"));
  CHECK(has(big.error().message(), "block_m 4294967424 has more than 6 digits"));
  auto none = parse_tiling("", "q1");
  REQUIRE(!none.ok());
  CHECK(has(none.error().message(), "'q1' is not a tiling of any family"));
  for (const auto* f : families) CHECK(has(none.error().message(), f->knobs().form().c_str()));
  CHECK(has(parse_tiling("fa9", "m1").error().message(), "unknown kernel family 'fa9'"));
}

namespace {
Semantics square(DType dt, int d) {
  Semantics s;
  s.dtype = dt;
  s.head_dim_qk = s.head_dim_v = d;
  for (s.vec = dt == DType::f32 ? 4 : 8; d % s.vec;) s.vec /= 2;  // the widest access d allows
  return s;
}
}  // namespace

// README promises head dims 1 to 256 in every dtype. fp32 at 193-256 (fa2_sm80) and 161-256
// (decode_sm80) needed more than the 99 KiB a block has on sm_86 and sm_89, and the tiling the
// engine chose itself was refused as the caller's.
TEST_CASE("each family's default tiling fits every arch it serves, head dims 1-256, every dtype (issue 21 G5)") {
  auto engine = Engine::create().value();
  const ProblemShape prefill{2, 4096, 4096, 16, 16}, decode{2, 1, 4096, 16, 16};
  for (const char* name : {"sm_80", "sm_86", "sm_89", "sm_90a"}) {
    const Arch arch = Arch::parse(name).value();
    for (DType dt : {DType::f16, DType::bf16, DType::f32})
      for (int d = 1; d <= 256; ++d) {
        const Semantics s = square(dt, d);
        INFO(name << " " << s.name());
        for (const KernelFamily* f : kernel_families()) {
          if (f->refusal(arch, s, nullptr)) continue;
          for (const Tiling& t : f->default_tilings(arch, s)) {
            const Status st = check_variant({f->name(), s, t}, arch);
            CHECK_MESSAGE(st.ok(), t.name() << ": " << (st.ok() ? "" : st.error().message()));
          }
        }
        // The engine has a family for decode and for prefill shapes, and ahead of time.
        for (const ProblemShape* shape : {&prefill, &decode})
          CHECK(pick_family(arch, s, shape) != nullptr);
        auto v = engine->default_variant(s, name);
        REQUIRE_MESSAGE(v.ok(), v.error().message());
        CHECK(variant_smem_bytes(v.value()) <= arch_smem_limit(arch));
      }
  }
}

TEST_CASE("a family none of whose tilings fits refuses the arch, saying by how much (issue 21 G5)") {
  const KernelFamily* decode = find_family("decode_sm80");
  REQUIRE(decode);
  const Arch sm86 = Arch::parse("sm_86").value();
  const ProblemShape one_query{2, 1, 4096, 16, 16};
  // fp32 D = 160 fits decode_sm80's smallest tiling in 99 KiB; D = 161 pads to 176 and does not.
  CHECK(decode->refusal(sm86, square(DType::f32, 160), &one_query) == nullptr);
  CHECK(decode->refusal(sm86, square(DType::f32, 161), &one_query) != nullptr);
  CHECK(decode->refusal(Arch::parse("sm_80").value(), square(DType::f32, 256), &one_query) == nullptr);
  CHECK(decode->refusal(sm86, square(DType::bf16, 256), &one_query) == nullptr);
  // Decode shapes it refuses run on fa2_sm80.
  CHECK(std::string(pick_family(sm86, square(DType::f32, 256), &one_query)->name()) == "fa2_sm80");

  // Asked for by name, it says what does not fit: head dims, dtype, arch and bytes.
  const Semantics s = square(DType::f32, 256);
  const Status st = check_variant({"decode_sm80", s, decode->default_tiling(sm86, s, nullptr)}, sm86);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code() == Code::unsupported);
  const std::string msg = st.error().message();
  INFO(msg);
  for (const char* want : {"decode_sm80", "f32", "dqk256", "sm_86", "150784 bytes", "101376"})
    CHECK_MESSAGE(has(msg, want), want);
}
