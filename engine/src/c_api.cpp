// The C ABI over the C++ API: converts structs, catches everything, keeps a thread-local message.
#include "flashjit/flashjit.h"

#include <cstring>
#include <exception>
#include <new>
#include <string>

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

// Converts C args; returns an error for values the C++ enums cannot hold.
flashjit::Result<flashjit::AttentionArgs> convert(const flashjit_attention_args* a) {
  using namespace flashjit;
  if (!a) return Error(Code::invalid_argument, "args is null");
  AttentionArgs out;
  const flashjit_tensor* src[4] = {&a->q, &a->k, &a->v, &a->o};
  TensorView* dst[4] = {&out.q, &out.k, &out.v, &out.o};
  const char* names[4] = {"q", "k", "v", "o"};
  for (int t = 0; t < 4; ++t) {
    if (src[t]->dtype < 0 || src[t]->dtype > 2)
      return Error(Code::invalid_argument, std::string(names[t]) + ".dtype must be FLASHJIT_F16, FLASHJIT_BF16 or FLASHJIT_F32, got " + std::to_string(src[t]->dtype));
    if (src[t]->reserved != 0) return Error(Code::invalid_argument, std::string(names[t]) + ".reserved must be 0");
    dst[t]->data = src[t]->data;
    dst[t]->dtype = static_cast<DType>(src[t]->dtype);
    for (int i = 0; i < 4; ++i) dst[t]->shape[i] = src[t]->shape[i], dst[t]->stride[i] = src[t]->stride[i];
  }
  if (a->lse) {
    LseView l;
    l.data = a->lse->data;
    for (int i = 0; i < 3; ++i) l.shape[i] = a->lse->shape[i], l.stride[i] = a->lse->stride[i];
    out.lse = l;
  }
  if (a->mask != FLASHJIT_MASK_NONE && a->mask != FLASHJIT_MASK_CAUSAL)
    return Error(Code::invalid_argument, "mask must be FLASHJIT_MASK_NONE or FLASHJIT_MASK_CAUSAL, got " + std::to_string(a->mask));
  out.mask = static_cast<Mask>(a->mask);
  if (a->fp32_math != FLASHJIT_FP32_EXACT && a->fp32_math != FLASHJIT_FP32_TF32)
    return Error(Code::invalid_argument, "fp32_math must be FLASHJIT_FP32_EXACT or FLASHJIT_FP32_TF32, got " + std::to_string(a->fp32_math));
  out.fp32_math = static_cast<Fp32Math>(a->fp32_math);
  if (a->softmax_scale != 0.f) out.softmax_scale = a->softmax_scale;
  if (a->reserved != 0) return Error(Code::invalid_argument, "args.reserved must be 0");
  return out;
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

flashjit_status flashjit_forward(flashjit_engine* engine, const flashjit_attention_args* args, void* stream) {
  return guarded([&] {
    if (!engine) return fail(FLASHJIT_INVALID_ARGUMENT, "engine is null");
    auto a = convert(args);
    if (!a.ok()) return fail(a.error());
    auto st = engine->engine->forward(a.value(), static_cast<CUstream>(stream));
    if (!st.ok()) return fail(st.error());
    return FLASHJIT_OK;
  });
}

flashjit_status flashjit_precompile(flashjit_engine* engine, const flashjit_attention_args* args, const char* arch,
                                    char* name_out, uint64_t name_cap) {
  return guarded([&] {
    if (!engine) return fail(FLASHJIT_INVALID_ARGUMENT, "engine is null");
    if (!arch) return fail(FLASHJIT_INVALID_ARGUMENT, "arch is null");
    auto a = convert(args);
    if (!a.ok()) return fail(a.error());
    auto v = engine->engine->plan(a.value(), arch);
    if (!v.ok()) return fail(v.error());
    auto r = engine->engine->compile(v.value(), arch);
    if (!r.ok()) return fail(r.error());
    if (name_out && name_cap > 0) {
      const std::string n = v->name();
      const std::size_t len = std::min<std::size_t>(n.size(), name_cap - 1);
      std::memcpy(name_out, n.data(), len);
      name_out[len] = '\0';
    }
    return FLASHJIT_OK;
  });
}

}  // extern "C"
