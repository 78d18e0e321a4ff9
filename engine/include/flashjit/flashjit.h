/* flashjit C ABI: run-time specialized fused attention, callable from any language.
 *
 * Handles are opaque; every call returns a flashjit_status, and on failure
 * flashjit_last_error() gives this thread's message (naming the argument and the rule).
 * Tensors are [batch, seq, heads, head_dim] views with element strides. All structs are plain
 * C with fixed-width fields, so ctypes/cffi can mirror them. */
#ifndef FLASHJIT_H
#define FLASHJIT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FLASHJIT_ABI_VERSION 1

typedef struct flashjit_engine flashjit_engine;

typedef enum flashjit_status {
  FLASHJIT_OK = 0,
  FLASHJIT_INVALID_ARGUMENT = 1,
  FLASHJIT_UNSUPPORTED = 2,
  FLASHJIT_COMPILE_FAILED = 3,
  FLASHJIT_DRIVER_ERROR = 4,
  FLASHJIT_LIBRARY_MISSING = 5,
  FLASHJIT_IO_ERROR = 6,
  FLASHJIT_CORRUPT = 7,
  FLASHJIT_PERMISSION_DENIED = 8,
  FLASHJIT_NOT_FOUND = 9,
  FLASHJIT_INTERNAL = 10
} flashjit_status;

typedef enum flashjit_dtype { FLASHJIT_F16 = 0, FLASHJIT_BF16 = 1, FLASHJIT_F32 = 2 } flashjit_dtype;
typedef enum flashjit_mask { FLASHJIT_MASK_NONE = 0, FLASHJIT_MASK_CAUSAL = 1 } flashjit_mask;
typedef enum flashjit_fp32_math { FLASHJIT_FP32_EXACT = 0, FLASHJIT_FP32_TF32 = 1 } flashjit_fp32_math;

typedef struct flashjit_tensor {
  const void* data;  /* device pointer */
  int32_t dtype;     /* flashjit_dtype */
  int32_t reserved;  /* must be 0 */
  int64_t shape[4];  /* batch, seq, heads, head_dim */
  int64_t stride[4]; /* in elements */
} flashjit_tensor;

typedef struct flashjit_lse {
  float* data;       /* device pointer, fp32 */
  int64_t shape[3];  /* batch, heads_q, seq_q */
  int64_t stride[3]; /* in elements */
} flashjit_lse;

typedef struct flashjit_attention_args {
  flashjit_tensor q, k, v, o;
  const flashjit_lse* lse; /* NULL: no log-sum-exp output */
  int32_t mask;            /* flashjit_mask */
  int32_t fp32_math;       /* flashjit_fp32_math, fp32 inputs only */
  float softmax_scale;     /* 0: 1/sqrt(head_dim_qk) */
  int32_t reserved;        /* must be 0 */
} flashjit_attention_args;

/* sizeof(flashjit_attention_args) as compiled into the library, for bindings to check. */
uint64_t flashjit_args_size(void);
int flashjit_abi_version(void);
const char* flashjit_version(void);

/* This thread's message for the last failed call ("" if none). Valid until the next call. */
const char* flashjit_last_error(void);

flashjit_status flashjit_engine_create(flashjit_engine** out);
void flashjit_engine_destroy(flashjit_engine* engine);

/* Runs attention on `stream` (a CUstream / cudaStream_t; NULL = default stream) of the calling
 * thread's current CUDA context. Nothing is written when it fails. */
flashjit_status flashjit_forward(flashjit_engine* engine, const flashjit_attention_args* args, void* stream);

/* Compiles the kernel `args` would use, for `arch` ("sm_80", "sm_90a", ...), without a GPU.
 * Writes the variant's readable name into name_out (if not NULL, truncated to name_cap). */
flashjit_status flashjit_precompile(flashjit_engine* engine, const flashjit_attention_args* args,
                                    const char* arch, char* name_out, uint64_t name_cap);

#ifdef __cplusplus
}
#endif

#endif /* FLASHJIT_H */
