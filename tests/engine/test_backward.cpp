// The backward call's host side without a GPU: argument validation (each error names the
// argument and the rule), the refusals of what no backward kernel serves yet (UNSUPPORTED,
// naming the argument), the family's tile rules and its launch plan and workspace.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "backward_problem.hpp"
#include "flashjit/flashjit.hpp"
#include "kernel_family.hpp"
#include "templates/bwd_sm80/layout.cuh"
#include "templates/bwd_sm80/params.cuh"
#include "workspace_pool.hpp"

using namespace flashjit;

namespace {

// Fake, well-separated, 256-byte aligned device addresses.
const void* addr(std::uintptr_t slot) { return reinterpret_cast<const void*>(0x7f0000000000ull + (slot << 32)); }
float* faddr(std::uintptr_t slot) { return reinterpret_cast<float*>(const_cast<void*>(addr(slot))); }

// B=2, H=3, Sq=77, Sk=130: the GPU test's odd shape.
BackwardArgs make(DType dt = DType::f16, std::int64_t D = 64, std::int64_t Sq = 77, std::int64_t Sk = 130,
                  std::int64_t Hq = 3, std::int64_t Hkv = 3) {
  const std::int64_t B = 2;
  BackwardArgs b;
  AttentionArgs& a = b.forward;
  a.q = TensorView::bshd(addr(1), dt, B, Sq, Hq, D);
  a.k = TensorView::bshd(addr(2), dt, B, Sk, Hkv, D);
  a.v = TensorView::bshd(addr(3), dt, B, Sk, Hkv, D);
  a.o = TensorView::bshd(addr(4), dt, B, Sq, Hq, D);
  a.lse = LseView::contiguous(faddr(5), B, Hq, Sq);
  b.dout = TensorView::bshd(addr(6), dt, B, Sq, Hq, D);
  b.dq = TensorView::bhsd(addr(7), dt, B, Sq, Hq, D);  // any strides
  b.dk = TensorView::bshd(addr(8), dt, B, Sk, Hkv, D);
  b.dv = TensorView::bshd(addr(9), dt, B, Sk, Hkv, D);
  return b;
}

// make()'s call with V, O, dO and dV of head dim Dv, q, k, dq, dk of Dqk (MLA-like pairs).
BackwardArgs make_qk_v(DType dt, std::int64_t Dqk, std::int64_t Dv) {
  BackwardArgs b = make(dt, Dqk);
  for (TensorView* t : {&b.forward.v, &b.forward.o, &b.dout, &b.dv}) {
    const std::int64_t* n = t->shape;
    *t = TensorView::bshd(t->data, dt, n[0], n[1], n[2], Dv);
  }
  return b;
}

std::string error_of(const BackwardArgs& b) {
  auto st = validate_backward_args(b);
  return st.ok() ? std::string("OK") : st.error().message();
}

bool mentions(const std::string& msg, const std::string& what) { return msg.find(what) != std::string::npos; }

const Engine& engine() {
  static const std::unique_ptr<Engine> e = Engine::create().value();
  return *e;
}

// plan_backward's refusal on sm_80, or "OK: <variant>".
std::pair<Code, std::string> plan_of(const BackwardArgs& b) {
  auto p = engine().plan_backward(b, "sm_80");
  return p.ok() ? std::pair{Code::ok, "OK: " + p->variant.name()} : std::pair{p.error().code(), p.error().message()};
}

const KernelFamily& bwd() { return *find_family("bwd_sm80"); }
Tiling tiling(int m, int n, int w, int stages = 1) { return Tiling(bwd().knobs(), {m, n, w, stages}); }

}  // namespace

TEST_CASE("backward: a valid call validates; its semantics are the forward's, LSE read not written") {
  const BackwardArgs b = make(DType::bf16, 128);
  auto p = validate_backward(b);
  REQUIRE(p.ok());
  CHECK(p->backward == &b);
  CHECK(p->args == &b.forward);
  CHECK(!p->semantics.write_lse);
  CHECK(p->semantics.head_dim_qk == 128);
  CHECK(p->semantics.vec == 8);
  CHECK(!p->empty);
  auto plan = plan_of(b);
  CHECK(plan.second == "OK: bwd_sm80-bf16-dqk128-dv128-vec8-m64n128w8q2");  // FA2's shape; two stages fit sm_80's 163 KB (swizzled)
}

TEST_CASE("backward: each argument rule is named in its error") {
  BackwardArgs b = make();
  b.forward.lse.reset();
  CHECK(mentions(error_of(b), "forward.lse is required"));

  b = make();
  b.dout.shape[1] = 76;
  CHECK(mentions(error_of(b), "dout.shape[1] (seq) is 76 but must equal forward.o.shape[1] = 77"));

  b = make();
  b.dq.dtype = DType::bf16;
  auto st = validate_backward_args(b);
  CHECK(st.error().code() == Code::unsupported);
  CHECK(mentions(st.error().message(), "dq.dtype is bf16 but must equal forward.q.dtype = f16"));

  b = make();
  b.dk.shape[2] = 2;
  CHECK(mentions(error_of(b), "dk.shape[2] (heads) is 2 but must equal forward.k.shape[2] = 3"));

  b = make();
  b.dv.data = b.forward.v.data;  // written over an input
  CHECK(mentions(error_of(b), "dv must not overlap forward.v in memory"));

  b = make();
  b.dk.data = b.dq.data;
  CHECK(mentions(error_of(b), "dq must not overlap dk in memory"));

  b = make();
  b.dq.stride[1] = 0;  // every row on one address: an output threads would race on
  CHECK(mentions(error_of(b), "dq"));

  b = make();
  b.forward.workspace = {const_cast<void*>(addr(10)), 1024};
  CHECK(mentions(error_of(b), "forward.workspace must be empty"));

  b = make();
  b.workspace = {nullptr, 4096};
  CHECK(mentions(error_of(b), "workspace.bytes is 4096 but workspace.data is null"));

  b = make();
  b.workspace = {reinterpret_cast<void*>(0x7f0000000010ull), 4096};
  CHECK(mentions(error_of(b), "workspace.data must be 256-byte aligned"));

  b = make();
  b.forward.q.shape[3] = 300;  // the forward's own rules, prefixed with where they apply
  CHECK(mentions(error_of(b), "forward: "));

  // The small arrays the kernels read stay apart from the gradients other CTAs write (found by
  // fuzz_c_abi_backward: the forward checks them against o and lse only).
  b = make();
  b.forward.kv_lens = static_cast<const std::int32_t*>(b.dk.data);
  CHECK(mentions(error_of(b), "dk must not overlap forward.kv_lens in memory"));
  b = make();
  b.forward.sinks = static_cast<const float*>(b.dq.data);
  CHECK(mentions(error_of(b), "dq must not overlap forward.sinks in memory"));
  b = make();
  b.forward.alibi = Alibi{static_cast<const float*>(b.dv.data), 0};
  CHECK(mentions(error_of(b), "dv must not overlap forward.alibi.slopes in memory"));
  b = make();
  b.forward.alibi = Alibi{faddr(10), 0};  // apart: fine
  CHECK(error_of(b) == "OK");
}

TEST_CASE("backward: what no kernel serves yet is UNSUPPORTED, naming the argument") {
  struct Case {
    const char* what;
    void (*set)(BackwardArgs&);
    const char* needle;
  };
  const Case cases[] = {
      {"kv_starts", [](BackwardArgs& b) {
         b.forward.kv_starts = reinterpret_cast<const std::int32_t*>(addr(11));
       }, "kv_starts"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    BackwardArgs b = make();
    c.set(b);
    REQUIRE(validate_backward_args(b).ok());  // a valid forward call: the backward family refuses it
    const auto planned = plan_of(b);  // not a structured binding: clang's C++17 cannot capture one in INFO's lambda
    const Code code = planned.first;
    const std::string& msg = planned.second;
    INFO(msg);
    CHECK(code == Code::unsupported);
    CHECK(mentions(msg, "no backward kernel family serves"));
    CHECK(mentions(msg, c.needle));
  }
  // The sinks' gradient needs the sinks, fp32 [heads_q] apart from every input and output.
  BackwardArgs b = make();
  b.dsinks = faddr(11);
  CHECK(validate_backward_args(b).error().code() == Code::invalid_argument);
  CHECK(mentions(error_of(b), "dsinks is given but forward.sinks is null"));
  b.forward.sinks = faddr(12);
  CHECK(validate_backward_args(b).ok());
  b.dsinks = faddr(12);
  CHECK(mentions(error_of(b), "dsinks must not overlap forward.sinks"));
  b.dsinks = faddr(1);  // q's slot
  CHECK(mentions(error_of(b), "dsinks must not overlap forward.q"));
  // Sinks, varlen and kv_lens are served (their values: the GPU tests).
  for (auto set : {+[](BackwardArgs& a) { a.forward.sinks = faddr(12); },
                   +[](BackwardArgs& a) { a.forward.kv_lens = reinterpret_cast<const std::int32_t*>(addr(11)); }}) {
    b = make();
    set(b);
    CHECK(plan_of(b).first == Code::ok);
  }
  // Before Ampere nothing serves it.
  auto old = engine().plan_backward(make(), "sm_75");
  CHECK(old.error().code() == Code::unsupported);
}

TEST_CASE("backward: GQA/MQA, windows, softcap, ALiBi and head dims 1-256, Dqk != Dv, plan a bwd_sm80 variant") {
  struct Case {
    const char* what;
    void (*set)(BackwardArgs&);
  };
  const Case cases[] = {
      {"gqa 4:1", [](BackwardArgs& b) { b = make(DType::f16, 64, 77, 130, 8, 2); }},
      {"gqa 16:1", [](BackwardArgs& b) { b = make(DType::bf16, 128, 77, 130, 16, 1); }},
      {"window", [](BackwardArgs& b) { b.forward.window = Window{16, 5}; }},
      {"causal window", [](BackwardArgs& b) { b.forward.mask = Mask::causal, b.forward.window = Window{16, 0}; }},
      {"softcap", [](BackwardArgs& b) { b.forward.softcap = 30.f; }},
      {"alibi", [](BackwardArgs& b) { b.forward.alibi = Alibi{faddr(11), 0}; }},
      {"head dim 1", [](BackwardArgs& b) { b = make(DType::f16, 1); }},
      {"head dim 40", [](BackwardArgs& b) { b = make(DType::bf16, 40); }},
      {"head dim 96", [](BackwardArgs& b) { b = make(DType::f16, 96); }},
      {"head dim 160", [](BackwardArgs& b) { b = make(DType::f16, 160); }},
      {"head dim 192", [](BackwardArgs& b) { b = make(DType::bf16, 192); }},
      {"head dim 256", [](BackwardArgs& b) { b = make(DType::f16, 256); }},
      {"dqk 192, dv 128", [](BackwardArgs& b) { b = make_qk_v(DType::bf16, 192, 128); }},
      {"dqk 72, dv 40", [](BackwardArgs& b) { b = make_qk_v(DType::f16, 72, 40); }},
      {"dqk 40, dv 256", [](BackwardArgs& b) { b = make_qk_v(DType::f16, 40, 256); }},
      {"head dim 256, gqa, window", [](BackwardArgs& b) {
         b = make(DType::bf16, 256, 77, 130, 8, 2);
         b.forward.window = Window{16, 5};
       }},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    BackwardArgs b = make();
    c.set(b);
    const auto plan = plan_of(b);  // not a structured binding: clang's C++17 cannot capture one in INFO's lambda
    INFO(plan.second);
    CHECK(plan.first == Code::ok);
  }
}

TEST_CASE("backward: with GQA the main kernel runs per KV head, preprocess and convert per q-head") {
  const BackwardArgs b = make(DType::f16, 64, 77, 130, 8, 2);
  const AttentionProblem p = validate_backward(b).value();
  const KernelVariant v{"bwd_sm80", p.semantics, tiling(64, 64, 4)};
  WorkspaceMeter meter;
  LaunchPlan plan;
  REQUIRE(bwd().plan(p, v, DeviceContextInfo{}, meter, plan).ok());
  REQUIRE(plan.count == 3);
  CHECK(plan.kernels[0].grid.y == 8);
  CHECK(plan.kernels[1].grid.y == 2);
  CHECK(plan.kernels[2].grid.y == 8);
  const auto* bp = reinterpret_cast<const FjBackwardParams*>(plan.kernels[1].params.bytes);
  CHECK(bp->fwd.group == 4);
  // The workspace is per q-head: K/V and their gradients are never expanded.
  CHECK(meter.bytes() == 2 * 8 * 128 * 64 * 4 + 2 * (2 * 8 * 128 * 4));  // dQ's accumulator, then D and the LSE a row
}

TEST_CASE("backward: forward calls never plan the backward family, and the reverse") {
  const BackwardArgs b = make();
  auto fwd = engine().plan(b.forward, "sm_80");
  REQUIRE(fwd.ok());
  CHECK(fwd->variant.family != "bwd_sm80");
  for (const KernelFamily* f : kernel_families()) CHECK(f->pass() == Pass::forward);
  // bwd_sm90 first: it serves a subset of bwd_sm80's calls on sm_90a, faster.
  REQUIRE(kernel_families(Pass::backward).size() == 2);
  CHECK(std::string(kernel_families(Pass::backward)[0]->name()) == "bwd_sm90");
  CHECK(kernel_families(Pass::backward)[1] == &bwd());
  CHECK(find_family("bwd_sm80") == &bwd());
  CHECK(engine().plan_backward(b, "sm_90a")->variant.family == "bwd_sm90");
  CHECK(engine().plan_backward(b, "sm_80")->variant.family == "bwd_sm80");
  BackwardArgs windowed = b;
  windowed.forward.window = Window{8, 0};
  CHECK(engine().plan_backward(windowed, "sm_90a")->variant.family == "bwd_sm80");
}

TEST_CASE("backward: bwd_sm90 serves 16-bit attention, causal or not, GQA, at head dims 64 and 128 on sm_90a, and says why not elsewhere") {
  const KernelFamily* f = find_family("bwd_sm90");
  REQUIRE(f);
  auto has = [](const char* text, const char* part) { return text && std::string(text).find(part) != std::string::npos; };
  CHECK(f->pass() == Pass::backward);
  const Arch sm90a = Arch::parse("sm_90a").value();
  for (DType dt : {DType::f16, DType::bf16})
    for (int d : {64, 128}) {
      const Semantics s = validate_backward(make(dt, d)).value().semantics;
      CHECK(f->refusal(sm90a, s, nullptr) == nullptr);
      const std::vector<Tiling> candidates = f->candidate_tilings(sm90a, s);
      // Two MMA warpgroups of 64 keys; at head dim 64 also on Q blocks of 128 rows, and one warpgroup.
      REQUIRE(candidates.size() == (d == 64 ? 3u : 1u));
      CHECK(candidates.front() == f->default_tiling(sm90a, s, nullptr));
      CHECK(candidates.front().name() == (d == 64 ? "m128n128g2" : "m64n128g2"));
      for (const Tiling& t : candidates) CHECK(f->check_tiling(s, t).ok());
      // 128-row Q blocks need two warpgroups (dQ splits its rows between them) and head dim 64.
      const Tiling wide = parse_tiling("bwd_sm90", "m128n128g2").value();
      CHECK(f->check_tiling(s, wide).ok() == (d == 64));
      CHECK_FALSE(f->check_tiling(s, parse_tiling("bwd_sm90", "m128n64g1").value()).ok());
      CHECK(f->check_tiling(s, parse_tiling("bwd_sm90", "m64n64g1").value()).ok() == (d == 64));
    }
  const Semantics s = validate_backward(make(DType::f16, 128)).value().semantics;
  auto refused = [&](Semantics t, const char* says) {
    const char* why = f->refusal(sm90a, t, nullptr);
    REQUIRE(why);
    CHECK(has(why, says));
  };
  CHECK(has(f->refusal(Arch::parse("sm_90").value(), s, nullptr), "sm_90a"));
  CHECK(has(f->refusal(Arch::parse("sm_80").value(), s, nullptr), "sm_90a"));
  Semantics t = s;
  t.mask = Mask::causal;
  t.gqa = true;
  CHECK(f->refusal(sm90a, t, nullptr) == nullptr);
  t.window = true;
  refused(t, "window");
  t = s;
  t.deterministic = true;
  refused(t, "deterministic");
  t = s;
  t.head_dim_qk = t.head_dim_v = 96;
  refused(t, "head dims 64 and 128");
  t = s;
  t.dtype = DType::f32;
  refused(t, "fp32");
  CHECK_FALSE(f->check_tiling(s, Tiling(f->knobs(), {128, 64, 1})).ok());  // block_m 64 only
  CHECK_FALSE(f->check_tiling(s, Tiling(f->knobs(), {64, 128, 1})).ok());  // 64 keys a warpgroup
  CHECK_FALSE(f->check_tiling(s, Tiling(f->knobs(), {64, 192, 3})).ok());
}

TEST_CASE("backward: bwd_sm80 tile rules and candidates") {
  const Semantics s = validate_backward(make(DType::f16, 128)).value().semantics;
  CHECK(bwd().check_tiling(s, tiling(64, 64, 4)).ok());
  CHECK(bwd().check_tiling(s, tiling(64, 64, 8, 2)).ok());  // S/dP 2 x 4 warps of 32 x 16, dK/dV and dQ 2 x 4 of 32 x 32
  CHECK(mentions(bwd().check_tiling(s, tiling(40, 64, 4)).error().message(), "BLOCK_M must be a multiple of 16"));
  CHECK(mentions(bwd().check_tiling(s, tiling(64, 40, 4)).error().message(), "BLOCK_N must be a multiple of 16"));
  // 8 warps cannot tile 64 x 48 scores with sides of whole 16 x 16 steps ...
  CHECK(mentions(bwd().check_tiling(s, tiling(64, 48, 8)).error().message(), "cannot split BLOCK_M x BLOCK_N"));
  // ... nor D = 80's 32 x 80 dQ (80 = 5 x 16 columns: every warp along the 32 rows).
  const Semantics s80 = validate_backward(make(DType::f16, 80)).value().semantics;
  CHECK(mentions(bwd().check_tiling(s80, tiling(32, 128, 8)).error().message(), "cannot split BLOCK_M x the head dim (dQ)"));
  CHECK(bwd().check_tiling(s80, tiling(128, 128, 8)).ok());
  CHECK(mentions(bwd().check_tiling(s, tiling(64, 64, 4, 3)).error().message(), "stages must be 1 or 2"));
  CHECK(bwd().default_tiling(Arch::parse("sm_90a").value(), s, nullptr).name() == "m64n128w8q2");
  CHECK(bwd().default_tiling(Arch::parse("sm_80").value(), s, nullptr).name() == "m64n128w8q2");  // 163 KB exactly
  CHECK(bwd().default_tiling(Arch::parse("sm_86").value(), s, nullptr).name() == "m64n64w4q1");   // 99 KB
  const Semantics s64 = validate_backward(make(DType::f16, 64)).value().semantics;
  CHECK(bwd().default_tiling(Arch::parse("sm_90a").value(), s64, nullptr).name() == "m128n128w8q2");
  CHECK(mentions(bwd().check_tiling(s, tiling(64, 64, 0)).error().message(), "warps"));
  CHECK(mentions(bwd().check_tiling(s, tiling(64, 256, 4)).error().message(), "at most 128"));
  for (const char* arch : {"sm_80", "sm_86", "sm_90a"}) {
    const Arch a = Arch::parse(arch).value();
    for (const Semantics& sem : {s, s64, s80}) {
      const auto candidates = bwd().candidate_tilings(a, sem);
      CHECK(!candidates.empty());
      for (const Tiling& t : candidates) CHECK(check_variant({"bwd_sm80", sem, t}, a).ok());
      CHECK(check_variant({"bwd_sm80", sem, bwd().default_tiling(a, sem, nullptr)}, a).ok());
    }
  }
}

TEST_CASE("backward: wide head dims and Dqk != Dv: padding, defaults per arch, a candidate for every pair") {
  const Arch sm80 = Arch::parse("sm_80").value(), sm86 = Arch::parse("sm_86").value(), sm90 = Arch::parse("sm_90a").value();
  auto sem = [](int dqk, int dv) { return validate_backward(make_qk_v(DType::bf16, dqk, dv)).value().semantics; };
  auto def = [](const Arch& a, const Semantics& s) { return bwd().default_tiling(a, s, nullptr).name(); };
  // Past 128 both head dims pad to 32 (an even count of 16-column steps: dK/dV split over the head dims).
  CHECK(fj_layout::bwd_padded_head_dim(200, 136) == 224);
  CHECK(fj_layout::bwd_padded_head_dim(136, 200) == 160);
  CHECK(fj_layout::bwd_padded_head_dim(40, 256) == 64);
  CHECK(fj_layout::bwd_padded_head_dim(72, 40) == 80);  // not wide: 16 as before
  // FlashAttention-2's 64 x 64 on 8 warps: two stages on sm_90 (211 KB at 256), on sm_80 where two
  // fit (192: 163 KB) and one where not (256); sm_86/89's 99 KB take 64 x 64 on 8 warps with one
  // where it fits (192/128: 98.5 KB), 64 x 32 (8 warps, or 4 where 8 cannot split 32 keys x 160)
  // or, at 256, 32 x 32 on 4 warps.
  const Semantics d160 = sem(160, 160), d192 = sem(192, 192), d256 = sem(256, 256), mla = sem(192, 128);
  CHECK(def(sm90, d256) == "m64n64w8q2");
  CHECK(def(sm80, d256) == "m64n64w8q1");
  CHECK(def(sm86, d256) == "m32n32w4q1");
  CHECK(def(sm90, d192) == "m64n64w8q2");
  CHECK(def(sm80, d192) == "m64n64w8q2");
  CHECK(def(sm86, d192) == "m64n32w8q1");
  CHECK(def(sm80, d160) == "m64n64w8q2");
  CHECK(def(sm86, d160) == "m64n32w4q1");
  CHECK(def(sm80, mla) == "m64n64w8q2");
  CHECK(def(sm86, mla) == "m64n64w8q1");
  CHECK(variant_smem_bytes({"bwd_sm80", d256, bwd().default_tiling(sm90, d256, nullptr)}) == 216064);  // 211 KB
  // The dQ tile joins dK and dV in phase 2: 64 x 64 on 4 warps at 256 would hold 128 + 128 of them.
  const auto wide = bwd().candidate_tilings(sm90, d256);
  CHECK(std::find(wide.begin(), wide.end(), tiling(64, 64, 4)) == wide.end());
  CHECK(std::find(wide.begin(), wide.end(), tiling(32, 32, 4)) != wide.end());
  // 8 warps cannot split 32 keys x 160 (5 steps of 32 columns): the message names both head dims.
  CHECK(mentions(bwd().check_tiling(sem(160, 96), tiling(64, 32, 8)).error().message(),
                 "BLOCK_N x the head dim (dK and dV) at head dim 160 (q, k) and 96 (v)"));
  // Every pair of padded widths, with and without the score edits' register cap, has candidates on
  // every arch, and the default is one of them.
  for (const Arch& a : {sm80, sm86, sm90})
    for (int dqk = 16; dqk <= 256; dqk += 16)
      for (int dv = 16; dv <= 256; dv += 16)
        for (bool window : {false, true}) {
          Semantics s = sem(dqk, dv);
          s.window = window;
          INFO(a.name() << " dqk " << dqk << " dv " << dv << " window " << window);
          REQUIRE(bwd().refusal(a, s, nullptr) == nullptr);
          const auto candidates = bwd().candidate_tilings(a, s);
          REQUIRE(!candidates.empty());
          const Tiling d = bwd().default_tiling(a, s, nullptr);
          CHECK(std::find(candidates.begin(), candidates.end(), d) != candidates.end());
        }
}

TEST_CASE("backward: fp32 (exact and tf32) plans bwd_sm80 with fp32 tiles that fit each arch") {
  const Arch sm80 = Arch::parse("sm_80").value(), sm86 = Arch::parse("sm_86").value(), sm90 = Arch::parse("sm_90a").value();
  auto sem = [](int d, Fp32Math math = Fp32Math::exact) {
    BackwardArgs b = make(DType::f32, d);
    b.forward.fp32_math = math;
    return validate_backward(b).value().semantics;
  };
  auto def = [](const Arch& a, const Semantics& s) { return bwd().default_tiling(a, s, nullptr).name(); };
  CHECK(plan_of(make(DType::f32, 64)).second == "OK: bwd_sm80-f32-dqk64-dv64-vec4-m64n64w8q2");
  BackwardArgs tf32 = make(DType::f32, 128);
  tf32.forward.fp32_math = Fp32Math::tf32;
  CHECK(plan_of(tf32).second == "OK: bwd_sm80-f32-tf32-dqk128-dv128-vec4-m32n64w8q2");
  // Every tile is fp32, P and dS included: twice 16-bit's bytes, so the blocks are 32 and 64.
  const Semantics d64 = sem(64), d128 = sem(128), d256 = sem(256), d128t = sem(128, Fp32Math::tf32);
  CHECK(variant_smem_bytes({"bwd_sm80", d64, tiling(64, 64, 8, 2)}) == 148480);
  CHECK(def(sm90, d64) == "m64n64w8q2");
  CHECK(def(sm80, d64) == "m64n64w8q2");
  CHECK(def(sm90, d128) == "m64n64w8q1");  // 172.5 KB
  CHECK(def(sm80, d128) == "m32n64w8q2");  // 154.5 KB: 64 x 64 does not fit 163 KB
  CHECK(def(sm80, d128t) == def(sm80, d128));
  CHECK(def(sm86, d128) == "m32n32w4q1");  // 78 KB
  CHECK(def(sm90, d256) == "m32n64w8q1");  // 216 KB
  CHECK(def(sm80, d256) == "m32n32w4q1");  // 142 KB
  // The phase's tile is at most 64 registers a thread: 64 x 32 on 4 warps at 192 holds 96.
  const auto wide = bwd().candidate_tilings(sm90, sem(192));
  CHECK(std::find(wide.begin(), wide.end(), tiling(64, 32, 4)) == wide.end());
  CHECK(std::find(wide.begin(), wide.end(), tiling(32, 32, 4)) != wide.end());
  // Exact mode keeps its fresh k8 steps at every tiling where its defaults have them: the 4-warp
  // tilings, faster but 100x less exact at 16K keys, are tf32's and the odd widths' only.
  auto has = [](const std::vector<Tiling>& ts, const Tiling& t) { return std::find(ts.begin(), ts.end(), t) != ts.end(); };
  for (const Arch& a : {sm80, sm90}) {
    INFO(a.name());
    CHECK(!has(bwd().candidate_tilings(a, d64), tiling(64, 64, 4, 1)));
    CHECK(has(bwd().candidate_tilings(a, sem(64, Fp32Math::tf32)), tiling(64, 64, 4, 1)));
    CHECK(!has(bwd().candidate_tilings(a, d128), tiling(32, 64, 4, 2)));
    CHECK(has(bwd().candidate_tilings(a, d128t), tiling(32, 64, 4, 2)));
    CHECK(has(bwd().candidate_tilings(a, sem(80)), tiling(64, 64, 4, 1)));  // 5 steps: 8 warps cannot split it
  }
  // Every padded width has candidates on sm_80 and sm_90a, the default among them, each fitting.
  for (const Arch& a : {sm80, sm90})
    for (int d = 16; d <= 256; d += 16) {
      const Semantics s = sem(d);
      INFO(a.name() << " d " << d);
      REQUIRE(bwd().refusal(a, s, nullptr) == nullptr);
      const auto candidates = bwd().candidate_tilings(a, s);
      REQUIRE(!candidates.empty());
      for (const Tiling& t : candidates) CHECK(check_variant({"bwd_sm80", s, t}, a).ok());
      const Tiling d_t = bwd().default_tiling(a, s, nullptr);
      CHECK(std::find(candidates.begin(), candidates.end(), d_t) != candidates.end());
    }
}

TEST_CASE("backward: the launch plan is three kernels sharing one workspace") {
  const BackwardArgs b = make(DType::f16, 64);
  const AttentionProblem p = validate_backward(b).value();
  const KernelVariant v{"bwd_sm80", p.semantics, tiling(64, 64, 4)};
  WorkspaceMeter meter;
  LaunchPlan plan;
  REQUIRE(bwd().plan(p, v, DeviceContextInfo{}, meter, plan).ok());
  REQUIRE(plan.count == 3);
  // 77 rows -> 2 Q blocks of 64 (128 rows in the workspace); 130 keys -> 3 K/V blocks.
  CHECK(plan.kernels[0].grid.x == 2);
  CHECK(plan.kernels[1].grid.x == 3);
  CHECK(plan.kernels[2].grid.x == 2);
  for (int i = 0; i < 3; ++i) {
    CHECK(plan.kernels[i].entry == i);
    CHECK(plan.kernels[i].grid.y == 3);
    CHECK(plan.kernels[i].grid.z == 2);
    CHECK(plan.kernels[i].block.x == 128);  // convert reads dQ back in the main kernel's thread order
    // main: K, V, Q, dO (64 rows of 64 16-bit elements, swizzled), P, dS (64 rows of 64 + 8), LSE
    // and D (64 floats each); convert: one Q block of dQ in 16 bits (padded); preprocess none.
    CHECK(plan.kernels[i].smem_bytes == (i == 0 ? 0 : i == 1 ? 4 * 64 * 64 * 2 + 2 * 64 * 72 * 2 + 2 * 64 * 4 : 64 * 72 * 2));
    const auto* bp = reinterpret_cast<const FjBackwardParams*>(plan.kernels[i].params.bytes);
    CHECK(bp->seqlen_q_rounded == 128);
    CHECK(bp->fwd.lse == b.forward.lse->data);
    CHECK(bp->dq_stride[1] == 64);  // dq is [B,H,S,D] storage
    CHECK(bp->scale == doctest::Approx(0.125));
  }
  // dQ accumulator: 2 x 3 x 128 rows x 64 floats, then D and the exponent LSE: 768 floats each,
  // each 256-byte aligned.
  CHECK(meter.bytes() == 2 * 3 * 128 * 64 * 4 + 2 * 3072);

  // No query rows: only the main kernel, which writes dk = dv = 0; no workspace.
  const BackwardArgs none = make(DType::f16, 64, 0, 130);
  const AttentionProblem p0 = validate_backward(none).value();
  CHECK(!p0.empty);
  WorkspaceMeter meter0;
  LaunchPlan plan0;
  REQUIRE(bwd().plan(p0, {"bwd_sm80", p0.semantics, tiling(64, 64, 4)}, DeviceContextInfo{}, meter0, plan0).ok());
  REQUIRE(plan0.count == 1);
  CHECK(plan0.kernels[0].entry == 1);
  CHECK(meter0.bytes() == 0);
  // No keys: preprocess and convert write dq = 0.
  const BackwardArgs no_keys = make(DType::f16, 64, 77, 0);  // named: the problem points at its arguments
  const AttentionProblem pk = validate_backward(no_keys).value();
  LaunchPlan plank;
  NoWorkspace nw;
  REQUIRE(bwd().plan(pk, {"bwd_sm80", pk.semantics, tiling(64, 64, 4)}, DeviceContextInfo{}, nw, plank).ok());
  REQUIRE(plank.count == 2);
  CHECK(plank.kernels[0].entry == 0);
  CHECK(plank.kernels[1].entry == 2);
  // Neither: nothing to do.
  CHECK(validate_backward(make(DType::f16, 64, 0, 0)).value().empty);
}

TEST_CASE("backward: a strided head dim narrows vec for every view the kernels touch") {
  BackwardArgs b = make();
  b.dk.stride[3] = 2;
  b.dk.stride[2] *= 2, b.dk.stride[1] *= 2, b.dk.stride[0] *= 2;
  CHECK(validate_backward(b).value().semantics.vec == 1);
  b = make();
  b.dout.data = static_cast<const char*>(b.dout.data) + 4;  // 4-byte aligned: two f16 a load
  CHECK(validate_backward(b).value().semantics.vec == 2);
}

namespace {
// A workspace at a fixed fake address, so the plan's pointers into it can be read.
class FakeWorkspace final : public WorkspaceSource {
 public:
  Result<CUdeviceptr> get(std::size_t bytes, std::size_t) override {
    bytes_ = bytes;
    return CUdeviceptr(0x7e0000000000ull);
  }
  std::size_t bytes_ = 0;
};
}  // namespace

TEST_CASE("backward: deterministic mode is a variant of its own with a turn flag a Q block after the rest") {
  BackwardArgs b = make(DType::f16, 64);
  b.deterministic = true;
  const AttentionProblem p = validate_backward(b).value();
  CHECK(p.semantics.deterministic);
  const auto plan_name = plan_of(b).second;
  CHECK(plan_name == "OK: bwd_sm80-f16-dqk64-dv64-det-vec8-m64n128w8q2");  // sm_80: as without the mode
  CHECK(!forward_semantics(p.semantics).deterministic);  // every forward kernel is deterministic already

  const KernelVariant v{"bwd_sm80", p.semantics, tiling(64, 64, 4)};
  FakeWorkspace ws;
  LaunchPlan plan;
  REQUIRE(bwd().plan(p, v, DeviceContextInfo{}, ws, plan).ok());
  REQUIRE(plan.count == 3);
  // The default's parts (dQ accumulator, D, LSE), then 2 x 3 x 2 Q blocks' int flags, 256-byte aligned.
  const std::size_t rest = 2 * 3 * 128 * 64 * 4 + 2 * 3072;
  CHECK(ws.bytes_ == rest + 256);
  for (int i = 0; i < 3; ++i) {
    const auto* bp = reinterpret_cast<const FjBackwardParams*>(plan.kernels[i].params.bytes);
    CHECK(reinterpret_cast<std::uintptr_t>(bp->dq_turn) == 0x7e0000000000ull + rest);
  }
  // The same grid: CTA x takes K/V block gridDim.x - 1 - x in the kernel (dq_order.cuh).
  CHECK(plan.kernels[1].grid.x == 3);

  b.deterministic = false;
  const AttentionProblem q = validate_backward(b).value();
  FakeWorkspace ws_default;
  LaunchPlan plan_default;
  REQUIRE(bwd().plan(q, {"bwd_sm80", q.semantics, tiling(64, 64, 4)}, DeviceContextInfo{}, ws_default, plan_default).ok());
  CHECK(ws_default.bytes_ == rest);
  CHECK(reinterpret_cast<const FjBackwardParams*>(plan_default.kernels[1].params.bytes)->dq_turn == nullptr);
}
