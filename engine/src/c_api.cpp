// The C ABI over the C++ API: converts structs, catches everything, keeps a thread-local message.
#include "flashjit/flashjit.h"

#include <algorithm>
#include <cstdint>
#include <cstddef>
#include <cstring>
#include <exception>
#include <limits>
#include <new>
#include <string>
#include <type_traits>

#include "flashjit/flashjit.hpp"

struct flashjit_engine {
  std::unique_ptr<flashjit::Engine> engine;
};

namespace {

thread_local std::string g_last_error;

flashjit_status to_status(flashjit::Code c) {
  using flashjit::Code;
  switch (c) {
    case Code::ok: return FLASHJIT_OK;
    case Code::invalid_argument: return FLASHJIT_INVALID_ARGUMENT;
    case Code::unsupported: return FLASHJIT_UNSUPPORTED;
    case Code::compile_failed: return FLASHJIT_COMPILE_FAILED;
    case Code::driver_error: return FLASHJIT_DRIVER_ERROR;
    case Code::library_missing: return FLASHJIT_LIBRARY_MISSING;
    case Code::io_error: return FLASHJIT_IO_ERROR;
    case Code::corrupt: return FLASHJIT_CORRUPT;
    case Code::permission_denied: return FLASHJIT_PERMISSION_DENIED;
    case Code::not_found: return FLASHJIT_NOT_FOUND;
    case Code::internal: return FLASHJIT_INTERNAL;
  }
  return FLASHJIT_INTERNAL;
}

flashjit_status fail(const flashjit::Error& e) {
  g_last_error = e.to_string();
  return to_status(e.code());
}

flashjit_status fail(flashjit_status s, std::string msg) {
  g_last_error = std::move(msg);
  return s;
}

// One tensor view; returns an error for a dtype the C++ enum cannot hold.
flashjit::Status convert_tensor(const flashjit_tensor& src, const char* name, flashjit::TensorView& dst) {
  using namespace flashjit;
  if (src.dtype < 0 || src.dtype > 2)
    return Error(Code::invalid_argument, std::string(name) + ".dtype must be FLASHJIT_F16, FLASHJIT_BF16 or FLASHJIT_F32, got " + std::to_string(src.dtype));
  if (src.reserved != 0) return Error(Code::invalid_argument, std::string(name) + ".reserved must be 0");
  dst.data = src.data;
  dst.dtype = static_cast<DType>(src.dtype);
  for (int i = 0; i < 4; ++i) dst.shape[i] = src.shape[i], dst.stride[i] = src.stride[i];
  return {};
}

// The fields v1 and v2 share; returns an error for values the C++ enums cannot hold.
flashjit::Status convert_common(const flashjit_tensor* const (&tensors)[4], const flashjit_lse* lse, int32_t mask,
                                int32_t fp32_math, float softmax_scale, flashjit::AttentionArgs& out) {
  using namespace flashjit;
  TensorView* dst[4] = {&out.q, &out.k, &out.v, &out.o};
  const char* names[4] = {"q", "k", "v", "o"};
  for (int t = 0; t < 4; ++t) FJ_TRY(convert_tensor(*tensors[t], names[t], *dst[t]));
  if (lse) {
    LseView l;
    l.data = lse->data;
    for (int i = 0; i < 3; ++i) l.shape[i] = lse->shape[i], l.stride[i] = lse->stride[i];
    out.lse = l;
  }
  if (mask != FLASHJIT_MASK_NONE && mask != FLASHJIT_MASK_CAUSAL)
    return Error(Code::invalid_argument, "mask must be FLASHJIT_MASK_NONE or FLASHJIT_MASK_CAUSAL, got " + std::to_string(mask));
  out.mask = static_cast<Mask>(mask);
  if (fp32_math != FLASHJIT_FP32_EXACT && fp32_math != FLASHJIT_FP32_TF32)
    return Error(Code::invalid_argument, "fp32_math must be FLASHJIT_FP32_EXACT or FLASHJIT_FP32_TF32, got " + std::to_string(fp32_math));
  out.fp32_math = static_cast<Fp32Math>(fp32_math);
  if (softmax_scale != 0.f) out.softmax_scale = softmax_scale;
  return {};
}

// The converters fill a default-constructed `out` in the caller's frame: the arguments are
// built once, not copied out of a Result (a few hundred bytes a call on the dispatch path).
flashjit::Status convert(const flashjit_attention_args* a, flashjit::AttentionArgs& out) {
  using namespace flashjit;
  if (!a) return Error(Code::invalid_argument, "args is null");
  FJ_TRY(convert_common({&a->q, &a->k, &a->v, &a->o}, a->lse, a->mask, a->fp32_math, a->softmax_scale, out));
  if (a->reserved != 0) return Error(Code::invalid_argument, "args.reserved must be 0");
  return {};
}

// flashjit_attention_args_v2 is written out (its layout is the ABI); each per-call scalar of
// flashjit/scalars.h must be a member of it, of the list's type (a new one is appended at its end).
#define FJ_ABI_HAS_SCALAR(type, field, rule, constant, tag, typical, backward, params, why)                 \
  static_assert(std::is_same_v<decltype(flashjit_attention_args_v2::field), type>,                         \
                "flashjit_attention_args_v2." #field " must be a " #type " (flashjit/scalars.h)");
FLASHJIT_SCALAR_ROWS(FJ_ABI_HAS_SCALAR)
#undef FJ_ABI_HAS_SCALAR

// The first published v2 struct ends at `paged`: a caller's struct_size is at least that.
constexpr std::size_t kArgsV2MinSize = offsetof(flashjit_attention_args_v2, paged) + sizeof(const void*);
// The backward's struct was published whole, in ABI version 5.
constexpr std::size_t kBackwardV1MinSize = sizeof(flashjit_backward_args_v1);
constexpr std::uint32_t kBackwardAbi = 5;

// Reads a caller's size-prefixed struct of any size: fields this library does not know must be
// zero (a newer caller asking for something this library cannot do is refused, not ignored).
// `older` says what callers of older ABI versions use instead. The answer is the caller's own
// struct when it holds every field this library knows (no copy on the dispatch path), else an
// older caller's shorter struct copied into `padded`, the fields it lacks zero.
template <class T>
flashjit::Result<const T*> read_sized(const T* a, std::size_t min_size, std::uint32_t min_abi, const char* what,
                                      const char* older, T& padded) {
  using namespace flashjit;
  if (!a) return Error(Code::invalid_argument, "args is null");
  const std::size_t size = a->struct_size;
  if (size < min_size)
    return Error(Code::invalid_argument, "args.struct_size is " + std::to_string(size) + " but must be at least " +
                                             std::to_string(min_size) + " (sizeof(" + what + "))");
  if (a->abi_version < min_abi)
    return Error(Code::invalid_argument, "args.abi_version must be " + std::to_string(min_abi) + " or newer for " + what +
                                             ", got " + std::to_string(a->abi_version) + older);
  // Bound the scan: a size past this is a garbage value, not a future struct.
  constexpr std::size_t kMaxArgsSize = 4096;
  if (size > kMaxArgsSize)
    return Error(Code::invalid_argument, "args.struct_size is " + std::to_string(size) + ", more than any version has");
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(a);
  for (std::size_t i = sizeof(T); i < size; ++i)
    if (bytes[i] != 0)
      return Error(Code::unsupported, "args sets a field at byte " + std::to_string(i) +
                                          " that this flashjit (ABI version " + std::to_string(FLASHJIT_ABI_VERSION) +
                                          ") does not know; update the library");
  if (size >= sizeof(T)) return a;
  padded = T{};
  std::memcpy(&padded, a, size);
  return &padded;
}

flashjit::Status convert(const flashjit_attention_args_v2* args, flashjit::AttentionArgs& out) {
  using namespace flashjit;
  flashjit_attention_args_v2 padded;
  auto read = read_sized(args, kArgsV2MinSize, 2, "flashjit_attention_args_v2", " (v1 callers use flashjit_forward)",
                         padded);
  if (!read.ok()) return std::move(read).error();
  const flashjit_attention_args_v2& a = *read.value();
  FJ_TRY(convert_common({&a.q, &a.k, &a.v, &a.o}, a.lse, a.mask, a.fp32_math, a.softmax_scale, out));
  // The per-call scalars (flashjit/scalars.h): 0 is unset; validation refuses what breaks a rule.
#define FJ_CONVERT_SCALAR(type, field, rule, constant, tag, typical, backward, params, why) \
  if (a.field != type(0)) out.field = a.field;
  FLASHJIT_SCALAR_ROWS(FJ_CONVERT_SCALAR)
#undef FJ_CONVERT_SCALAR
  if (a.varlen)
    out.varlen = Varlen{a.varlen->cu_seqlens_q, a.varlen->cu_seqlens_k, a.varlen->batch, a.varlen->max_seqlen_q,
                        a.varlen->max_seqlen_k};
  if (a.window) out.window = Window{a.window->left, a.window->right};
  if (a.alibi) out.alibi = Alibi{a.alibi->slopes, a.alibi->batch_stride};
#define FJ_CONVERT_DEVICE_ARRAY(elem, field, extent, constant, tag, why) out.field = a.field;
  FLASHJIT_DEVICE_ARRAY_ROWS(FJ_CONVERT_DEVICE_ARRAY)
#undef FJ_CONVERT_DEVICE_ARRAY
  if (a.paged) out.paged = PagedKv{a.paged->block_table, a.paged->table_stride, a.paged->max_pages};
  if (a.flags & ~FLASHJIT_CHECK_METADATA)
    return Error(Code::unsupported, "args.flags sets bits this flashjit does not know: " + std::to_string(a.flags));
  if (a.sm_margin > std::uint32_t(std::numeric_limits<int>::max()))
    return Error(Code::invalid_argument, "args.sm_margin is " + std::to_string(a.sm_margin) + ", far past any GPU's SMs");
  out.sm_margin = int(a.sm_margin);
  out.check_metadata = (a.flags & FLASHJIT_CHECK_METADATA) != 0;
  out.workspace = {a.workspace, a.workspace_bytes};
  return {};
}

flashjit::Status convert(const flashjit_backward_args_v1* args, flashjit::BackwardArgs& out) {
  using namespace flashjit;
  flashjit_backward_args_v1 padded;
  auto read = read_sized(args, kBackwardV1MinSize, kBackwardAbi, "flashjit_backward_args_v1", "", padded);
  if (!read.ok()) return std::move(read).error();
  const flashjit_backward_args_v1& a = *read.value();
  if (!a.forward) return Error(Code::invalid_argument, "args.forward is null: the forward's arguments are required");
  if (auto forward = convert(a.forward, out.forward); !forward.ok())
    return Error(forward.error().code(), "forward: " + forward.error().message());
  FJ_TRY(convert_tensor(a.dout, "dout", out.dout));
  FJ_TRY(convert_tensor(a.dq, "dq", out.dq));
  FJ_TRY(convert_tensor(a.dk, "dk", out.dk));
  FJ_TRY(convert_tensor(a.dv, "dv", out.dv));
  out.dsinks = a.dsinks;
  if (a.flags & ~FLASHJIT_DETERMINISTIC)
    return Error(Code::unsupported, "args.flags sets bits this flashjit does not know: " + std::to_string(a.flags));
  if (a.reserved != 0) return Error(Code::invalid_argument, "args.reserved must be 0");
  out.deterministic = (a.flags & FLASHJIT_DETERMINISTIC) != 0;
  out.workspace = {a.workspace, a.workspace_bytes};
  return {};
}

template <class F>
flashjit_status guarded(F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return fail(FLASHJIT_INTERNAL, "out of host memory");
  } catch (const std::exception& e) {
    return fail(FLASHJIT_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(FLASHJIT_INTERNAL, "internal error");
  }
}

template <class Args>
flashjit_status forward_any(flashjit_engine* engine, const Args* args, void* stream) {
  return guarded([&] {
    if (!engine) return fail(FLASHJIT_INVALID_ARGUMENT, "engine is null");
    flashjit::AttentionArgs a;
    if (auto st = convert(args, a); !st.ok()) return fail(st.error());
    auto st = engine->engine->forward(a, static_cast<CUstream>(stream));
    if (!st.ok()) return fail(st.error());
    return FLASHJIT_OK;
  });
}

// A variant's name into a caller's buffer of name_cap bytes (NUL-terminated, truncated; none if null).
void copy_name(const std::string& n, char* name_out, uint64_t name_cap) {
  if (!name_out || name_cap == 0) return;
  const std::size_t len = std::min<std::size_t>(n.size(), name_cap - 1);
  std::memcpy(name_out, n.data(), len);
  name_out[len] = '\0';
}

template <class Args>
flashjit_status precompile_any(flashjit_engine* engine, const Args* args, const char* arch, char* name_out,
                               uint64_t name_cap) {
  return guarded([&] {
    if (!engine) return fail(FLASHJIT_INVALID_ARGUMENT, "engine is null");
    if (!arch) return fail(FLASHJIT_INVALID_ARGUMENT, "arch is null");
    flashjit::AttentionArgs a;
    if (auto st = convert(args, a); !st.ok()) return fail(st.error());
    auto p = engine->engine->plan(a, arch);
    if (!p.ok()) return fail(p.error());
    auto r = engine->engine->compile(p->variant, arch);
    if (!r.ok()) return fail(r.error());
    copy_name(p->variant.name(), name_out, name_cap);
    return FLASHJIT_OK;
  });
}

}  // namespace

extern "C" {

uint64_t flashjit_args_size(void) { return sizeof(flashjit_attention_args); }
int flashjit_abi_version(void) { return FLASHJIT_ABI_VERSION; }

const char* flashjit_version(void) {
  static const std::string v = flashjit::version();
  return v.c_str();
}

const char* flashjit_last_error(void) { return g_last_error.c_str(); }

flashjit_status flashjit_engine_create(flashjit_engine** out) {
  return guarded([&] {
    if (!out) return fail(FLASHJIT_INVALID_ARGUMENT, "out is null");
    *out = nullptr;
    auto e = flashjit::Engine::create();
    if (!e.ok()) return fail(e.error());
    *out = new flashjit_engine{std::move(e).value()};
    return FLASHJIT_OK;
  });
}

void flashjit_engine_destroy(flashjit_engine* engine) { delete engine; }

flashjit_status flashjit_engine_set_sm_margin(flashjit_engine* engine, int32_t sm_margin) {
  return guarded([&] {
    if (!engine) return fail(FLASHJIT_INVALID_ARGUMENT, "engine is null");
    auto st = engine->engine->set_sm_margin(sm_margin);
    if (!st.ok()) return fail(st.error());
    return FLASHJIT_OK;
  });
}

flashjit_status flashjit_forward(flashjit_engine* engine, const flashjit_attention_args* args, void* stream) {
  return forward_any(engine, args, stream);
}

flashjit_status flashjit_precompile(flashjit_engine* engine, const flashjit_attention_args* args, const char* arch,
                                    char* name_out, uint64_t name_cap) {
  return precompile_any(engine, args, arch, name_out, name_cap);
}

flashjit_status flashjit_forward_v2(flashjit_engine* engine, const flashjit_attention_args_v2* args, void* stream) {
  return forward_any(engine, args, stream);
}

flashjit_status flashjit_precompile_v2(flashjit_engine* engine, const flashjit_attention_args_v2* args, const char* arch,
                                       char* name_out, uint64_t name_cap) {
  return precompile_any(engine, args, arch, name_out, name_cap);
}

flashjit_status flashjit_workspace_size_v2(flashjit_engine* engine, const flashjit_attention_args_v2* args, void* stream,
                                           uint64_t* bytes_out) {
  return guarded([&] {
    if (!engine) return fail(FLASHJIT_INVALID_ARGUMENT, "engine is null");
    if (!bytes_out) return fail(FLASHJIT_INVALID_ARGUMENT, "bytes_out is null");
    flashjit::AttentionArgs a;
    if (auto st = convert(args, a); !st.ok()) return fail(st.error());
    auto bytes = engine->engine->workspace_size(a, static_cast<CUstream>(stream));
    if (!bytes.ok()) return fail(bytes.error());
    *bytes_out = bytes.value();
    return FLASHJIT_OK;
  });
}

uint64_t flashjit_args_v2_size(void) { return sizeof(flashjit_attention_args_v2); }

flashjit_status flashjit_backward_v1(flashjit_engine* engine, const flashjit_backward_args_v1* args, void* stream) {
  return guarded([&] {
    if (!engine) return fail(FLASHJIT_INVALID_ARGUMENT, "engine is null");
    flashjit::BackwardArgs a;
    if (auto st = convert(args, a); !st.ok()) return fail(st.error());
    auto st = engine->engine->backward(a, static_cast<CUstream>(stream));
    if (!st.ok()) return fail(st.error());
    return FLASHJIT_OK;
  });
}

flashjit_status flashjit_backward_workspace_size_v1(flashjit_engine* engine, const flashjit_backward_args_v1* args,
                                                    void* stream, uint64_t* bytes_out) {
  return guarded([&] {
    if (!engine) return fail(FLASHJIT_INVALID_ARGUMENT, "engine is null");
    if (!bytes_out) return fail(FLASHJIT_INVALID_ARGUMENT, "bytes_out is null");
    flashjit::BackwardArgs a;
    if (auto st = convert(args, a); !st.ok()) return fail(st.error());
    auto bytes = engine->engine->backward_workspace_size(a, static_cast<CUstream>(stream));
    if (!bytes.ok()) return fail(bytes.error());
    *bytes_out = bytes.value();
    return FLASHJIT_OK;
  });
}

flashjit_status flashjit_precompile_backward_v1(flashjit_engine* engine, const flashjit_backward_args_v1* args,
                                                const char* arch, char* name_out, uint64_t name_cap) {
  return guarded([&] {
    if (!engine) return fail(FLASHJIT_INVALID_ARGUMENT, "engine is null");
    if (!arch) return fail(FLASHJIT_INVALID_ARGUMENT, "arch is null");
    flashjit::BackwardArgs a;
    if (auto st = convert(args, a); !st.ok()) return fail(st.error());
    auto p = engine->engine->plan_backward(a, arch);
    if (!p.ok()) return fail(p.error());
    auto r = engine->engine->compile(p->variant, arch);
    if (!r.ok()) return fail(r.error());
    copy_name(p->variant.name(), name_out, name_cap);
    return FLASHJIT_OK;
  });
}

uint64_t flashjit_backward_args_v1_size(void) { return sizeof(flashjit_backward_args_v1); }

}  // extern "C"
