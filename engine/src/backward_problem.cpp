#include "backward_problem.hpp"

#include <string>
#include <utility>

#include "tensor_layout.hpp"

namespace flashjit {
namespace {

const char* kDimNames[4] = {"batch", "seq", "heads", "head_dim"};

Error bad(std::string msg) { return Error(Code::invalid_argument, std::move(msg)); }

// A gradient view against the view it belongs to: same dtype, same shape, a valid layout.
Status check_like(const char* name, const TensorView& grad, const char* of_name, const TensorView& of, bool is_output,
                  Extent* extent) {
  if (grad.dtype != of.dtype)
    return Error(Code::unsupported, std::string(name) + ".dtype is " + dtype_name(grad.dtype) + " but must equal " + of_name +
                                        ".dtype = " + dtype_name(of.dtype));
  for (int i = 0; i < 4; ++i)
    if (grad.shape[i] != of.shape[i])
      return bad(std::string(name) + ".shape[" + std::to_string(i) + "] (" + kDimNames[i] + ") is " +
                 std::to_string(grad.shape[i]) + " but must equal " + of_name + ".shape[" + std::to_string(i) + "] = " +
                 std::to_string(of.shape[i]));
  return check_layout(name, grad.data, grad.shape, grad.stride, dtype_size(grad.dtype), is_output, extent);
}

// A small array the kernels read besides the tensors, as a [rows, count] view.
struct ReadArray {
  const char* name = "";
  const void* data = nullptr;
  std::int64_t rows = 0, count = 0, row_stride = 0;
  std::size_t elem = 0;
};
constexpr int kMaxReadArrays = 8;
#define FJ_COUNT_ARRAY(...) +1
static_assert(3 + (0 FLASHJIT_DEVICE_ARRAY_ROWS(FJ_COUNT_ARRAY)) <= kMaxReadArrays, "read_arrays() holds every array");
#undef FJ_COUNT_ARRAY

// The forward's small arrays the kernels read: prefix sums, ALiBi slopes and the per-sequence and
// per-head arrays (flashjit/device_arrays.h), each bounded by the forward's validation; located
// here for the gradients' overlap check. No block table: no backward family reads page pools.
int read_arrays(const AttentionArgs& f, const ProblemShape& shape, ReadArray (&out)[kMaxReadArrays]) {
  const std::int64_t batch = shape.batch, heads_q = shape.heads_q;  // the names the extents use
  int n = 0;
  if (f.varlen) {
    out[n++] = {"forward.varlen.cu_seqlens_q", f.varlen->cu_seqlens_q, 1, batch + 1, 0, sizeof(std::int32_t)};
    if (!f.paged) out[n++] = {"forward.varlen.cu_seqlens_k", f.varlen->cu_seqlens_k, 1, batch + 1, 0, sizeof(std::int32_t)};
  }
  if (f.alibi) out[n++] = {"forward.alibi.slopes", f.alibi->slopes, batch, heads_q, f.alibi->batch_stride, sizeof(float)};
#define FJ_READ_ARRAY(elem, field, extent, constant, tag, why) \
  if (f.field) out[n++] = {"forward." #field, f.field, 1, extent, 0, sizeof(elem)};
  FLASHJIT_DEVICE_ARRAY_ROWS(FJ_READ_ARRAY)
#undef FJ_READ_ARRAY
  return n;
}

}  // namespace

Result<AttentionProblem> validate_backward(const BackwardArgs& a) {
  const AttentionArgs& f = a.forward;
  if (f.workspace.data || f.workspace.bytes)
    return bad("forward.workspace must be empty in a backward call: give the backward's in BackwardArgs::workspace");
  auto problem = validate_problem(f);
  if (!problem.ok()) return Error(problem.error().code(), "forward: " + problem.error().message());
  AttentionProblem out = std::move(problem).value();
  if (!f.lse)
    return bad("forward.lse is required by backward(): the forward's fp32 log-sum-exp [batch, heads_q, seq_q], from "
               "which the backward recomputes the probabilities");
  if (!a.workspace.data && a.workspace.bytes != 0)
    return bad("workspace.bytes is " + std::to_string(a.workspace.bytes) + " but workspace.data is null");
  if (reinterpret_cast<std::uintptr_t>(a.workspace.data) % kWorkspaceAlignment != 0)
    return bad("workspace.data must be " + std::to_string(kWorkspaceAlignment) + "-byte aligned");
  if (a.dsinks && !f.sinks)
    return bad("dsinks is given but forward.sinks is null: the sinks' gradient needs the sinks");

  const std::size_t elem = dtype_size(f.q.dtype);
  Extent eq, ek, ev, eo, el, edo, edq, edk, edv;
  FJ_TRY(check_layout("forward.q", f.q.data, f.q.shape, f.q.stride, elem, false, &eq));
  FJ_TRY(check_layout("forward.k", f.k.data, f.k.shape, f.k.stride, elem, false, &ek));
  FJ_TRY(check_layout("forward.v", f.v.data, f.v.shape, f.v.stride, elem, false, &ev));
  FJ_TRY(check_layout("forward.o", f.o.data, f.o.shape, f.o.stride, elem, false, &eo));
  FJ_TRY(check_layout("forward.lse", f.lse->data, f.lse->shape, f.lse->stride, sizeof(float), false, &el));
  FJ_TRY(check_like("dout", a.dout, "forward.o", f.o, false, &edo));
  FJ_TRY(check_like("dq", a.dq, "forward.q", f.q, true, &edq));
  FJ_TRY(check_like("dk", a.dk, "forward.k", f.k, true, &edk));
  FJ_TRY(check_like("dv", a.dv, "forward.v", f.v, true, &edv));
  Extent eds;  // dL/dsinks, fp32 [heads_q]: empty without it
  if (a.dsinks) {
    const std::int64_t shape[1] = {out.shape.heads_q}, stride[1] = {1};
    FJ_TRY(check_layout("dsinks", a.dsinks, shape, stride, sizeof(float), true, &eds));
    Extent esinks;
    FJ_TRY(check_layout("forward.sinks", f.sinks, shape, stride, sizeof(float), false, &esinks));
    if (overlaps(eds, esinks)) return bad("dsinks must not overlap forward.sinks in memory");
  }
  // The kernels read every input while writing the gradients, and each gradient is written by
  // other CTAs than the others: no output may share a byte with anything else.
  const std::pair<const char*, const Extent*> inputs[] = {{"forward.q", &eq}, {"forward.k", &ek}, {"forward.v", &ev},
                                                          {"forward.o", &eo}, {"forward.lse", &el}, {"dout", &edo}};
  const std::pair<const char*, const Extent*> outputs[] = {{"dq", &edq}, {"dk", &edk}, {"dv", &edv}, {"dsinks", &eds}};
  for (const auto& [name, e] : outputs) {
    for (const auto& [in_name, in] : inputs)
      if (overlaps(*e, *in)) return bad(std::string(name) + " must not overlap " + in_name + " in memory");
    for (const auto& [other_name, other] : outputs)
      if (e != other && overlaps(*e, *other)) return bad(std::string(name) + " must not overlap " + other_name + " in memory");
  }
  // Nor with the small arrays the kernels read while other CTAs write the gradients.
  ReadArray arrays[kMaxReadArrays];
  for (int i = 0, n = read_arrays(f, out.shape, arrays); i < n; ++i) {
    const ReadArray& r = arrays[i];
    const std::int64_t shape[2] = {r.rows, r.count}, stride[2] = {r.row_stride, 1};
    Extent e;
    FJ_TRY(check_layout(r.name, r.data, shape, stride, r.elem, false, &e));
    for (const auto& [name, o] : outputs)
      if (overlaps(*o, e)) return bad(std::string(name) + " must not overlap " + r.name + " in memory");
  }

  out.backward = &a;
  out.semantics = backward_semantics(out.semantics);  // the catalog's rule, which warmup names variants by
  out.semantics.deterministic = a.deterministic;
  out.semantics.vec = widest_vec({&f.q, &f.k, &f.v, &f.o, &a.dout, &a.dq, &a.dk, &a.dv}, elem);
  // Keys without queries still get dk = dv = 0 written, and queries without keys dq = 0: only
  // a call with neither (or no heads, no sequences) has nothing to write.
  const ProblemShape& s = out.shape;
  out.empty = s.batch == 0 || s.heads_q == 0 || (s.seqlen_q == 0 && s.seqlen_k == 0);
  return out;
}

Status validate_backward_args(const BackwardArgs& args) {
  auto problem = validate_backward(args);
  if (!problem.ok()) return std::move(problem).error();
  return {};
}

}  // namespace flashjit
