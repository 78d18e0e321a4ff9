// Argument validation: every bad input gets an error naming the argument and the rule, before
// any driver call (these run without a GPU, with fake device addresses).
#include <doctest/doctest.h>

#include <limits>

#include "attention_params.hpp"
#include "problem.hpp"

namespace {
FjAttentionParams attention_params(const flashjit::AttentionProblem& p) {
  FjAttentionParams out{};
  flashjit::fill_attention_params(p, out);
  return out;
}
}  // namespace

using namespace flashjit;

namespace {

// Fake, well-separated, 256-byte aligned device addresses.
const void* addr(std::uintptr_t slot) { return reinterpret_cast<const void*>(0x7f0000000000ull + (slot << 32)); }

AttentionArgs make(DType dt = DType::f16, std::int64_t B = 2, std::int64_t Sq = 100, std::int64_t Sk = 120,
                   std::int64_t Hq = 8, std::int64_t Hkv = 2, std::int64_t D = 64, std::int64_t Dv = 64) {
  AttentionArgs a;
  a.q = TensorView::bshd(addr(1), dt, B, Sq, Hq, D);
  a.k = TensorView::bshd(addr(2), dt, B, Sk, Hkv, D);
  a.v = TensorView::bshd(addr(3), dt, B, Sk, Hkv, Dv);
  a.o = TensorView::bshd(addr(4), dt, B, Sq, Hq, Dv);
  return a;
}

std::string error_of(const AttentionArgs& a) {
  auto r = validate_problem(a);
  return r.ok() ? std::string("OK") : r.error().message();
}

bool mentions(const std::string& msg, const std::string& what) { return msg.find(what) != std::string::npos; }

}  // namespace

TEST_CASE("a valid GQA problem validates into semantics and params") {
  AttentionArgs a = make();
  a.mask = Mask::causal;
  auto r = validate_problem(a);
  REQUIRE(r.ok());
  CHECK(r->semantics.gqa);
  CHECK(r->semantics.vec == 8);
  CHECK(r->semantics.mask == Mask::causal);
  const FjAttentionParams p = attention_params(r.value());
  CHECK(p.group == 4);
  CHECK(p.seqlen_k - p.seqlen_q == 20);  // the causal diagonal's offset
  CHECK(p.scale_log2 == doctest::Approx(1.4426950408889634 / 8.0));
  CHECK(p.total_q == 100);
}

TEST_CASE("each rule is named in its error") {
  AttentionArgs a = make();
  a.q.data = nullptr;
  CHECK(mentions(error_of(a), "q.data is null"));

  a = make();
  a.k.data = static_cast<const char*>(a.k.data) + 1;
  CHECK(mentions(error_of(a), "k.data must be aligned"));

  a = make();
  a.k.shape[2] = 3;
  a.v.shape[2] = 3;
  CHECK(mentions(error_of(a), "must be a multiple of k.shape[2]"));

  a = make();
  a.v.shape[1] = 7;
  CHECK(mentions(error_of(a), "v.shape[1] (seq)"));

  a = make(DType::f16, 1, 10, 10, 1, 1, 300, 300);
  CHECK(mentions(error_of(a), "must be in [1, 256]"));

  a = make();
  a.v.dtype = DType::bf16;
  auto r = validate_problem(a);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == Code::unsupported);
  CHECK(mentions(r.error().message(), "dtype combination"));

  a = make();
  a.o.stride[1] = 1;  // rows overlap each other
  CHECK(mentions(error_of(a), "o overlaps itself"));

  a = make();
  a.q.stride[0] = -5;
  CHECK(mentions(error_of(a), "negative strides"));

  a = make();
  a.o.data = a.q.data;
  CHECK(mentions(error_of(a), "must not overlap"));

  a = make();
  a.softmax_scale = -1.f;
  CHECK(mentions(error_of(a), "softmax_scale"));

  a = make();
  a.lse = LseView::contiguous(reinterpret_cast<float*>(const_cast<void*>(addr(5))), 2, 8, 99);
  CHECK(mentions(error_of(a), "lse.shape[2]"));
}

TEST_CASE("zero-size problems are a valid no-op") {
  AttentionArgs a = make(DType::f16, 0);
  a.q.data = a.k.data = a.v.data = a.o.data = nullptr;
  auto r = validate_problem(a);
  REQUIRE(r.ok());
  CHECK(r->empty);
  a = make(DType::f16, 2, 0);
  REQUIRE(validate_problem(a).ok());
  CHECK(validate_problem(a)->empty);
  // No keys is not empty: every row must become zeros.
  a = make(DType::f16, 2, 5, 0);
  a.k.data = a.v.data = nullptr;
  REQUIRE(validate_problem(a).ok());
  CHECK_FALSE(validate_problem(a)->empty);
}

TEST_CASE("access width follows alignment, strides and head dims") {
  AttentionArgs a = make(DType::f16, 1, 64, 64, 4, 4, 48, 48);
  CHECK(validate_problem(a)->semantics.vec == 8);
  a = make(DType::f16, 1, 64, 64, 4, 4, 100, 100);
  CHECK(validate_problem(a)->semantics.vec == 4);
  a = make(DType::f16, 1, 64, 64, 4, 4, 3, 3);
  CHECK(validate_problem(a)->semantics.vec == 1);
  a = make(DType::f32, 1, 64, 64, 4, 4, 64, 64);
  CHECK(validate_problem(a)->semantics.vec == 4);
  a = make();
  a.q.data = static_cast<const char*>(a.q.data) + 4;  // 4-byte aligned only
  CHECK(validate_problem(a)->semantics.vec == 2);
  a = make();
  a.k.stride[3] = 2;  // strided head dim
  a.k.stride[2] *= 2, a.k.stride[1] *= 2, a.k.stride[0] *= 2;
  CHECK(validate_problem(a)->semantics.vec == 1);
}

TEST_CASE("the [B,H,S,D] and packed [S, d_model] layouts validate without copies") {
  AttentionArgs a = make();
  a.q = TensorView::bhsd(addr(1), DType::f16, 2, 100, 8, 64);
  a.o = TensorView::bhsd(addr(4), DType::f16, 2, 100, 8, 64);
  CHECK(validate_problem(a).ok());
  // Packed projection output [S, 3 * d_model]: q, k and v interleaved in one buffer.
  const std::int64_t S = 256, H = 8, D = 64, dm = H * D;
  const char* qkv = static_cast<const char*>(addr(6));
  AttentionArgs p;
  for (int t = 0; t < 3; ++t) {
    TensorView v;
    v.data = qkv + t * dm * 2;
    v.dtype = DType::f16;
    const std::int64_t shape[4] = {1, S, H, D}, stride[4] = {S * 3 * dm, 3 * dm, D, 1};
    for (int i = 0; i < 4; ++i) v.shape[i] = shape[i], v.stride[i] = stride[i];
    (t == 0 ? p.q : t == 1 ? p.k : p.v) = v;
  }
  p.o = TensorView::bshd(addr(7), DType::f16, 1, S, H, D);
  auto r = validate_problem(p);
  REQUIRE(r.ok());
  CHECK(r->semantics.vec == 8);
}

namespace {
const std::int32_t* i32(std::uintptr_t slot) { return static_cast<const std::int32_t*>(addr(slot)); }
const float* f32(std::uintptr_t slot) { return static_cast<const float*>(addr(slot)); }

// A packed batch of 3 sequences, 300 query rows and 360 key rows in all.
AttentionArgs make_varlen() {
  AttentionArgs a = make(DType::bf16, 1, 300, 360);
  a.varlen = Varlen{i32(5), i32(6), 3, 150, 200};
  return a;
}
}  // namespace

TEST_CASE("varlen: packed tensors, device prefix sums, max lengths") {
  AttentionArgs a = make_varlen();
  auto r = validate_problem(a);
  REQUIRE(r.ok());
  CHECK(r->semantics.varlen);
  CHECK(r->shape.batch == 3);
  CHECK(r->shape.seqlen_q == 150);
  CHECK(r->shape.seqlen_k == 200);
  const FjAttentionParams p = attention_params(r.value());
  CHECK(p.cu_seqlens_q == i32(5));
  CHECK(p.total_q == 300);
  CHECK(p.total_k == 360);

  a = make_varlen();
  a.q = TensorView::bshd(addr(1), DType::bf16, 2, 150, 8, 64);
  a.k = TensorView::bshd(addr(2), DType::bf16, 2, 180, 2, 64);
  a.v = TensorView::bshd(addr(3), DType::bf16, 2, 180, 2, 64);
  a.o = TensorView::bshd(addr(4), DType::bf16, 2, 150, 8, 64);
  CHECK(mentions(error_of(a), "q.shape[0] (batch) must be 1 with varlen"));
  a = make_varlen();
  a.varlen->cu_seqlens_k = nullptr;
  CHECK(mentions(error_of(a), "varlen.cu_seqlens_k is null"));
  a = make_varlen();
  a.varlen->cu_seqlens_q = reinterpret_cast<const std::int32_t*>(reinterpret_cast<std::uintptr_t>(i32(5)) + 2);
  CHECK(mentions(error_of(a), "varlen.cu_seqlens_q.data must be aligned"));
  a = make_varlen();
  a.varlen->max_seqlen_q = 301;
  CHECK(mentions(error_of(a), "varlen.max_seqlen_q must be in [0, q.shape[1] = 300]"));
  a = make_varlen();
  a.varlen->max_seqlen_k = -1;
  CHECK(mentions(error_of(a), "varlen.max_seqlen_k"));
  a = make_varlen();
  a.varlen->batch = 70000;
  CHECK(mentions(error_of(a), "varlen.batch must be in [0, 65535]"));
  a = make_varlen();
  a.varlen->cu_seqlens_q = static_cast<const std::int32_t*>(a.o.data);  // the kernel writes o while reading it
  CHECK(mentions(error_of(a), "varlen.cu_seqlens_q must not overlap o or lse"));
  a = make_varlen();
  a.varlen->batch = 0;
  CHECK(validate_problem(a)->empty);
}

TEST_CASE("window: bounds, causal interplay, clamping") {
  AttentionArgs a = make();
  a.window = Window{128, 0};
  auto r = validate_problem(a);
  REQUIRE(r.ok());
  CHECK(r->semantics.window);
  CHECK(r->window_left == 120);  // wider than every sequence: clamped to the longest (Sk = 120)
  CHECK(r->window_right == 0);

  a.window = Window{16, 4};
  CHECK(validate_problem(a)->window_left == 16);
  CHECK(validate_problem(a)->window_right == 4);
  a.window = Window{-1, -1};  // unbounded both ways: no window at all
  CHECK_FALSE(validate_problem(a)->semantics.window);
  a.mask = Mask::causal;
  a.window = Window{-1, 0};  // exactly causal
  CHECK_FALSE(validate_problem(a)->semantics.window);
  a.window = Window{32, -1};  // causal bounds the right side
  r = validate_problem(a);
  CHECK(r->semantics.window);
  CHECK(r->window_right == 0);
  a.window = Window{32, 5};
  CHECK(mentions(error_of(a), "window.right must be 0 or -1 with a causal mask"));
  a.mask = Mask::none;
  a.window = Window{-2, 0};
  CHECK(mentions(error_of(a), "window.left must be >= 0, or -1 for unbounded, got -2"));
  a.window = Window{0, -7};
  CHECK(mentions(error_of(a), "window.right must be >= 0, or -1 for unbounded, got -7"));
}

TEST_CASE("softcap, ALiBi and sinks: values and pointers are checked by name") {
  AttentionArgs a = make();
  a.softcap = 30.f;
  auto r = validate_problem(a);
  REQUIRE(r.ok());
  CHECK(r->semantics.softcap);
  const FjAttentionParams p = attention_params(r.value());
  CHECK(p.softcap_scale == doctest::Approx(0.125 / 30.0));
  CHECK(p.softcap_log2 == doctest::Approx(30.0 * 1.4426950408889634));
  CHECK(p.alibi_unit == doctest::Approx(1.4426950408889634));  // scores are log2 units after a softcap
  for (float bad : {0.f, -1.f, -1e-30f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    a.softcap = bad;
    CHECK(mentions(error_of(a), "softcap must be finite and > 0"));
  }
  a.softcap = -1e-30f;
  CHECK(mentions(error_of(a), "got -1e-30"));

  a = make();
  a.alibi = Alibi{f32(5), 0};
  r = validate_problem(a);
  REQUIRE(r.ok());
  CHECK(r->semantics.alibi);
  CHECK(attention_params(r.value()).alibi_unit == doctest::Approx(8.0));  // 1 / scale in raw score units
  a.alibi = Alibi{nullptr, 0};
  CHECK(mentions(error_of(a), "alibi.slopes is null"));
  a.alibi = Alibi{f32(5), -8};
  CHECK(mentions(error_of(a), "alibi.batch_stride must be >= 0"));
  a.alibi = Alibi{reinterpret_cast<const float*>(reinterpret_cast<std::uintptr_t>(f32(5)) + 1), 8};
  CHECK(mentions(error_of(a), "alibi.slopes.data must be aligned"));
  a.alibi = Alibi{static_cast<const float*>(a.o.data), 0};
  CHECK(mentions(error_of(a), "alibi.slopes must not overlap o"));

  a = make();
  a.sinks = f32(6);
  CHECK(validate_problem(a)->semantics.sinks);
  a.sinks = reinterpret_cast<const float*>(reinterpret_cast<std::uintptr_t>(f32(6)) + 2);
  CHECK(mentions(error_of(a), "sinks.data must be aligned"));
}

TEST_CASE("softcap's params are the exact floats the fill computed before the scalar list") {
  AttentionArgs a = make();  // head dim 64: scale 0.125
  a.softcap = 30.f;
  const FjAttentionParams p = attention_params(validate_problem(a).value());
  CHECK(p.softcap_scale == float(0.125 / 30.0));
  CHECK(p.softcap_log2 == float(30.0 * 1.4426950408889634));
}

TEST_CASE("every per-call scalar (flashjit/scalars.h): its typical value sets its flag, NaN is refused by name") {
#define FJ_TEST_SCALAR(type, field, rule, constant, tag, typical, backward, params, why)               \
  SUBCASE(#field) {                                                                                 \
    AttentionArgs a = make();                                                                       \
    CHECK(!validate_problem(a)->semantics.field);                                                   \
    a.field = typical;                                                                              \
    auto r = validate_problem(a);                                                                   \
    REQUIRE(r.ok());                                                                                \
    CHECK(r->semantics.field);                                                                      \
    CHECK(r->field == type(typical));                                                               \
    a.field = std::numeric_limits<type>::quiet_NaN();                                               \
    CHECK(mentions(error_of(a), #field " must be "));                                               \
  }
  FLASHJIT_SCALAR_ROWS(FJ_TEST_SCALAR)
#undef FJ_TEST_SCALAR
}

TEST_CASE("kv_starts: a semantic of its own, its array checked by name, passed to the kernels") {
  AttentionArgs a = make();
  a.kv_lens = i32(5);
  a.kv_starts = i32(7);
  auto r = validate_problem(a);
  REQUIRE(r.ok());
  CHECK(r->semantics.kv_starts);
  CHECK(r->semantics.kv_lens);
  CHECK(r->semantics.name().find("kvstarts") != std::string::npos);
  CHECK(attention_params(r.value()).kv_starts == i32(7));
  a.kv_lens = nullptr;  // without kv_lens: keys run to the cache's end
  REQUIRE(validate_problem(a).ok());
  CHECK(!validate_problem(a)->semantics.kv_lens);
  a.kv_starts = reinterpret_cast<const std::int32_t*>(reinterpret_cast<std::uintptr_t>(i32(7)) + 2);
  CHECK(mentions(error_of(a), "kv_starts.data must be aligned"));
  a.kv_starts = static_cast<const std::int32_t*>(a.o.data);
  CHECK(mentions(error_of(a), "kv_starts must not overlap o"));
  a = make();
  CHECK(!validate_problem(a)->semantics.kv_starts);
}

TEST_CASE("extents near 2^63 are refused without overflowing (issue 6, defect 4)") {
  // f32, no heads in q and o; k and v with shape[2] = stride[2] = 2^63 - 1. UBSan saw the
  // element count and the last offset overflow int64 here.
  constexpr std::int64_t kHuge = std::numeric_limits<std::int64_t>::max();
  AttentionArgs a = make(DType::f32, 1, 4, 4, 0, 1, 64, 64);
  for (TensorView* t : {&a.k, &a.v}) t->shape[2] = t->stride[2] = kHuge;
  auto r = validate_problem(a);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == Code::invalid_argument);
  // Since issue 21 G1 the head count is bounded before any product (test_tensor_layout.cpp
  // covers the extent arithmetic itself).
  CHECK(r.error().message().rfind("k.shape[2] (heads) must be at most 65535", 0) == 0);

  // The largest shapes the rules allow, q broadcast (all strides 0): the element count alone
  // exceeds int64, though q's own extent is one element.
  a = make(DType::f16, 65535, 1 << 30, 4, 65535, 1, 256, 256);
  for (int i = 0; i < 4; ++i) a.q.stride[i] = 0;
  r = validate_problem(a);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message().rfind("o:", 0) == 0);
}

TEST_CASE("a range that wraps past 2^64 is refused, not taken as disjoint (issue 6, defect 5)") {
  AttentionArgs a = make(DType::f16, 1, 1, 1, 1, 1, 1, 1);
  a.o.data = a.q.data = reinterpret_cast<const void*>(std::uintptr_t(0xFFFFFFFFFFFFFFFEull));
  auto r = validate_problem(a);
  REQUIRE_FALSE(r.ok());
  CHECK(mentions(r.error().message(), "q: its 2 bytes from data = 0xfffffffffffffffe wrap past the end"));
}

TEST_CASE("negative shapes name the argument; scales print faithfully (issue 6, defect 10)") {
  AttentionArgs a = make();
  a.q.shape[1] = a.o.shape[1] = -5;
  CHECK(mentions(error_of(a), "q.shape[1] (seq) must be >= 0, got -5"));
  a = make();
  a.k.shape[2] = a.v.shape[2] = -2;
  CHECK(mentions(error_of(a), "k.shape[2] (heads) must be >= 0, got -2"));
  a = make();
  a.softmax_scale = -1e-30f;
  CHECK(mentions(error_of(a), "got -1e-30"));
}

namespace {
// Paged decode: B sequences of one query each against pools of `pages` pages of `page_size`
// keys, each sequence using up to `max_pages` of them (a table row each, kv_lens set).
AttentionArgs make_paged(std::int64_t B = 2, std::int64_t pages = 32, std::int64_t page_size = 256,
                         std::int64_t max_pages = 4) {
  AttentionArgs a = make(DType::f16, B, 1, page_size, 8, 2, 64, 64);
  a.k = TensorView::bshd(addr(2), DType::f16, pages, page_size, 2, 64);
  a.v = TensorView::bshd(addr(3), DType::f16, pages, page_size, 2, 64);
  a.kv_lens = i32(5);
  a.paged = PagedKv{i32(6), max_pages, max_pages};
  return a;
}
}  // namespace

TEST_CASE("paged: a valid pool validates into the keys a sequence may hold") {
  const AttentionArgs a = make_paged();  // the problem keeps a pointer to it
  auto r = validate_problem(a);
  REQUIRE(r.ok());
  CHECK(r->shape.seqlen_k == 4 * 256);
  CHECK(r->shape.page_size == 256);
  const FjAttentionParams p = attention_params(r.value());
  CHECK(p.max_pages == 4);
  CHECK(p.num_pages == 32);
}

TEST_CASE("paged: max_pages * page_size is bounded without overflowing (issue 21 G1)") {
  // Pools [32, 256, 2, 64], max_pages = table_stride = 2^56: 2^56 * 256 wrapped to 0 and passed
  // the 2^30 bound (UBSan: signed overflow), and a kernel compiled for it.
  const std::int64_t huge = std::int64_t(1) << 56;
  AttentionArgs a = make_paged(2, 32, 256, huge);
  std::string msg = error_of(a);
  CHECK(mentions(msg, "paged.max_pages must be in [1, 4194304]"));
  CHECK(mentions(msg, "got 72057594037927936"));
  // The largest row the bound allows passes; one more page does not.
  a = make_paged(2, 32, 256, (std::int64_t(1) << 30) / 256);
  auto r = validate_problem(a);
  REQUIRE(r.ok());
  CHECK(r->shape.seqlen_k == std::int64_t(1) << 30);
  a = make_paged(2, 32, 256, (std::int64_t(1) << 30) / 256 + 1);
  CHECK(mentions(error_of(a), "paged.max_pages must be in [1, 4194304]"));
  for (std::int64_t bad : {std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min(),
                           std::int64_t(-1), std::int64_t(0)}) {
    a = make_paged(2, 32, 256, bad);
    CHECK(mentions(error_of(a), "paged.max_pages must be in [1, 4194304]"));
  }
  // k.shape[2] (Hkv) is bounded even where q has no heads to divide (no product of it wraps).
  a = make(DType::f16, 1, 4, 4, 0, 1, 64, 64);
  a.k.shape[2] = a.v.shape[2] = std::int64_t(1) << 40;
  a.k.stride[2] = a.v.stride[2] = 0;
  CHECK(mentions(error_of(a), "k.shape[2] (heads) must be at most 65535, got 1099511627776"));
}

TEST_CASE("paged: errors name the field the caller set and its rule (issue 21 G6)") {
  // A page size of 2^31 was reported as "sequence lengths must be at most 2^30".
  AttentionArgs a = make_paged(2, 32, std::int64_t(1) << 31);
  CHECK(mentions(error_of(a), "k.shape[1] (page_size) is the page size with paged and must be in [1, 4096], got 2147483648"));
  a = make_paged(2, 32, 0);
  CHECK(mentions(error_of(a), "k.shape[1] (page_size) is the page size with paged and must be in [1, 4096], got 0"));
  a = make_paged(2, 0, 16);
  CHECK(mentions(error_of(a), "k.shape[0] (pages) is the number of pages with paged and must be in [1, 2147483647], got 0"));
  a = make_paged();
  a.v.shape[0] = 31;
  CHECK(mentions(error_of(a), "v.shape[0] (pages) is 31 but must equal k.shape[0] = 32"));
  a = make_paged();
  a.v.shape[1] = 128;
  CHECK(mentions(error_of(a), "v.shape[1] (page_size) is 128 but must equal k.shape[1] = 256"));
  a = make_paged();
  a.paged->table_stride = 3;
  CHECK(mentions(error_of(a), "paged.table_stride must be >= paged.max_pages = 4, got 3"));

  // Paged with varlen: a bad sequence count was reported as the block table's shape.
  a = make_paged(1, 32, 16);
  a.q = TensorView::bshd(addr(1), DType::f16, 1, 10, 8, 64);
  a.o = TensorView::bshd(addr(4), DType::f16, 1, 10, 8, 64);
  a.varlen = Varlen{i32(7), nullptr, 3, 4, 64};
  REQUIRE(validate_problem(a).ok());
  a.varlen->batch = -1;
  CHECK(mentions(error_of(a), "varlen.batch must be in [0, 65535], got -1"));
  a.varlen->batch = std::numeric_limits<std::int64_t>::min();
  CHECK(mentions(error_of(a), "varlen.batch must be in [0, 65535]"));

  // Without paged, the lengths name their tensor.
  a = make();
  a.k.shape[1] = a.v.shape[1] = (std::int64_t(1) << 30) + 1;
  CHECK(mentions(error_of(a), "k.shape[1] (seq) must be at most 2^30, got 1073741825"));
  a = make();
  a.q.shape[1] = a.o.shape[1] = (std::int64_t(1) << 30) + 1;
  CHECK(mentions(error_of(a), "q.shape[1] (seq) must be at most 2^30, got 1073741825"));
}
