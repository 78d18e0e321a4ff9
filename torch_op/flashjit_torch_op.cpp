// torch.ops.flashjit.attention's CUDA kernel in C++, on PyTorch's stable ABI (torch/csrc/stable and
// the AOTI C shims): no libtorch C++ symbols, so one build serves every torch from
// TORCH_TARGET_VERSION (2.10) on. The schema and the fake kernel stay in Python (flashjit/ops.py),
// which loads this library with torch.ops.load_library after defining the schema, binds its engine
// and then registers this kernel for the CUDA key only (flashjit_torch_op_register).
//
// It does what ops.attention (the Python kernel) does, in the same order and with the same
// messages: the argument checks, the outputs' allocation, the current CUDA stream of q's device,
// a workspace from PyTorch's allocator while that stream is being captured into a CUDA graph, and
// flashjit_forward_v2. The engine and the library's entry points are the ones the Python package
// loaded (flashjit_torch_op_bind): this library does not link libflashjit.so, so FLASHJIT_LIB and
// the engine the package created are shared, not duplicated.
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include <dlfcn.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "flashjit/flashjit.h"

#define FLASHJIT_TORCH_OP_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using Tensor = torch::stable::Tensor;
using OptTensor = std::optional<Tensor>;

// Bumped when flashjit_torch_op_bind's contract changes; ops.py refuses other values.
constexpr int32_t kBindVersion = 3;  // 2: the schema's kv_starts; 3: attention_dense

// The library the Python package loaded, bound once before the first call (ops.py).
struct Engine {
  flashjit_engine* engine = nullptr;
  flashjit_status (*forward)(flashjit_engine*, const flashjit_attention_args_v2*, void*) = nullptr;
  flashjit_status (*workspace_size)(flashjit_engine*, const flashjit_attention_args_v2*, void*,
                                    uint64_t*) = nullptr;
  const char* (*last_error)() = nullptr;
};
Engine g_engine;

[[noreturn]] void fail(const std::string& message) { throw std::runtime_error(message); }

void shim(AOTITorchError rc, const char* what) {
  if (rc != AOTI_TORCH_SUCCESS) fail(std::string("flashjit: PyTorch's ") + what + " failed");
}

int32_t dtype_of(const Tensor& t) {
  int32_t d = 0;
  shim(aoti_torch_get_dtype(t.get(), &d), "aoti_torch_get_dtype");
  return d;
}

struct Device {
  int32_t type = 0, index = -1;
  bool operator!=(const Device& o) const { return type != o.type || index != o.index; }
};

Device device_of(const Tensor& t) {
  Device d;
  shim(aoti_torch_get_device_type(t.get(), &d.type), "aoti_torch_get_device_type");
  shim(aoti_torch_get_device_index(t.get(), &d.index), "aoti_torch_get_device_index");
  return d;
}

// str(torch.device): "cpu", "cuda:0".
std::string device_str(const Device& d) {
  std::string name;
  if (d.type == aoti_torch_device_type_cpu()) name = "cpu";
  else if (d.type == aoti_torch_device_type_cuda()) name = "cuda";
  else if (d.type == aoti_torch_device_type_meta()) name = "meta";
  else name = "device type " + std::to_string(d.type);
  return d.index >= 0 ? name + ":" + std::to_string(d.index) : name;
}

// The dtype's name as torch prints it, less "torch.".
std::string dtype_name(int32_t d) {
  static const std::pair<int32_t (*)(), const char*> names[] = {
      {aoti_torch_dtype_float16, "float16"},   {aoti_torch_dtype_bfloat16, "bfloat16"},
      {aoti_torch_dtype_float32, "float32"},   {aoti_torch_dtype_float64, "float64"},
      {aoti_torch_dtype_int8, "int8"},         {aoti_torch_dtype_int16, "int16"},
      {aoti_torch_dtype_int32, "int32"},       {aoti_torch_dtype_int64, "int64"},
      {aoti_torch_dtype_uint8, "uint8"},       {aoti_torch_dtype_uint16, "uint16"},
      {aoti_torch_dtype_uint32, "uint32"},     {aoti_torch_dtype_uint64, "uint64"},
      {aoti_torch_dtype_bool, "bool"},         {aoti_torch_dtype_complex32, "complex32"},
      {aoti_torch_dtype_complex64, "complex64"}, {aoti_torch_dtype_complex128, "complex128"},
      {aoti_torch_dtype_float8_e4m3fn, "float8_e4m3fn"}, {aoti_torch_dtype_float8_e5m2, "float8_e5m2"},
      {aoti_torch_dtype_float8_e4m3fnuz, "float8_e4m3fnuz"}, {aoti_torch_dtype_float8_e5m2fnuz, "float8_e5m2fnuz"}};
  for (const auto& [code, name] : names)
    if (code() == d) return name;
  return "dtype " + std::to_string(d);
}

// Python's list repr of sizes or strides: "[2, 3]".
std::string list_str(torch::headeronly::IntHeaderOnlyArrayRef values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s + "]";
}

// flashjit's dtype code (_abi._DTYPES), or -1.
int32_t flashjit_dtype(int32_t d) {
  if (d == aoti_torch_dtype_float16()) return FLASHJIT_F16;
  if (d == aoti_torch_dtype_bfloat16()) return FLASHJIT_BF16;
  if (d == aoti_torch_dtype_float32()) return FLASHJIT_F32;
  return -1;
}

constexpr int64_t kAny = -1;  // a shape entry that matches any size

// ops._check_side: a side array on q's device, of its dtype, with this shape and a unit inner stride.
void check_side(const char* name, const OptTensor& side, const Device& q_device, int32_t dtype,
                std::initializer_list<int64_t> list) {
  if (!side) return;
  const Tensor& t = *side;
  const Device device = device_of(t);
  if (device != q_device)
    fail(std::string(name) + " is on " + device_str(device) + " but q is on " + device_str(q_device) +
         ": side arrays live on the inputs' GPU");
  const int32_t got = dtype_of(t);
  if (got != dtype) fail(std::string(name) + " must be " + dtype_name(dtype) + ", got " + dtype_name(got));
  const auto sizes = t.sizes();
  const std::vector<int64_t> shape(list);  // past the common case (no side array) only
  bool ok = sizes.size() == shape.size();
  for (size_t i = 0; ok && i < shape.size(); ++i) ok = shape[i] == kAny || sizes[i] == shape[i];
  if (!ok) {
    std::string want = "[";
    for (size_t i = 0; i < shape.size(); ++i)
      want += (i ? ", " : "") + (shape[i] == kAny ? std::string("*") : std::to_string(shape[i]));
    fail(std::string(name) + " must have shape " + want + "], got " + list_str(sizes));
  }
  if (t.numel() && t.stride(-1) != 1)
    fail(std::string(name) + " must have a unit stride in its last dim, got strides " + list_str(t.strides()));
}

// ops._check_inputs. on_cpu: the tests' CPU registration, where CPU tensors stand in for CUDA ones.
void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const OptTensor& cu_seqlens_q,
                  const OptTensor& cu_seqlens_k, const OptTensor& kv_lens, const OptTensor& block_table,
                  const OptTensor& alibi_slopes, const OptTensor& sinks, const OptTensor& kv_starts, bool on_cpu) {
  const bool varlen = cu_seqlens_q.has_value();
  const int64_t want_dim = varlen ? 3 : 4;
  const int32_t runs_on = on_cpu ? aoti_torch_device_type_cpu() : aoti_torch_device_type_cuda();
  const std::pair<const char*, const Tensor*> qkv[] = {{"q", &q}, {"k", &k}, {"v", &v}};
  for (const auto& [name, t] : qkv) {
    const Device device = device_of(*t);
    if (device.type != runs_on)
      fail(std::string(name) + " is on " + device_str(device) + ": flashjit runs on CUDA tensors");
    if (flashjit_dtype(dtype_of(*t)) < 0)
      fail(std::string(name) + " must be float16, bfloat16 or float32, got torch." + dtype_name(dtype_of(*t)));
  }
  if (q.dim() != want_dim)
    fail(std::string("q must be ") +
         (varlen ? "[total_q, heads, head_dim] with cu_seqlens_q" : "[batch, seq, heads, head_dim]") + ", got " +
         std::to_string(q.dim()) + " dims");
  const Device q_device = device_of(q);
  const int32_t q_dtype = dtype_of(q);
  for (const auto& [name, t] : {qkv[1], qkv[2]}) {
    const Device device = device_of(*t);
    if (device != q_device)
      fail(std::string(name) + " is on " + device_str(device) + " but q is on " + device_str(q_device));
    if (dtype_of(*t) != q_dtype)
      fail("q, k and v must share one dtype: q is torch." + dtype_name(q_dtype) + ", " + name + " is torch." +
           dtype_name(dtype_of(*t)));
    const int64_t kv_dim = block_table || !varlen ? 4 : 3;
    if (t->dim() != kv_dim)
      fail(std::string(name) + " must have " + std::to_string(kv_dim) + " dims here, got " +
           std::to_string(t->dim()));
  }
  if (varlen && !cu_seqlens_k && !block_table)
    fail("cu_seqlens_k is needed with cu_seqlens_q (or a block_table with kv_lens)");
  if (varlen && cu_seqlens_q->dim() != 1)
    fail("cu_seqlens_q must be 1-d [batch + 1], got shape " + list_str(cu_seqlens_q->sizes()));
  const int64_t batch = varlen ? cu_seqlens_q->size(0) - 1 : q.size(0);
  const int32_t i32 = aoti_torch_dtype_int32(), f32 = aoti_torch_dtype_float32();
  check_side("cu_seqlens_q", cu_seqlens_q, q_device, i32, {batch + 1});
  check_side("cu_seqlens_k", cu_seqlens_k, q_device, i32, {batch + 1});
  check_side("kv_lens", kv_lens, q_device, i32, {batch});
  check_side("kv_starts", kv_starts, q_device, i32, {batch});
  check_side("block_table", block_table, q_device, i32, {batch, kAny});
  if (block_table && !kv_lens)
    fail("block_table needs kv_lens (cache_seqlens / seqused_k): the keys each sequence uses");
  const int64_t hq = q.size(-2);
  if (alibi_slopes) {
    if (alibi_slopes->dim() == 1) check_side("alibi_slopes", alibi_slopes, q_device, f32, {hq});
    else check_side("alibi_slopes", alibi_slopes, q_device, f32, {batch, hq});
  }
  check_side("sinks", sinks, q_device, f32, {hq});
}

// A contiguous tensor (torch.empty) through the AOTI shim: at::empty_strided, no dispatcher lookup.
Tensor empty(const int64_t* sizes, int64_t ndim, int32_t dtype, const Device& device) {
  int64_t strides[4];
  int64_t stride = 1;
  for (int64_t i = ndim; i-- > 0;) {
    strides[i] = stride;
    stride *= sizes[i];
  }
  AtenTensorHandle handle = nullptr;
  shim(aoti_torch_empty_strided(ndim, sizes, strides, dtype, device.type, device.index, &handle),
       "aoti_torch_empty_strided");
  return Tensor(handle);
}

// The ABI's [batch, seq, heads, dim] view of a 4-d tensor, or of a 3-d one as t.unsqueeze(0).
void fill_tensor(flashjit_tensor& out, const Tensor& t, int32_t code) {
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  out.data = t.data_ptr();
  out.dtype = code;
  out.reserved = 0;
  const size_t lead = sizes.size() == 3 ? 1 : 0;
  if (lead) {  // unsqueeze(0): size 1, stride sizes[0] * strides[0]
    out.shape[0] = 1;
    out.stride[0] = sizes[0] * strides[0];
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.shape[lead + i] = sizes[i];
    out.stride[lead + i] = strides[i];
  }
}

// cuStreamIsCapturing from the driver torch already loaded (libflashjit opens it at run time too).
using StreamIsCapturing = int (*)(void* stream, int* status);

StreamIsCapturing stream_is_capturing() {
  static const StreamIsCapturing fn = [] {
    void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!driver) driver = dlopen("libcuda.so.1", RTLD_NOW);
    return driver ? reinterpret_cast<StreamIsCapturing>(dlsym(driver, "cuStreamIsCapturing")) : nullptr;
  }();
  if (!fn) fail("flashjit: cuStreamIsCapturing not found in libcuda.so.1");
  return fn;
}

// Both operators' kernel: the output and, where `lse_output` (the general operator, which always
// returns one), the LSE tensor ([0] unless return_lse).
std::pair<Tensor, OptTensor> attention(const Tensor& q, const Tensor& k, const Tensor& v, const OptTensor& cu_seqlens_q,
                                     const OptTensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
                                     const OptTensor& kv_lens, const OptTensor& block_table,
                                     const OptTensor& alibi_slopes, const OptTensor& sinks, double softmax_scale,
                                     bool causal, int64_t window_left, int64_t window_right, double softcap,
                                     bool return_lse, bool check, const OptTensor& kv_starts, bool on_cpu,
                                     bool lse_output) {
  check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, kv_lens, block_table, alibi_slopes, sinks, kv_starts, on_cpu);
  if (!g_engine.engine) fail("flashjit: the C++ kernel has no engine bound (flashjit.ops binds it on import)");
  const bool varlen = cu_seqlens_q.has_value();
  const Device device = device_of(q);
  const int32_t dtype = dtype_of(q);

  // ops._out_shapes: out is q's shape with v's head_dim; the LSE [batch, heads, seq] or [heads, total].
  const auto q_sizes = q.sizes();  // 3 or 4 dims (checked)
  const int64_t q_dim = static_cast<int64_t>(q_sizes.size());
  int64_t out_shape[4];
  for (int64_t i = 0; i < q_dim; ++i) out_shape[i] = q_sizes[i];
  out_shape[q_dim - 1] = v.size(-1);
  int64_t lse_shape[3] = {0, 0, 0};
  int64_t lse_dim = 1;
  if (return_lse && varlen) {
    lse_dim = 2;
    lse_shape[0] = q_sizes[1], lse_shape[1] = q_sizes[0];
  } else if (return_lse) {
    lse_dim = 3;
    lse_shape[0] = q_sizes[0], lse_shape[1] = q_sizes[2], lse_shape[2] = q_sizes[1];
  }
  Tensor out = empty(out_shape, q_dim, dtype, device);
  OptTensor lse;
  if (lse_output || return_lse) lse = empty(lse_shape, lse_dim, aoti_torch_dtype_float32(), device);

  // ops.c_args: flashjit_attention_args_v2 and the option structs it points at.
  flashjit_attention_args_v2 args{};
  flashjit_lse lse_view{};
  flashjit_varlen varlen_args{};
  flashjit_window window{};
  flashjit_alibi alibi{};
  flashjit_paged_kv paged{};
  args.struct_size = sizeof(args);
  args.abi_version = FLASHJIT_ABI_VERSION;
  const int32_t code = flashjit_dtype(dtype);
  fill_tensor(args.q, q, code);
  fill_tensor(args.k, k, code);  // 4-d (batch or page pool), or 3-d packed keys seen as [1, total, ...]
  fill_tensor(args.v, v, code);
  fill_tensor(args.o, out, code);
  if (return_lse) {  // the ABI's [batch, heads_q, seq_q]: the varlen [heads, total] as unsqueeze(0)
    const auto sizes = lse->sizes();
    const auto strides = lse->strides();
    lse_view.data = static_cast<float*>(lse->data_ptr());
    const size_t lead = varlen ? 1 : 0;
    if (lead) {
      lse_view.shape[0] = 1;
      lse_view.stride[0] = sizes[0] * strides[0];
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      lse_view.shape[lead + i] = sizes[i];
      lse_view.stride[lead + i] = strides[i];
    }
    args.lse = &lse_view;
  }
  args.mask = causal ? FLASHJIT_MASK_CAUSAL : FLASHJIT_MASK_NONE;
  args.fp32_math = FLASHJIT_FP32_EXACT;
  args.softmax_scale = static_cast<float>(softmax_scale);
  args.softcap = static_cast<float>(softcap);
  if (varlen) {
    varlen_args.cu_seqlens_q = static_cast<const int32_t*>(cu_seqlens_q->data_ptr());
    varlen_args.cu_seqlens_k = cu_seqlens_k ? static_cast<const int32_t*>(cu_seqlens_k->data_ptr()) : nullptr;
    varlen_args.batch = cu_seqlens_q->numel() - 1;
    varlen_args.max_seqlen_q = max_seqlen_q;
    varlen_args.max_seqlen_k = max_seqlen_k;
    args.varlen = &varlen_args;
  }
  if (window_left >= 0 || window_right >= 0) {
    window.left = window_left;
    window.right = window_right;
    args.window = &window;
  }
  if (alibi_slopes) {
    alibi.slopes = static_cast<const float*>(alibi_slopes->data_ptr());
    alibi.batch_stride = alibi_slopes->dim() == 2 ? alibi_slopes->stride(0) : 0;
    args.alibi = &alibi;
  }
  if (sinks) args.sinks = static_cast<const float*>(sinks->data_ptr());
  if (kv_lens) args.kv_lens = static_cast<const int32_t*>(kv_lens->data_ptr());
  if (kv_starts) args.kv_starts = static_cast<const int32_t*>(kv_starts->data_ptr());
  if (block_table) {
    paged.block_table = static_cast<const int32_t*>(block_table->data_ptr());
    paged.table_stride = block_table->stride(0);
    paged.max_pages = block_table->size(1);
    args.paged = &paged;
  }
  args.flags = check ? FLASHJIT_CHECK_METADATA : 0u;

  // ops._launch_checked and ops._run: on q's device (the engine runs on the calling thread's
  // current context) and its current stream, with a caller-owned workspace while it is captured.
  void* stream = nullptr;
  std::optional<torch::stable::accelerator::DeviceGuard> guard;
  std::optional<Tensor> workspace;
  if (!on_cpu) {
    if (device.index != torch::stable::accelerator::getCurrentDeviceIndex()) guard.emplace(device.index);
    shim(aoti_torch_get_current_cuda_stream(device.index, &stream), "aoti_torch_get_current_cuda_stream");
    int status = 0;  // CU_STREAM_CAPTURE_STATUS_NONE
    const int rc = stream_is_capturing()(stream, &status);
    if (rc != 0) fail("flashjit: cuStreamIsCapturing failed (CUresult " + std::to_string(rc) + ")");
    if (status != 0) {
      uint64_t bytes = 0;
      if (g_engine.workspace_size(g_engine.engine, &args, stream, &bytes) != FLASHJIT_OK)
        fail(g_engine.last_error());
      if (bytes) {  // from the graph's memory pool, like torch.empty in ops._run
        const int64_t size = static_cast<int64_t>(bytes);
        workspace = empty(&size, 1, aoti_torch_dtype_uint8(), device);
        args.workspace = workspace->data_ptr();
        args.workspace_bytes = bytes;
      }
    }
  }
  if (g_engine.forward(g_engine.engine, &args, stream) != FLASHJIT_OK) fail(g_engine.last_error());
  return {out, lse};
}

// torch.ops.flashjit.attention's kernel; on_cpu: the tests' CPU registration.
template <bool kOnCpu>
std::tuple<Tensor, Tensor> attention_op(Tensor q, Tensor k, Tensor v, OptTensor cu_seqlens_q, OptTensor cu_seqlens_k,
                                        int64_t max_seqlen_q, int64_t max_seqlen_k, OptTensor kv_lens,
                                        OptTensor block_table, OptTensor alibi_slopes, OptTensor sinks,
                                        double softmax_scale, bool causal, int64_t window_left, int64_t window_right,
                                        double softcap, bool return_lse, bool check, OptTensor kv_starts) {
  auto [out, lse] = attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, kv_lens, block_table,
                              alibi_slopes, sinks, softmax_scale, causal, window_left, window_right, softcap,
                              return_lse, check, kv_starts, kOnCpu, true);
  return {out, *lse};
}

// torch.ops.flashjit.attention_dense's kernel: no side arrays, no LSE, no checked mode.
template <bool kOnCpu>
Tensor attention_dense_op(Tensor q, Tensor k, Tensor v, double softmax_scale, bool causal, int64_t window_left,
                          int64_t window_right, double softcap) {
  return attention(q, k, v, std::nullopt, std::nullopt, 0, 0, std::nullopt, std::nullopt, std::nullopt, std::nullopt,
                   softmax_scale, causal, window_left, window_right, softcap, false, false, std::nullopt, kOnCpu, false)
      .first;
}

// The registrations flashjit_torch_op_register made: [0] CUDA, [1] the tests' CPU.
std::unique_ptr<torch::stable::detail::StableLibrary> g_registered[2];

}  // namespace

// The version of this library's C entry points' contract; ops.py refuses other values.
FLASHJIT_TORCH_OP_EXPORT int32_t flashjit_torch_op_version(void) { return kBindVersion; }

// Binds the engine and the entry points of the libflashjit.so the Python package loaded. Refuses
// (returns nonzero) a library older than the header this was built with.
FLASHJIT_TORCH_OP_EXPORT int32_t flashjit_torch_op_bind(void* engine, void* forward_v2, void* workspace_size_v2,
                                                        void* last_error, int32_t abi_version,
                                                        uint64_t args_v2_size) {
  if (!engine || !forward_v2 || !workspace_size_v2 || !last_error) return 1;
  if (abi_version < FLASHJIT_ABI_VERSION || args_v2_size < sizeof(flashjit_attention_args_v2)) return 2;
  g_engine.engine = static_cast<flashjit_engine*>(engine);
  g_engine.forward = reinterpret_cast<decltype(g_engine.forward)>(forward_v2);
  g_engine.workspace_size = reinterpret_cast<decltype(g_engine.workspace_size)>(workspace_size_v2);
  g_engine.last_error = reinterpret_cast<decltype(g_engine.last_error)>(last_error);
  return 0;
}

// Registers (on != 0) or drops these kernels as flashjit::attention's and attention_dense's for the CUDA
// key (key 0) or, for tests without a GPU, the CPU key (key 1, taking CPU tensors). Registration
// waits for this call rather than the library's loading, so that ops.py binds the engine first and
// keeps its Python kernel when anything here does not fit. Returns 0, or nonzero on failure.
FLASHJIT_TORCH_OP_EXPORT int32_t flashjit_torch_op_register(int32_t key, int32_t on) {
  if (key != 0 && key != 1) return 1;
  try {
    auto& registered = g_registered[key];
    if (on && !registered) {
      registered = std::make_unique<torch::stable::detail::StableLibrary>(
          torch::stable::detail::StableLibrary::Kind::IMPL, "flashjit", key ? "CPU" : "CUDA", __FILE__, __LINE__);
      if (key) {
        registered->impl("attention", TORCH_BOX(&attention_op<true>));
        registered->impl("attention_dense", TORCH_BOX(&attention_dense_op<true>));
      } else {
        registered->impl("attention", TORCH_BOX(&attention_op<false>));
        registered->impl("attention_dense", TORCH_BOX(&attention_dense_op<false>));
      }
    } else if (!on) {
      registered.reset();
    }
    return 0;
  } catch (const std::exception&) {
    return 2;
  }
}
