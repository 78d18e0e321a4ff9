#include "problem.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "base/printable.hpp"
#include "tensor_layout.hpp"

namespace flashjit {
namespace {

const char* kDimNames[4] = {"batch", "seq", "heads", "head_dim"};

Error bad(std::string msg) { return Error(Code::invalid_argument, std::move(msg)); }

std::string dim(const char* tensor, int i) {
  return std::string(tensor) + ".shape[" + std::to_string(i) + "] (" + kDimNames[i] + ")";
}

// Widest access (elements) every tensor's pointer, strides and head dims allow, up to 16 bytes.
int pick_vec(const AttentionArgs& a, std::size_t elem) {
  const TensorView* views[4] = {&a.q, &a.k, &a.v, &a.o};
  for (const TensorView* v : views)
    if (v->stride[3] != 1 && v->shape[3] > 1) return 1;
  for (int vec = int(16 / elem); vec > 1; vec /= 2) {
    bool ok = a.q.shape[3] % vec == 0 && a.v.shape[3] % vec == 0;
    for (const TensorView* v : views) {
      if (reinterpret_cast<std::uintptr_t>(v->data) % (vec * elem)) ok = false;
      for (int i = 0; i < 3; ++i)
        if (v->stride[i] % vec) ok = false;
    }
    if (ok) return vec;
  }
  return 1;
}

}  // namespace

Result<ValidatedProblem> validate_problem(const AttentionArgs& a) {
  ValidatedProblem out;
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
  // Shapes must agree: k [B,Sk,Hkv,Dqk], v [B,Sk,Hkv,Dv], o [B,Sq,Hq,Dv].
  struct Rule { const char* t; int i; std::int64_t want; const char* why; };
  const Rule rules[] = {
      {"k", 0, B, "q.shape[0]"}, {"v", 0, B, "q.shape[0]"}, {"o", 0, B, "q.shape[0]"},
      {"v", 1, Sk, "k.shape[1]"}, {"o", 1, Sq, "q.shape[1]"},
      {"v", 2, Hkv, "k.shape[2]"}, {"o", 2, Hq, "q.shape[2]"},
      {"k", 3, Dqk, "q.shape[3]"}, {"o", 3, Dv, "v.shape[3]"},
  };
  for (const Rule& r : rules) {
    const TensorView& v = r.t[0] == 'k' ? a.k : r.t[0] == 'v' ? a.v : a.o;
    if (v.shape[r.i] != r.want)
      return bad(dim(r.t, r.i) + " is " + std::to_string(v.shape[r.i]) + " but must equal " + r.why + " = " + std::to_string(r.want));
  }
  if (Dqk < 1 || Dqk > kMaxHeadDim) return bad(dim("q", 3) + " must be in [1, 256], got " + std::to_string(Dqk));
  if (Dv < 1 || Dv > kMaxHeadDim) return bad(dim("v", 3) + " must be in [1, 256], got " + std::to_string(Dv));
  const std::pair<const TensorView*, int> sizes[] = {{&a.q, 0}, {&a.q, 1}, {&a.q, 2}, {&a.k, 1}, {&a.k, 2}};
  for (const auto& [view, i] : sizes)
    if (view->shape[i] < 0)
      return bad(dim(view == &a.q ? "q" : "k", i) + " must be >= 0, got " + std::to_string(view->shape[i]));
  if (Hkv == 0 && Hq > 0) return bad(dim("k", 2) + " is 0 but q has " + std::to_string(Hq) + " heads");
  if (Hkv > 0 && Hq % Hkv != 0)
    return bad("q.shape[2] (Hq = " + std::to_string(Hq) + ") must be a multiple of k.shape[2] (Hkv = " + std::to_string(Hkv) + ")");
  if (Hq > kMaxHeads) return bad(dim("q", 2) + " must be at most 65535");
  if (B > kMaxBatch) return bad(dim("q", 0) + " must be at most 65535");
  if (Sq > kMaxSeqLen || Sk > kMaxSeqLen) return bad("sequence lengths must be at most 2^30");

  const std::size_t elem = dtype_size(dt);
  Extent eq, ek, ev, eo, el;
  FJ_TRY(check_layout("q", a.q.data, a.q.shape, a.q.stride, elem, false, &eq));
  FJ_TRY(check_layout("k", a.k.data, a.k.shape, a.k.stride, elem, false, &ek));
  FJ_TRY(check_layout("v", a.v.data, a.v.shape, a.v.stride, elem, false, &ev));
  FJ_TRY(check_layout("o", a.o.data, a.o.shape, a.o.stride, elem, true, &eo));
  if (overlaps(eo, eq) || overlaps(eo, ek) || overlaps(eo, ev)) return bad("o must not overlap q, k or v in memory");
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
    if (!std::isfinite(scale) || scale <= 0.f) return bad("softmax_scale must be finite and > 0, got " + printable(scale));
  }
  if (a.mask != Mask::none && a.mask != Mask::causal) return bad("mask must be none or causal");
  if (a.fp32_math != Fp32Math::exact && a.fp32_math != Fp32Math::tf32) return bad("fp32_math must be exact or tf32");

  out.shape = {B, Sq, Sk, Hq, Hkv};
  out.empty = B == 0 || Sq == 0 || Hq == 0;
  Semantics& s = out.semantics;
  s.dtype = dt;
  s.fp32_math = dt == DType::f32 ? a.fp32_math : Fp32Math::exact;
  s.head_dim_qk = int(Dqk);
  s.head_dim_v = int(Dv);
  s.mask = a.mask;
  s.gqa = Hkv > 0 && Hq != Hkv;
  s.write_lse = a.lse.has_value();
  s.vec = pick_vec(a, elem);

  FjFwdParams& p = out.params;
  std::memset(&p, 0, sizeof p);
  p.q = a.q.data;
  p.k = a.k.data;
  p.v = a.v.data;
  p.o = const_cast<void*>(a.o.data);
  p.lse = a.lse ? a.lse->data : nullptr;
  for (int i = 0; i < 4; ++i) {
    p.q_stride[i] = a.q.stride[i];
    p.k_stride[i] = a.k.stride[i];
    p.v_stride[i] = a.v.stride[i];
    p.o_stride[i] = a.o.stride[i];
  }
  if (a.lse)
    for (int i = 0; i < 3; ++i) p.lse_stride[i] = a.lse->stride[i];
  p.batch = int(B);
  p.seqlen_q = int(Sq);
  p.seqlen_k = int(Sk);
  p.heads_q = int(Hq);
  p.heads_kv = int(Hkv);
  p.group = Hkv > 0 ? int(Hq / Hkv) : 1;
  p.causal_offset = int(Sk - Sq);
  p.scale_log2 = float(double(scale) * 1.4426950408889634);  // log2(e)
  return out;
}

}  // namespace flashjit
