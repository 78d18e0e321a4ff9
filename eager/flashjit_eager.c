/* flashjit's eager fast path: attention_dense's work without PyTorch's dispatcher.
 *
 * ops.dense() calls dense() here for eager calls on plain CUDA tensors (no compiler, no mode, no
 * autograd to record); everything else takes torch.ops.flashjit.attention_dense as before. It does
 * what that operator's C++ kernel (torch_op/flashjit_torch_op.cpp) does for its arguments, with
 * the same checks and messages, but reaches PyTorch through the DLPack exchange API
 * (torch.Tensor.__dlpack_c_exchange_api__, ATen/dlpack.h) instead of the dispatcher:
 *   - the tensors through dltensor_from_py_object_no_sync (a view of the TensorImpl, no reference
 *     taken, nothing allocated);
 *   - the stream through current_work_stream (torch.cuda.current_stream of the tensors' device);
 *   - the output through managed_tensor_allocator (torch.empty on PyTorch's caching allocator, on
 *     that stream: so a CUDA graph's pool while it captures) and managed_tensor_to_py_object_no_sync.
 * The engine is the one the package loaded, bound by address from Python (bind()): this module
 * links neither libtorch nor libflashjit.so, only the Python limited API (abi3, Python >= 3.10).
 *
 * dense() returns NotImplemented where it declines a call that the operator may still take: a
 * tensor that is not on CUDA, a torch.Tensor subclass, a tensor DLPack cannot describe, a device
 * that is not the thread's current one (the operator switches devices; this does not), a failed
 * allocation (the operator raises PyTorch's own out-of-memory error). Arguments of other types
 * raise TypeError naming the argument; bad tensors raise flashjit's FlashjitError with the
 * operator's message, and the engine's refusals with the engine's message. Nothing is written
 * before every check has passed. Written in C: no C++ exception can cross into Python. */
#define Py_LIMITED_API 0x030A0000 /* METH_FASTCALL joined the limited API in 3.10 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "ATen/dlpack.h"
#include "flashjit/flashjit.h"

/* Bumped when bind()'s or dense()'s contract changes; ops.py refuses other values. 2: set_guards()
 * and flash_attn(). */
#define EAGER_VERSION 2
#define CAPSULE_NAME "dlpack_exchange_api"
#define DIMS 4                      /* dense q, k, v, out: [batch, seq, heads, head_dim] */
#define DENSE_ARGS 8                /* q, k, v, softmax_scale, causal, window_left, window_right, softcap */
#define FA_ARGS 7                   /* q, k, v, softmax_scale, causal, window_size, softcap */
#define MAX_GUARDS 8                /* ops.py passes four; room for PyTorch to grow one or two */
#define CU_STREAM_CAPTURE_STATUS_NONE 0

typedef flashjit_status (*ForwardFn)(flashjit_engine*, const flashjit_attention_args_v2*, void*);
typedef flashjit_status (*WorkspaceSizeFn)(flashjit_engine*, const flashjit_attention_args_v2*, void*, uint64_t*);
typedef const char* (*LastErrorFn)(void);
typedef int (*StreamIsCapturingFn)(void* stream, int* status); /* CUresult (CUstream, CUstreamCaptureStatus*) */
typedef int (*CtxGetDeviceFn)(int* device);                     /* CUresult (CUdevice*) */

/* What bind() was given; dense() refuses to run before. */
static struct {
  const DLPackExchangeAPI* api;
  PyObject* api_owner;   /* the capsule (or int) the API came from, kept alive */
  PyObject* tensor_type; /* torch.Tensor: the only type taken as it is */
  PyObject* error_type;  /* flashjit.FlashjitError */
  flashjit_engine* engine;
  ForwardFn forward;
  WorkspaceSizeFn workspace_size;
  LastErrorFn last_error;
} g;

/* The tests' CPU mode (_cpu_for_tests): CPU tensors stand in for CUDA ones, as the torch op's
 * CPU registration does; no stream, device or capture query. */
static int g_cpu_for_tests;
/* Calls this path ran to the end (calls()): how the tests see that it was taken. */
static unsigned long long g_calls;
/* NULL: outputs from the exchange API's allocator. Else torch.Tensor.new_empty, called as
 * new_empty(q, shape): a tensor whose storage the caching allocator owns, so record_stream and
 * storage resizes work on it as on the operator's output (set_output_allocator()). Where the
 * output has q's shape and q is contiguous, torch.empty_like(q) gives the same tensor for about
 * half the host time (no size or keyword to parse): g_empty_like. */
static PyObject* g_new_empty;
static PyObject* g_empty_like;

/* set_guards(): torch.is_grad_enabled, and the predicates (torch-function mode, dispatch modes,
 * profiler, tracer) under which only the operator may run. Checked here rather than in ops.py:
 * five calls from C cost a fifth of what the same checks cost as Python bytecode. */
static struct {
  PyObject* grad_enabled;
  PyObject* any[MAX_GUARDS];
  int count;
  PyObject* requires_grad; /* the interned attribute name */
} g_guards;

/* The CUDA driver PyTorch already loaded: the capture status of a stream (for the workspace, as
 * the operator does) and the thread's current device (the engine runs on the current context). */
static struct {
  int state; /* 0: not looked up yet; 1: found; -1: missing */
  StreamIsCapturingFn stream_is_capturing;
  CtxGetDeviceFn ctx_get_device;
} g_driver;

static int driver_found(void) {
  if (g_driver.state == 0) {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!lib) lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (lib) {
      g_driver.stream_is_capturing = (StreamIsCapturingFn)dlsym(lib, "cuStreamIsCapturing");
      g_driver.ctx_get_device = (CtxGetDeviceFn)dlsym(lib, "cuCtxGetDevice");
    }
    g_driver.state = g_driver.stream_is_capturing && g_driver.ctx_get_device ? 1 : -1;
  }
  return g_driver.state == 1;
}

/* ---- Arguments ---- */

/* "int", "str": the name of obj's type, for TypeError (tp_name is not in the limited API). */
static PyObject* type_name(PyObject* obj) {
  PyObject* name = PyObject_GetAttrString((PyObject*)Py_TYPE(obj), "__name__");
  if (!name) {
    PyErr_Clear();
    name = PyUnicode_FromString("?");
  }
  return name;
}

static PyObject* wrong_type(const char* arg, const char* want, PyObject* obj) {
  PyObject* name = type_name(obj);
  if (name) {
    PyErr_Format(PyExc_TypeError, "flashjit eager dense: %s must be %s, got %U", arg, want, name);
    Py_DECREF(name);
  }
  return NULL;
}

/* A float argument (Python float or int, as float() takes them); 0 on success. */
static int as_double(PyObject* obj, const char* arg, double* out) {
  if (!PyFloat_Check(obj) && !PyLong_Check(obj)) return wrong_type(arg, "a float", obj), -1;
  *out = PyFloat_AsDouble(obj);
  if (*out == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "flashjit eager dense: %s must be a float", arg);
    return -1;
  }
  return 0;
}

/* An int64 argument (Python int or bool, `want` naming it for the message); 0 on success. */
static int as_int64(PyObject* obj, const char* arg, const char* want, long long* out) {
  if (!PyLong_Check(obj)) return wrong_type(arg, want, obj), -1;
  *out = PyLong_AsLongLong(obj);
  if (*out == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "flashjit eager dense: %s must be an int within int64", arg);
    return -1;
  }
  return 0;
}

/* torch's name of a DLPack dtype, for the dtypes the torch op names ("float16"), else NULL. */
static const char* dtype_name(DLDataType t) {
  if (t.lanes != 1) return NULL;
  switch (t.code) {
    case kDLFloat: return t.bits == 16 ? "float16" : t.bits == 32 ? "float32" : t.bits == 64 ? "float64" : NULL;
    case kDLBfloat: return t.bits == 16 ? "bfloat16" : NULL;
    case kDLInt:
      return t.bits == 8 ? "int8" : t.bits == 16 ? "int16" : t.bits == 32 ? "int32" : t.bits == 64 ? "int64" : NULL;
    case kDLUInt:
      return t.bits == 8 ? "uint8" : t.bits == 16 ? "uint16" : t.bits == 32 ? "uint32" : t.bits == 64 ? "uint64" : NULL;
    case kDLBool: return t.bits == 8 ? "bool" : NULL;
    case kDLComplex:
      return t.bits == 32 ? "complex32" : t.bits == 64 ? "complex64" : t.bits == 128 ? "complex128" : NULL;
    case kDLFloat8_e4m3fn: return t.bits == 8 ? "float8_e4m3fn" : NULL;
    case kDLFloat8_e5m2: return t.bits == 8 ? "float8_e5m2" : NULL;
    case kDLFloat8_e4m3fnuz: return t.bits == 8 ? "float8_e4m3fnuz" : NULL;
    case kDLFloat8_e5m2fnuz: return t.bits == 8 ? "float8_e5m2fnuz" : NULL;
    default: return NULL;
  }
}

/* flashjit's dtype code, or -1. */
static int flashjit_dtype_of(DLDataType t) {
  if (t.lanes != 1) return -1;
  if (t.code == kDLFloat && t.bits == 16) return FLASHJIT_F16;
  if (t.code == kDLBfloat && t.bits == 16) return FLASHJIT_BF16;
  if (t.code == kDLFloat && t.bits == 32) return FLASHJIT_F32;
  return -1;
}

static int same_dtype(DLDataType a, DLDataType b) { return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes; }

/* str(torch.device) of a CUDA (or, in the tests' mode, CPU) tensor. */
static void device_str(DLDevice d, char* out, size_t size) {
  if (d.device_type == kDLCPU) snprintf(out, size, "cpu");
  else snprintf(out, size, "cuda:%d", (int)d.device_id);
}

/* The torch op's checks (ops._check_inputs on dense tensors) once all three are on the GPU, in
 * its order and with its messages; 0 when they pass, -1 with FlashjitError set, 1 to decline
 * (a dtype the op would name but this file cannot: the op then says it). */
static int check_tensors(const DLTensor* t) {
  static const char* const names[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    if (flashjit_dtype_of(t[i].dtype) >= 0) continue;
    const char* name = dtype_name(t[i].dtype);
    if (!name) return 1;
    PyErr_Format(g.error_type, "%s must be float16, bfloat16 or float32, got torch.%s", names[i], name);
    return -1;
  }
  if (t[0].ndim != DIMS) {
    PyErr_Format(g.error_type, "q must be [batch, seq, heads, head_dim], got %d dims", (int)t[0].ndim);
    return -1;
  }
  for (int i = 1; i < 3; ++i) {
    if (t[i].device.device_type != t[0].device.device_type || t[i].device.device_id != t[0].device.device_id) {
      char here[32], there[32];
      device_str(t[i].device, here, sizeof here);
      device_str(t[0].device, there, sizeof there);
      PyErr_Format(g.error_type, "%s is on %s but q is on %s", names[i], here, there);
      return -1;
    }
    if (!same_dtype(t[i].dtype, t[0].dtype)) {
      PyErr_Format(g.error_type, "q, k and v must share one dtype: q is torch.%s, %s is torch.%s",
                   dtype_name(t[0].dtype), names[i], dtype_name(t[i].dtype));
      return -1;
    }
    if (t[i].ndim != DIMS) {
      PyErr_Format(g.error_type, "%s must have %d dims here, got %d", names[i], DIMS, (int)t[i].ndim);
      return -1;
    }
  }
  return 0;
}

/* flashjit_tensor of a 4-d DLTensor (shape, strides in elements, data + byte_offset). */
static void fill_tensor(flashjit_tensor* out, const DLTensor* t, int32_t code) {
  out->data = (const char*)t->data + t->byte_offset;
  out->dtype = code;
  out->reserved = 0;
  int64_t contiguous = 1; /* DLPack >= 1.2 always gives strides; this covers a producer that doesn't */
  for (int i = DIMS - 1; i >= 0; --i) {
    out->shape[i] = t->shape[i];
    out->stride[i] = t->strides ? t->strides[i] : contiguous;
    contiguous *= t->shape[i];
  }
}

/* ---- PyTorch's allocator ---- */

/* The allocator's error callback: the caller declines and the operator, retrying the allocation,
 * raises PyTorch's own error (torch.OutOfMemoryError rather than DLPack's MemoryError kind). */
static void ignore_error(void* ctx, const char* kind, const char* message) { (void)ctx, (void)kind, (void)message; }

/* A new contiguous tensor through the exchange API (torch.empty on `device` and its current
 * stream): NULL when PyTorch refused (no Python error left set). */
static DLManagedTensorVersioned* allocate(DLDevice device, DLDataType dtype, int32_t ndim, int64_t* shape) {
  DLTensor prototype;
  memset(&prototype, 0, sizeof prototype);
  prototype.device = device;
  prototype.dtype = dtype;
  prototype.ndim = ndim;
  prototype.shape = shape;
  DLManagedTensorVersioned* managed = NULL;
  if (g.api->managed_tensor_allocator(&prototype, &managed, NULL, ignore_error) != 0 || !managed) {
    PyErr_Clear();
    return NULL;
  }
  return managed;
}

/* Whether a 4-d tensor's strides are row-major (where empty_like keeps them: the operator's own
 * output layout). Dims of extent 1 may have any stride, as torch's is_contiguous() allows. */
static int contiguous(const DLTensor* t) {
  if (!t->strides) return 1;
  int64_t expected = 1;
  for (int i = DIMS - 1; i >= 0; --i) {
    if (t->shape[i] != 1 && t->strides[i] != expected) return 0;
    expected *= t->shape[i];
  }
  return 1;
}

/* `shape` as a tuple of ints (a borrowed reference, NULL with an error set). The last one is
 * kept: calls of one shape, the common case, then build it once (a tuple of ints is immutable, so
 * handing the same one to new_empty each time is safe). */
static PyObject* shape_tuple(const int64_t* shape) {
  static PyObject* last;
  static int64_t last_shape[DIMS];
  if (last && memcmp(last_shape, shape, sizeof last_shape) == 0) return last;
  PyObject* dims = Py_BuildValue("(LLLL)", (long long)shape[0], (long long)shape[1], (long long)shape[2],
                                 (long long)shape[3]);
  if (!dims) return NULL;
  Py_XDECREF(last);
  last = dims;
  memcpy(last_shape, shape, sizeof last_shape);
  return last;
}

/* The output [batch, seq_q, heads_q, head_dim_v] in q's dtype on q's device, as a torch.Tensor
 * (`tensor`, a new reference) and as flashjit_tensor (`view`); 0, or 1 to decline. The view is
 * read before the Python tensor takes the DLPack tensor over. */
static int output(const DLTensor* q, const DLTensor* v, PyObject** tensor, flashjit_tensor* view, int32_t code,
                  PyObject* q_obj) {
  int64_t shape[DIMS] = {q->shape[0], q->shape[1], q->shape[2], v->shape[3]};
  if (g_new_empty && q_obj) {
    PyObject* out = NULL;
    if (g_empty_like && v->shape[3] == q->shape[3] && contiguous(q)) {
      out = PyObject_CallFunctionObjArgs(g_empty_like, q_obj, NULL);
    } else {
      PyObject* dims = shape_tuple(shape);
      out = dims ? PyObject_CallFunctionObjArgs(g_new_empty, q_obj, dims, NULL) : NULL;
    }
    DLTensor t;
    if (!out || g.api->dltensor_from_py_object_no_sync(out, &t) != 0) {
      Py_XDECREF(out);
      PyErr_Clear();
      return 1;
    }
    fill_tensor(view, &t, code);
    *tensor = out;
    return 0;
  }
  DLManagedTensorVersioned* managed = allocate(q->device, q->dtype, DIMS, shape);
  if (!managed) return 1;
  fill_tensor(view, &managed->dl_tensor, code);
  PyObject* out = NULL;
  /* On failure PyTorch may or may not have taken the DLPack tensor over: it is left alone (a
   * leak at worst, never a double free). */
  if (g.api->managed_tensor_to_py_object_no_sync(managed, (void**)&out) != 0 || !out) {
    PyErr_Clear();
    return 1;
  }
  *tensor = out;
  return 0;
}

/* ---- The engine ---- */

static PyObject* engine_error(void) {
  const char* message = g.last_error ? g.last_error() : NULL;
  PyErr_SetString(g.error_type, message && *message ? message : "flashjit: the engine failed without a message");
  return NULL;
}

/* On the stream being captured into a CUDA graph: the workspace from PyTorch's allocator (the
 * graph's pool), not the engine's per-stream pool, as ops._run and the torch op do. 0 when set
 * (or not needed; *ws stays NULL), -1 with an error set, 1 to decline. */
static int capture_workspace(flashjit_attention_args_v2* args, void* stream, DLDevice device,
                             DLManagedTensorVersioned** ws) {
  int status = CU_STREAM_CAPTURE_STATUS_NONE;
  const int rc = g_driver.stream_is_capturing(stream, &status);
  if (rc != 0) {
    PyErr_Format(g.error_type, "flashjit: cuStreamIsCapturing failed (CUresult %d)", rc);
    return -1;
  }
  if (status == CU_STREAM_CAPTURE_STATUS_NONE) return 0;
  uint64_t bytes = 0;
  flashjit_status ok;
  Py_BEGIN_ALLOW_THREADS /* planning may compile the kernel: seconds */
  ok = g.workspace_size(g.engine, args, stream, &bytes);
  Py_END_ALLOW_THREADS
  if (ok != FLASHJIT_OK) return engine_error(), -1;
  if (!bytes) return 0;
  int64_t size = (int64_t)bytes;
  const DLDataType u8 = {kDLUInt, 8, 1};
  *ws = allocate(device, u8, 1, &size);
  if (!*ws) return 1;
  args->workspace = (char*)(*ws)->dl_tensor.data + (*ws)->dl_tensor.byte_offset;
  args->workspace_bytes = bytes;
  return 0;
}

/* The scalars of a dense call, as attention_dense takes them. */
typedef struct {
  double softmax_scale, softcap;
  long long causal, window_left, window_right;
} DenseScalars;

/* 1 where a guard leaves the call to the operator (a torch-function or dispatch mode, the
 * profiler, torch.jit.trace, or autograd recording it: grad mode on and an input that requires
 * grad), 0 where none does, -1 with an error set. */
static int guarded(PyObject* const* tensors) {
  for (int i = 0; i < g_guards.count; ++i) {
    PyObject* r = PyObject_CallNoArgs(g_guards.any[i]);
    if (!r) return -1;
    const int on = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (on) return on;
  }
  if (!g_guards.grad_enabled) return 0;
  PyObject* r = PyObject_CallNoArgs(g_guards.grad_enabled);
  if (!r) return -1;
  const int grad = PyObject_IsTrue(r);
  Py_DECREF(r);
  for (int i = 0; grad > 0 && i < 3; ++i) {
    PyObject* wants = PyObject_GetAttr(tensors[i], g_guards.requires_grad);
    if (!wants) return -1;
    const int on = PyObject_IsTrue(wants);
    Py_DECREF(wants);
    if (on) return on;
  }
  return grad < 0 ? -1 : 0;
}

/* 0 where q, k and v are torch.Tensors, 1 for a subclass (the operator's), -1 with TypeError set. */
static int check_types(PyObject* const* args) {
  static const char* const names[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    if ((PyObject*)Py_TYPE(args[i]) == g.tensor_type) continue;
    if (PyObject_TypeCheck(args[i], (PyTypeObject*)g.tensor_type)) return 1;
    return wrong_type(names[i], "a torch.Tensor", args[i]), -1;
  }
  return 0;
}

/* The call on q, k, v (args[0..2], plain torch.Tensors) with the scalars read: the guards, the
 * operator's checks, the output, the engine. */
static PyObject* run_dense(PyObject* const* args, const DenseScalars* s) {
  const int guard = guarded(args);
  if (guard < 0) return NULL;
  if (guard > 0) Py_RETURN_NOTIMPLEMENTED;

  DLTensor t[3];
  for (int i = 0; i < 3; ++i) {
    if (g.api->dltensor_from_py_object_no_sync(args[i], &t[i]) != 0) { /* e.g. no storage (functorch) */
      PyErr_Clear();
      Py_RETURN_NOTIMPLEMENTED;
    }
    const int on_gpu = t[i].device.device_type == kDLCUDA || (g_cpu_for_tests && t[i].device.device_type == kDLCPU);
    if (!on_gpu) Py_RETURN_NOTIMPLEMENTED;
  }
  const int checked = check_tensors(t);
  if (checked < 0) return NULL;
  if (checked > 0) Py_RETURN_NOTIMPLEMENTED;

  const DLDevice device = t[0].device;
  void* stream = NULL;
  if (device.device_type == kDLCUDA) {
    int current = -1;
    if (!driver_found() || g_driver.ctx_get_device(&current) != 0 || current != device.device_id)
      Py_RETURN_NOTIMPLEMENTED; /* the operator switches to q's device first */
    if (g.api->current_work_stream(kDLCUDA, device.device_id, &stream) != 0) {
      PyErr_Clear();
      Py_RETURN_NOTIMPLEMENTED;
    }
  }

  flashjit_attention_args_v2 a;
  memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.abi_version = FLASHJIT_ABI_VERSION;
  const int32_t code = flashjit_dtype_of(t[0].dtype);
  fill_tensor(&a.q, &t[0], code);
  fill_tensor(&a.k, &t[1], code);
  fill_tensor(&a.v, &t[2], code);
  PyObject* out = NULL;
  if (output(&t[0], &t[2], &out, &a.o, code, args[0])) Py_RETURN_NOTIMPLEMENTED;
  a.mask = s->causal ? FLASHJIT_MASK_CAUSAL : FLASHJIT_MASK_NONE;
  a.fp32_math = FLASHJIT_FP32_EXACT;
  a.softmax_scale = (float)s->softmax_scale;
  a.softcap = (float)s->softcap;
  flashjit_window window = {s->window_left, s->window_right};
  if (s->window_left >= 0 || s->window_right >= 0) a.window = &window;

  DLManagedTensorVersioned* workspace = NULL;
  if (device.device_type == kDLCUDA) {
    const int ws = capture_workspace(&a, stream, device, &workspace);
    if (ws) {
      Py_DECREF(out);
      if (ws > 0) Py_RETURN_NOTIMPLEMENTED;
      return NULL;
    }
  }
  flashjit_status ok;
  Py_BEGIN_ALLOW_THREADS /* the first call of a variant compiles it (about a second) */
  ok = g.forward(g.engine, &a, stream);
  Py_END_ALLOW_THREADS
  if (workspace && workspace->deleter) workspace->deleter(workspace); /* stream-ordered, as the op's */
  if (ok != FLASHJIT_OK) {
    Py_DECREF(out);
    return engine_error();
  }
  ++g_calls;
  return out;
}

/* dense(q, k, v, softmax_scale, causal, window_left, window_right, softcap) -> Tensor or
 * NotImplemented: torch.ops.flashjit.attention_dense's result (see the top of this file). */
static PyObject* dense(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != DENSE_ARGS)
    return PyErr_Format(PyExc_TypeError,
                        "flashjit eager dense takes %d arguments (q, k, v, softmax_scale, causal, window_left, "
                        "window_right, softcap), got %zd", DENSE_ARGS, nargs);
  if (!g.api) return PyErr_Format(PyExc_RuntimeError, "flashjit eager dense: not bound (flashjit.ops binds it)");
  const int types = check_types(args);
  if (types < 0) return NULL;
  if (types > 0) Py_RETURN_NOTIMPLEMENTED;
  DenseScalars s;
  if (as_double(args[3], "softmax_scale", &s.softmax_scale) || as_int64(args[4], "causal", "a bool", &s.causal) ||
      as_int64(args[5], "window_left", "an int", &s.window_left) ||
      as_int64(args[6], "window_right", "an int", &s.window_right) || as_double(args[7], "softcap", &s.softcap))
    return NULL;
  return run_dense(args, &s);
}

/* FlashAttention's optional float (None: `none`, else a Python float or int); 0, or 1 for another
 * type (flash_attn_func's Python route converts it, or raises). */
static int fa_float(PyObject* obj, double none, double* out) {
  if (obj == Py_None) return *out = none, 0;
  if (!PyFloat_Check(obj) && !PyLong_Check(obj)) return 1;
  *out = PyFloat_AsDouble(obj);
  return *out == -1.0 && PyErr_Occurred() ? (PyErr_Clear(), 1) : 0;
}

/* One side of FlashAttention's window_size (None or a Python int; -1 is unbounded); 0, or 1. */
static int fa_side(PyObject* obj, long long* out) {
  if (obj == Py_None) return *out = -1, 0;
  if (!PyLong_Check(obj)) return 1;
  *out = PyLong_AsLongLong(obj);
  return *out == -1 && PyErr_Occurred() ? (PyErr_Clear(), 1) : 0;
}

/* flash_attn(q, k, v, softmax_scale, causal, window_size, softcap) -> Tensor or NotImplemented:
 * flash_attn_func's dense call with FlashAttention's conventions (softmax_scale None: 1/sqrt(d);
 * window_size a pair, None or -1 unbounded; causal ends every row at its diagonal, whatever the
 * window says; softcap None or 0: off), read here so that its Python side is one call. Arguments
 * of other types give NotImplemented: flash_attn_func's Python route then converts or refuses them. */
static PyObject* flash_attn(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != FA_ARGS)
    return PyErr_Format(PyExc_TypeError, "flashjit eager flash_attn takes %d arguments (q, k, v, softmax_scale, "
                        "causal, window_size, softcap), got %zd", FA_ARGS, nargs);
  if (!g.api) return PyErr_Format(PyExc_RuntimeError, "flashjit eager flash_attn: not bound (flashjit.ops binds it)");
  const int types = check_types(args);
  if (types < 0) return NULL;
  DenseScalars s;
  if (types > 0 || fa_float(args[3], 0.0, &s.softmax_scale) || fa_float(args[6], 0.0, &s.softcap))
    Py_RETURN_NOTIMPLEMENTED;
  const int causal = PyBool_Check(args[4]) || PyLong_Check(args[4]) ? PyObject_IsTrue(args[4]) : -1;
  if (causal < 0) {
    PyErr_Clear();
    Py_RETURN_NOTIMPLEMENTED;
  }
  s.causal = causal;
  PyObject* w = args[5];
  if (w == Py_None) {
    s.window_left = s.window_right = -1;
  } else {
    const int pair = PyTuple_Check(w) ? PyTuple_Size(w) == 2 : PyList_Check(w) ? PyList_Size(w) == 2 : 0;
    PyObject* left = !pair ? NULL : PyTuple_Check(w) ? PyTuple_GetItem(w, 0) : PyList_GetItem(w, 0);
    PyObject* right = !pair ? NULL : PyTuple_Check(w) ? PyTuple_GetItem(w, 1) : PyList_GetItem(w, 1);
    if (!left || !right || fa_side(left, &s.window_left) || fa_side(right, &s.window_right)) {
      PyErr_Clear();
      Py_RETURN_NOTIMPLEMENTED;
    }
  }
  if (s.causal) s.window_right = 0;
  return run_dense(args, &s);
}

/* set_guards(is_grad_enabled, predicates): see g_guards; (None, ()) turns the guards off (tests). */
static PyObject* set_guards(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 2 || (args[0] != Py_None && !PyCallable_Check(args[0])) || !PyTuple_Check(args[1]) ||
      PyTuple_Size(args[1]) > MAX_GUARDS)
    return PyErr_Format(PyExc_TypeError, "set_guards takes (torch.is_grad_enabled or None, a tuple of at most %d "
                        "callables)", MAX_GUARDS);
  const Py_ssize_t count = PyTuple_Size(args[1]);
  for (Py_ssize_t i = 0; i < count; ++i)
    if (!PyCallable_Check(PyTuple_GetItem(args[1], i)))
      return PyErr_Format(PyExc_TypeError, "set_guards: predicate %zd is not callable", i);
  if (!g_guards.requires_grad && !(g_guards.requires_grad = PyUnicode_InternFromString("requires_grad"))) return NULL;
  for (int i = 0; i < g_guards.count; ++i) Py_CLEAR(g_guards.any[i]);
  Py_CLEAR(g_guards.grad_enabled);
  for (Py_ssize_t i = 0; i < count; ++i) {
    g_guards.any[i] = PyTuple_GetItem(args[1], i);
    Py_INCREF(g_guards.any[i]);
  }
  g_guards.count = (int)count;
  if (args[0] != Py_None) {
    Py_INCREF(args[0]);
    g_guards.grad_enabled = args[0];
  }
  Py_RETURN_NONE;
}

/* _output_like(q, v) -> Tensor: dense()'s output allocation alone (for bench/op_overhead.py). */
static PyObject* output_like(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 2) return PyErr_Format(PyExc_TypeError, "_output_like takes 2 arguments (q, v), got %zd", nargs);
  if (!g.api) return PyErr_Format(PyExc_RuntimeError, "flashjit eager: not bound");
  DLTensor t[2];
  for (int i = 0; i < 2; ++i) {
    if ((PyObject*)Py_TYPE(args[i]) != g.tensor_type) return wrong_type(i ? "v" : "q", "a torch.Tensor", args[i]);
    if (g.api->dltensor_from_py_object_no_sync(args[i], &t[i]) != 0) return NULL;
    if (t[i].ndim != DIMS) return PyErr_Format(PyExc_ValueError, "_output_like takes 4-d tensors");
  }
  PyObject* out = NULL;
  flashjit_tensor view;
  if (output(&t[0], &t[1], &out, &view, 0, args[0])) return PyErr_Format(PyExc_MemoryError, "PyTorch's allocator refused");
  return out;
}

/* ---- Binding ---- */

static void* address_of(PyObject* obj, const char* what) {
  void* p = PyLong_Check(obj) ? PyLong_AsVoidPtr(obj) : NULL;
  if (!p && !PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%s must be a nonzero address (int)", what);
  return p;
}

/* bind(exchange_api, tensor_type, error_type, engine, forward_v2, workspace_size_v2, last_error,
 * abi_version, args_v2_size): exchange_api is torch.Tensor.__dlpack_c_exchange_api__ (a capsule
 * "dlpack_exchange_api", or the address torch 2.10's __c_dlpack_exchange_api__ gives); the rest as
 * for flashjit_torch_op_bind. Raises ValueError naming what does not fit, binding nothing. */
static PyObject* bind(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 9) return PyErr_Format(PyExc_TypeError, "bind takes 9 arguments, got %zd", nargs);
  const DLPackExchangeAPI* api = NULL;
  if (PyCapsule_IsValid(args[0], CAPSULE_NAME)) {
    api = (const DLPackExchangeAPI*)PyCapsule_GetPointer(args[0], CAPSULE_NAME);
  } else if (PyLong_Check(args[0])) {
    api = (const DLPackExchangeAPI*)PyLong_AsVoidPtr(args[0]);
  } else {
    return PyErr_Format(PyExc_ValueError, "the DLPack exchange API must be a \"%s\" capsule or an address",
                        CAPSULE_NAME);
  }
  if (!api) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "the DLPack exchange API is NULL");
  /* A new major version may change the table; a newer minor only appends to it. */
  const DLPackVersion v = api->header.version;
  if (v.major != DLPACK_MAJOR_VERSION || v.minor < DLPACK_MINOR_VERSION)
    return PyErr_Format(PyExc_ValueError, "the DLPack exchange API is version %u.%u; this module needs %d.%d or a "
                        "later %d.x", v.major, v.minor, DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION,
                        DLPACK_MAJOR_VERSION);
  if (!api->managed_tensor_allocator || !api->managed_tensor_to_py_object_no_sync ||
      !api->dltensor_from_py_object_no_sync || !api->current_work_stream)
    return PyErr_Format(PyExc_ValueError, "the DLPack exchange API lacks a function this module calls");
  if (!PyType_Check(args[1])) return PyErr_Format(PyExc_ValueError, "tensor_type must be a type (torch.Tensor)");
  if (!PyExceptionClass_Check(args[2]))
    return PyErr_Format(PyExc_ValueError, "error_type must be an exception class (flashjit.FlashjitError)");
  void* engine = address_of(args[3], "engine");
  void* forward = engine ? address_of(args[4], "forward_v2") : NULL;
  void* workspace_size = forward ? address_of(args[5], "workspace_size_v2") : NULL;
  void* last_error = workspace_size ? address_of(args[6], "last_error") : NULL;
  if (!last_error) return NULL;
  const long abi = PyLong_Check(args[7]) ? PyLong_AsLong(args[7]) : -1;
  const unsigned long long size = PyLong_Check(args[8]) ? PyLong_AsUnsignedLongLong(args[8]) : 0;
  if (PyErr_Occurred()) return NULL;
  if (abi < FLASHJIT_ABI_VERSION || size < sizeof(flashjit_attention_args_v2))
    return PyErr_Format(PyExc_ValueError, "libflashjit (ABI %ld, %llu-byte arguments) is older than this module (ABI "
                        "%d, %zu bytes)", abi, size, FLASHJIT_ABI_VERSION, sizeof(flashjit_attention_args_v2));
  Py_INCREF(args[0]);
  Py_INCREF(args[1]);
  Py_INCREF(args[2]);
  Py_XDECREF(g.api_owner);
  Py_XDECREF(g.tensor_type);
  Py_XDECREF(g.error_type);
  g.api = api;
  g.api_owner = args[0];
  g.tensor_type = args[1];
  g.error_type = args[2];
  g.engine = (flashjit_engine*)engine;
  g.forward = (ForwardFn)forward;
  g.workspace_size = (WorkspaceSizeFn)workspace_size;
  g.last_error = (LastErrorFn)last_error;
  Py_RETURN_NONE;
}

/* set_output_allocator(new_empty, empty_like) or (None, None): see g_new_empty. */
static PyObject* set_output_allocator(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 2 || (args[0] == Py_None) != (args[1] == Py_None) ||
      (args[0] != Py_None && (!PyCallable_Check(args[0]) || !PyCallable_Check(args[1]))))
    return PyErr_Format(PyExc_TypeError,
                        "set_output_allocator takes (torch.Tensor.new_empty, torch.empty_like) or (None, None)");
  Py_CLEAR(g_new_empty);
  Py_CLEAR(g_empty_like);
  if (args[0] != Py_None) {
    Py_INCREF(args[0]);
    Py_INCREF(args[1]);
    g_new_empty = args[0];
    g_empty_like = args[1];
  }
  Py_RETURN_NONE;
}

static PyObject* calls(PyObject* self, PyObject* unused) {
  (void)self, (void)unused;
  return PyLong_FromUnsignedLongLong(g_calls);
}

static PyObject* version(PyObject* self, PyObject* unused) {
  (void)self, (void)unused;
  return PyLong_FromLong(EAGER_VERSION);
}

static PyObject* cpu_for_tests(PyObject* self, PyObject* on) {
  (void)self;
  const int flag = PyObject_IsTrue(on);
  if (flag < 0) return NULL;
  g_cpu_for_tests = flag;
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"dense", (PyCFunction)(void (*)(void))dense, METH_FASTCALL,
     "dense(q, k, v, softmax_scale, causal, window_left, window_right, softcap) -> Tensor, or NotImplemented where "
     "torch.ops.flashjit.attention_dense must run instead"},
    {"flash_attn", (PyCFunction)(void (*)(void))flash_attn, METH_FASTCALL,
     "flash_attn(q, k, v, softmax_scale, causal, window_size, softcap) -> Tensor, or NotImplemented: "
     "flash_attn_func's dense call with FlashAttention's argument conventions"},
    {"set_guards", (PyCFunction)(void (*)(void))set_guards, METH_FASTCALL,
     "set_guards(torch.is_grad_enabled or None, (predicate, ...)): calls decline while any predicate is true or "
     "autograd would record them"},
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "bind(exchange_api, tensor_type, error_type, engine, forward_v2, workspace_size_v2, last_error, abi_version, "
     "args_v2_size)"},
    {"calls", calls, METH_NOARGS, "calls dense() ran to the end"},
    {"set_output_allocator", (PyCFunction)(void (*)(void))set_output_allocator, METH_FASTCALL,
     "set_output_allocator(torch.Tensor.new_empty, torch.empty_like) or (None, None): outputs from PyTorch's own "
     "allocation, or the exchange API's"},
    {"version", version, METH_NOARGS, "the version of bind()'s and dense()'s contract"},
    {"_output_like", (PyCFunction)(void (*)(void))output_like, METH_FASTCALL,
     "_output_like(q, v) -> Tensor: dense()'s output allocation alone"},
    {"_cpu_for_tests", cpu_for_tests, METH_O, "_cpu_for_tests(on): CPU tensors stand in for CUDA ones (tests)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_flashjit_eager",
                                    "flashjit's eager fast path (see flashjit.ops.dense)", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__flashjit_eager(void) { return PyModule_Create(&module); }
