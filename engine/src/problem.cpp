#include "problem.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "base/checked_math.hpp"
#include "base/printable.hpp"
#include "device_context.hpp"
#include "tensor_layout.hpp"

namespace flashjit {
namespace {

const char* kDimNames[4] = {"batch", "seq", "heads", "head_dim"};
const char* kPoolDimNames[4] = {"pages", "page_size", "heads", "head_dim"};  // paged k and v

Error bad(std::string msg) { return Error(Code::invalid_argument, std::move(msg)); }

// The rules a per-call scalar may name (flashjit/scalars.h): a test and the words an error shows.
struct ScalarRule {
  bool (*holds)(double value);
  const char* text;
};
bool is_finite_positive(double value) { return std::isfinite(value) && value > 0; }
constexpr ScalarRule finite_positive{is_finite_positive, "finite and > 0"};

// "k.shape[1] (seq)"; with paged, k and v are page pools: "k.shape[1] (page_size)".
std::string dim(const char* tensor, int i, bool paged = false) {
  const bool pool = paged && (tensor[0] == 'k' || tensor[0] == 'v');
  return std::string(tensor) + ".shape[" + std::to_string(i) + "] (" + (pool ? kPoolDimNames : kDimNames)[i] + ")";
}

// Range [lo, hi) of a small fp32/int32 array the kernel reads.
Status check_array(const char* name, const void* data, std::int64_t count, std::int64_t stride0, std::int64_t rows,
                   std::size_t elem, Extent* e) {
  const std::int64_t shape[2] = {rows, count}, stride[2] = {stride0, 1};
  if (!data) return bad(std::string(name) + " is null");
  return check_layout(name, data, shape, stride, elem, false, e);
}

Status check_varlen(const AttentionArgs& a, std::int64_t Sq_total, std::int64_t Sk_total, Extent* cu_q, Extent* cu_k) {
  const Varlen& vl = *a.varlen;
  for (const auto& [name, view] : {std::pair<const char*, const TensorView*>{"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"o", &a.o}})
    if (view->shape[0] != 1 && !(a.paged && (view == &a.k || view == &a.v)))
      return bad(dim(name, 0) + " must be 1 with varlen (sequences are packed along shape[1]), got " +
                 std::to_string(view->shape[0]));
  if (vl.batch < 0 || vl.batch > kMaxBatch)
    return bad("varlen.batch must be in [0, " + std::to_string(kMaxBatch) + "], got " + std::to_string(vl.batch));
  if (vl.max_seqlen_q < 0 || vl.max_seqlen_q > Sq_total)
    return bad("varlen.max_seqlen_q must be in [0, q.shape[1] = " + std::to_string(Sq_total) + "], got " +
               std::to_string(vl.max_seqlen_q));
  if (vl.max_seqlen_k < 0 || vl.max_seqlen_k > Sk_total)
    return bad(std::string("varlen.max_seqlen_k must be in [0, ") + (a.paged ? "paged.max_pages * k.shape[1]" : "k.shape[1]") +
               " = " + std::to_string(Sk_total) + "], got " + std::to_string(vl.max_seqlen_k));
  FJ_TRY(check_array("varlen.cu_seqlens_q", vl.cu_seqlens_q, vl.batch + 1, 0, 1, sizeof(std::int32_t), cu_q));
  // Paged keys come through the block table: no key prefix sums needed (ignored if given).
  if (!a.paged) FJ_TRY(check_array("varlen.cu_seqlens_k", vl.cu_seqlens_k, vl.batch + 1, 0, 1, sizeof(std::int32_t), cu_k));
  return {};
}

// Page pools and the block table's row: what bounds the keys a sequence may hold. The table's
// rows are checked later, once the number of sequences (varlen.batch with varlen) is.
Status check_paged(const AttentionArgs& a) {
  const PagedKv& pk = *a.paged;
  if (!a.kv_lens) return bad("paged needs kv_lens: how many keys each sequence uses");
  const std::int64_t page_size = a.k.shape[1];
  if (page_size < 1 || page_size > kMaxPageSize)
    return bad(dim("k", 1, true) + " is the page size with paged and must be in [1, " + std::to_string(kMaxPageSize) +
               "], got " + std::to_string(page_size));
  if (a.k.shape[0] < 1 || a.k.shape[0] > kMaxPages)
    return bad(dim("k", 0, true) + " is the number of pages with paged and must be in [1, " + std::to_string(kMaxPages) +
               "], got " + std::to_string(a.k.shape[0]));
  // Bounded before any product: max_pages * page_size keys a sequence, at most 2^30 (a caller's
  // 2^56 pages of 256 keys wrapped to 0 and passed).
  const std::int64_t most_pages = kMaxSeqLen / page_size;
  if (pk.max_pages < 1 || pk.max_pages > most_pages)
    return bad("paged.max_pages must be in [1, " + std::to_string(most_pages) + "] (max_pages * k.shape[1], the page size, " +
               "is the keys a sequence may hold: at most 2^30), got " + std::to_string(pk.max_pages));
  if (pk.table_stride < pk.max_pages)
    return bad("paged.table_stride must be >= paged.max_pages = " + std::to_string(pk.max_pages) + ", got " +
               std::to_string(pk.table_stride));
  return {};
}

}  // namespace

int widest_vec(std::initializer_list<const TensorView*> views, std::size_t elem) {
  for (const TensorView* v : views)
    if (v->stride[3] != 1 && v->shape[3] > 1) return 1;
  constexpr std::size_t kWidestAccessBytes = 16;  // one 128-bit load or store a thread
  for (int vec = int(kWidestAccessBytes / elem); vec > 1; vec /= 2) {
    bool ok = true;
    for (const TensorView* v : views) {
      if (!multiple_of(v->shape[3], vec) || !multiple_of(reinterpret_cast<std::uintptr_t>(v->data), vec * elem)) ok = false;
      for (int i = 0; i < 3; ++i)
        if (!multiple_of(v->stride[i], vec)) ok = false;
    }
    if (ok) return vec;
  }
  return 1;
}

Result<AttentionProblem> validate_problem(const AttentionArgs& a) {
  AttentionProblem out;
  out.args = &a;
  if (!a.workspace.data && a.workspace.bytes != 0)
    return bad("workspace.bytes is " + std::to_string(a.workspace.bytes) + " but workspace.data is null");
  if (reinterpret_cast<std::uintptr_t>(a.workspace.data) % kWorkspaceAlignment != 0)
    return bad("workspace.data must be " + std::to_string(kWorkspaceAlignment) + "-byte aligned");
  if (a.sm_margin < 0 || a.sm_margin > kMaxSmMargin)
    return bad("sm_margin must be in [0, " + std::to_string(kMaxSmMargin) + "] (SMs left to other kernels), got " +
               std::to_string(a.sm_margin));
  const DType dt = a.q.dtype;
  for (const auto& [name, view] : {std::pair<const char*, const TensorView*>{"k", &a.k}, {"v", &a.v}, {"o", &a.o}}) {
    if (view->dtype != dt)
      return Error(Code::unsupported, std::string("unsupported dtype combination: q is ") + dtype_name(dt) + " but " + name +
                                          " is " + dtype_name(view->dtype) + "; q, k, v and o must share one dtype");
  }
  if (dt != DType::f16 && dt != DType::bf16 && dt != DType::f32)
    return Error(Code::unsupported, "q.dtype must be f16, bf16 or f32");

  const std::int64_t B = a.q.shape[0], Sq = a.q.shape[1], Hq = a.q.shape[2], Dqk = a.q.shape[3];
  const std::int64_t Sk = a.k.shape[1], Hkv = a.k.shape[2], Dv = a.v.shape[3];
  const bool paged = a.paged.has_value();
  for (const auto& [name, view] : {std::pair<const char*, const TensorView*>{"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"o", &a.o}})
    for (int i = 0; i < 4; ++i)
      if (view->shape[i] < 0) return bad(dim(name, i, paged) + " must be >= 0, got " + std::to_string(view->shape[i]));
  // Shapes must agree: k [B,Sk,Hkv,Dqk], v [B,Sk,Hkv,Dv], o [B,Sq,Hq,Dv]; paged k and v are
  // [pages, page_size, Hkv, D] pools instead.
  struct Rule { const char* t; int i; std::int64_t want; const char* why; };
  const Rule rules[] = {
      {"k", 0, paged ? a.k.shape[0] : B, "q.shape[0]"}, {"v", 0, paged ? a.k.shape[0] : B, paged ? "k.shape[0]" : "q.shape[0]"},
      {"o", 0, B, "q.shape[0]"},
      {"v", 1, Sk, "k.shape[1]"}, {"o", 1, Sq, "q.shape[1]"},
      {"v", 2, Hkv, "k.shape[2]"}, {"o", 2, Hq, "q.shape[2]"},
      {"k", 3, Dqk, "q.shape[3]"}, {"o", 3, Dv, "v.shape[3]"},
  };
  for (const Rule& r : rules) {
    const TensorView& v = r.t[0] == 'k' ? a.k : r.t[0] == 'v' ? a.v : a.o;
    if (v.shape[r.i] != r.want)
      return bad(dim(r.t, r.i, paged) + " is " + std::to_string(v.shape[r.i]) + " but must equal " + r.why + " = " +
                 std::to_string(r.want));
  }
  if (Dqk < 1 || Dqk > kMaxHeadDim) return bad(dim("q", 3) + " must be in [1, 256], got " + std::to_string(Dqk));
  if (Dv < 1 || Dv > kMaxHeadDim) return bad(dim("v", 3) + " must be in [1, 256], got " + std::to_string(Dv));
  if (Hkv == 0 && Hq > 0) return bad(dim("k", 2) + " is 0 but q has " + std::to_string(Hq) + " heads");
  if (Hkv > 0 && Hq != Hkv && Hq % Hkv != 0)  // the common Hq == Hkv skips a division
    return bad("q.shape[2] (Hq = " + std::to_string(Hq) + ") must be a multiple of k.shape[2] (Hkv = " + std::to_string(Hkv) + ")");
  if (Hq > kMaxHeads) return bad(dim("q", 2) + " must be at most 65535, got " + std::to_string(Hq));
  // Bounded even where q has no heads to divide it: families multiply it by the batch and rows.
  if (Hkv > kMaxHeads) return bad(dim("k", 2) + " must be at most 65535, got " + std::to_string(Hkv));
  if (B > kMaxBatch) return bad(dim("q", 0) + " must be at most 65535, got " + std::to_string(B));
  if (Sq > kMaxSeqLen) return bad(dim("q", 1) + " must be at most 2^30, got " + std::to_string(Sq));
  // A paged pool's shape[1] is its page size: bounded with the pool's other rules, before its
  // extent (a huge page size would be reported as the pool overlapping o).
  if (paged)
    FJ_TRY(check_paged(a));
  else if (Sk > kMaxSeqLen)
    return bad(dim("k", 1) + " must be at most 2^30, got " + std::to_string(Sk));

  const std::size_t elem = dtype_size(dt);
  Extent eq, ek, ev, eo, el, ecq, eck, ealibi, etable;
  FJ_TRY(check_layout("q", a.q.data, a.q.shape, a.q.stride, elem, false, &eq));
  FJ_TRY(check_layout("k", a.k.data, a.k.shape, a.k.stride, elem, false, &ek));
  FJ_TRY(check_layout("v", a.v.data, a.v.shape, a.v.stride, elem, false, &ev));
  FJ_TRY(check_layout("o", a.o.data, a.o.shape, a.o.stride, elem, true, &eo));
  if (overlaps(eo, eq) || overlaps(eo, ek) || overlaps(eo, ev)) return bad("o must not overlap q, k or v in memory");

  // The problem's sizes: per sequence, or the max over a varlen batch. A paged cache holds up to
  // max_pages * page_size keys per sequence.
  std::int64_t batch = B, seq_q = Sq, seq_k = paged ? a.paged->max_pages * Sk : Sk;
  if (a.varlen) {
    FJ_TRY(check_varlen(a, Sq, seq_k, &ecq, &eck));
    batch = a.varlen->batch, seq_q = a.varlen->max_seqlen_q;
    seq_k = paged && !a.varlen->cu_seqlens_k ? seq_k : a.varlen->max_seqlen_k;
  }
  // A table row per sequence: counted (and, with varlen, checked) above.
  if (paged)
    FJ_TRY(check_array("paged.block_table", a.paged->block_table, a.paged->max_pages, a.paged->table_stride, batch,
                       sizeof(std::int32_t), &etable));
  if (a.lse) {
    const LseView& l = *a.lse;
    const std::int64_t want[3] = {B, Hq, Sq};
    const char* names[3] = {"batch", "heads_q", "seq_q"};
    for (int i = 0; i < 3; ++i)
      if (l.shape[i] != want[i])
        return bad("lse.shape[" + std::to_string(i) + "] (" + names[i] + ") is " + std::to_string(l.shape[i]) + " but must be " + std::to_string(want[i]));
    FJ_TRY(check_layout("lse", l.data, l.shape, l.stride, sizeof(float), true, &el));
    if (overlaps(el, eq) || overlaps(el, ek) || overlaps(el, ev) || overlaps(el, eo))
      return bad("lse must not overlap q, k, v or o in memory");
  }
  float scale = 1.0f / std::sqrt(float(std::max<std::int64_t>(Dqk, 1)));
  if (a.softmax_scale) {
    scale = *a.softmax_scale;
    if (!finite_positive.holds(scale))
      return bad("softmax_scale must be " + std::string(finite_positive.text) + ", got " + printable(scale));
  }
  if (a.mask != Mask::none && a.mask != Mask::causal) return bad("mask must be none or causal");
  if (a.fp32_math != Fp32Math::exact && a.fp32_math != Fp32Math::tf32) return bad("fp32_math must be exact or tf32");
  const bool causal = a.mask == Mask::causal;

  bool window = false;
  if (a.window) {
    const Window& w = *a.window;
    if (w.left < Window::kUnbounded) return bad("window.left must be >= 0, or -1 for unbounded, got " + std::to_string(w.left));
    if (w.right < Window::kUnbounded) return bad("window.right must be >= 0, or -1 for unbounded, got " + std::to_string(w.right));
    if (causal && w.right > 0)
      return bad("window.right must be 0 or -1 with a causal mask (causal ends each row's keys at its diagonal), got " +
                 std::to_string(w.right));
    window = w.left >= 0 || (!causal && w.right >= 0);
    // A side wider than every sequence is unbounded; clamping keeps kernel sums in int32.
    const std::int64_t span = std::max(seq_q, seq_k);
    out.window_left = int(w.left < 0 ? span : std::min(w.left, span));
    out.window_right = causal ? 0 : int(w.right < 0 ? span : std::min(w.right, span));
  }
  // The per-call scalars (flashjit/scalars.h): each given one passes its rule.
#define FJ_CHECK_SCALAR(type, field, rule, constant, tag, typical, backward, params, why)              \
  if (a.field) {                                                                                     \
    out.field = *a.field;                                                                            \
    if (!rule.holds(out.field))                                                                      \
      return bad(#field " must be " + std::string(rule.text) + ", got " + printable(out.field));     \
  }
  FLASHJIT_SCALAR_ROWS(FJ_CHECK_SCALAR)
#undef FJ_CHECK_SCALAR
  if (a.alibi) {
    if (a.alibi->batch_stride < 0)
      return bad("alibi.batch_stride must be >= 0, got " + std::to_string(a.alibi->batch_stride));
    FJ_TRY(check_array("alibi.slopes", a.alibi->slopes, Hq, a.alibi->batch_stride, batch, sizeof(float), &ealibi));
  }
  // The kernel reads these while writing o and lse: they must not share memory.
  for (const auto& [name, e] : {std::pair<const char*, const Extent*>{"varlen.cu_seqlens_q", &ecq}, {"varlen.cu_seqlens_k", &eck},
                                {"alibi.slopes", &ealibi}, {"paged.block_table", &etable}})
    if (overlaps(*e, eo) || overlaps(*e, el)) return bad(std::string(name) + " must not overlap o or lse in memory");
  // The per-call device arrays (flashjit/device_arrays.h): `extent` elements in bounds, apart from
  // o and lse like the arrays above.
  const std::int64_t heads_q = Hq;
#define FJ_CHECK_DEVICE_ARRAY(elem, field, extent, constant, tag, why)                                         \
  if (a.field) {                                                                                               \
    Extent e;                                                                                                  \
    FJ_TRY(check_array(#field, a.field, extent, 0, 1, sizeof(elem), &e));                                      \
    if (overlaps(e, eo) || overlaps(e, el)) return bad(#field " must not overlap o or lse in memory");         \
  }
  FLASHJIT_DEVICE_ARRAY_ROWS(FJ_CHECK_DEVICE_ARRAY)
#undef FJ_CHECK_DEVICE_ARRAY

  // Every size is bounded now: the families multiply a batch, a head count and a length (query
  // blocks, tiles, workspace rows) in int64 without checks.
  static_assert(kMaxSeqLen <= std::numeric_limits<std::int64_t>::max() / kMaxBatch / kMaxHeads,
                "a batch x heads x length product must fit int64");
  out.shape = {batch, seq_q, seq_k, Hq, Hkv, paged ? Sk : 0};
  out.empty = batch == 0 || seq_q == 0 || Hq == 0 || Sq == 0;
  out.scale = scale;
  Semantics& s = out.semantics;
  s.dtype = dt;
  s.fp32_math = dt == DType::f32 ? a.fp32_math : Fp32Math::exact;
  s.head_dim_qk = int(Dqk);
  s.head_dim_v = int(Dv);
  s.mask = a.mask;
  s.gqa = Hkv > 0 && Hq != Hkv;
  s.write_lse = a.lse.has_value();
  s.varlen = a.varlen.has_value();
  s.window = window;
#define FJ_SCALAR_FLAG(type, field, rule, constant, tag, typical, backward, params, why) s.field = a.field.has_value();
  FLASHJIT_SCALAR_ROWS(FJ_SCALAR_FLAG)
#undef FJ_SCALAR_FLAG
  s.alibi = a.alibi.has_value();
#define FJ_DEVICE_ARRAY_FLAG(elem, field, extent, constant, tag, why) s.field = a.field != nullptr;
  FLASHJIT_DEVICE_ARRAY_ROWS(FJ_DEVICE_ARRAY_FLAG)
#undef FJ_DEVICE_ARRAY_FLAG
  s.paged = paged;
  s.vec = widest_vec({&a.q, &a.k, &a.v, &a.o}, elem);
  return out;
}

}  // namespace flashjit
