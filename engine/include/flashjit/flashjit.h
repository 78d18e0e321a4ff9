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

/* 1: flashjit_attention_args. 2: flashjit_attention_args_v2 (size-prefixed, extensible).
 * 3: flashjit_attention_args_v2 gains flags (FLASHJIT_CHECK_METADATA).
 * 4: flashjit_attention_args_v2 gains workspace and workspace_bytes; flashjit_workspace_size_v2.
 * 5: the backward pass: flashjit_backward_args_v1, flashjit_backward_v1 and its workspace size.
 * 6: flashjit_attention_args_v2.sm_margin (was reserved, 0); flashjit_engine_set_sm_margin.
 * 7: flashjit_attention_args_v2 gains kv_starts (per-sequence first keys, cache_leftpad). */
#define FLASHJIT_ABI_VERSION 7

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

/* ---- Version 2: every attention option, in a struct that can grow. ---- */

/* A ragged batch packed along the sequence axis: q, k, v, o are [1, total, heads, dim] and
 * sequence i owns rows [cu[i], cu[i + 1]). The prefix sums stay on the device. */
typedef struct flashjit_varlen {
  const int32_t* cu_seqlens_q; /* [batch + 1], device, non-decreasing from 0 */
  const int32_t* cu_seqlens_k; /* [batch + 1], device */
  int64_t batch;               /* sequences */
  int64_t max_seqlen_q;        /* at least every sequence's length */
  int64_t max_seqlen_k;
} flashjit_varlen;

/* Sliding window, bottom-right aligned: query i sees keys i + Sk - Sq - left .. i + Sk - Sq + right. */
typedef struct flashjit_window {
  int64_t left;  /* -1: unbounded */
  int64_t right; /* -1: unbounded; 0 or -1 with a causal mask */
} flashjit_window;

/* ALiBi: -slope * |i + Sk - Sq - j| joins each score. */
typedef struct flashjit_alibi {
  const float* slopes;  /* device fp32, [heads_q] or [batch, heads_q] rows */
  int64_t batch_stride; /* elements between batches' rows; 0: one row for every batch */
} flashjit_alibi;

/* K and V as page pools: k and v are [num_pages, page_size, heads_kv, head_dim] and key j of
 * sequence b lives in page block_table[b * table_stride + j / page_size]. Needs kv_lens. */
typedef struct flashjit_paged_kv {
  const int32_t* block_table; /* device int32, max_pages entries per sequence */
  int64_t table_stride;       /* elements between sequences' rows, >= max_pages */
  int64_t max_pages;          /* pages a sequence may use */
} flashjit_paged_kv;

/* flashjit_attention_args_v2.flags bits. */
/* Checked mode: read back varlen prefix sums, kv_lens and the block table and refuse bad entries
 * (FLASHJIT_INVALID_ARGUMENT naming the array, the index and the rule) before launching. Costs one
 * synchronization of the stream; refused during a CUDA graph capture. Without it (and without
 * FLASHJIT_CHECK=1) bad entries are clamped on the device, sync-free. */
#define FLASHJIT_CHECK_METADATA 1u

/* Starts with its own size, so fields can be appended without breaking callers built against
 * an older header: set struct_size = sizeof(flashjit_attention_args_v2) and abi_version =
 * FLASHJIT_ABI_VERSION, and zero everything you do not use (NULL and 0 mean "none" or
 * "default" for every field). A library older than the caller's header accepts the struct as
 * long as the fields it does not know are zero. */
typedef struct flashjit_attention_args_v2 {
  uint32_t struct_size;
  uint32_t abi_version;
  flashjit_tensor q, k, v, o;
  const flashjit_lse* lse;        /* NULL: no log-sum-exp output */
  int32_t mask;                   /* flashjit_mask */
  int32_t fp32_math;              /* flashjit_fp32_math, fp32 inputs only */
  float softmax_scale;            /* 0: 1/sqrt(head_dim_qk) */
  float softcap;                  /* 0: none; else > 0: scores become softcap * tanh(score / softcap).
                                     A per-call scalar (flashjit/scalars.h lists them; a new one is
                                     appended at this struct's end, its layout being the ABI) */
  const flashjit_varlen* varlen;  /* NULL: none */
  const flashjit_window* window;  /* NULL: none */
  const flashjit_alibi* alibi;    /* NULL: none */
  const float* sinks;             /* NULL: none; else device fp32 [heads_q] logits joining each
                                     row's softmax denominator */
  const int32_t* kv_lens;         /* NULL: every sequence uses all its keys; else device int32
                                     [batch]: keys each sequence uses (cache_seqlens) */
  const flashjit_paged_kv* paged; /* NULL: contiguous caches */
  uint32_t flags;                 /* FLASHJIT_CHECK_METADATA, or 0 (ABI version 3) */
  uint32_t sm_margin;             /* ABI version 6 (before: reserved, 0): SMs to leave to other
                                     kernels (NCCL's beside a ring); persistent grids and split
                                     counts size to the rest. 0: the engine's default. */
  /* ABI version 4. Device scratch memory the caller owns for this call (a framework's allocator,
   * a CUDA graph's pool), used instead of the engine's per-stream pool, so that a call captured
   * on a stream the engine has not seen allocates nothing. At least flashjit_workspace_size_v2()
   * bytes, 256-byte aligned. NULL: the engine's pool. */
  void* workspace;
  uint64_t workspace_bytes;
  /* ABI version 7. NULL: every sequence's keys start at its first slot; else device int32 [batch]
   * (FlashAttention's cache_leftpad): sequence b uses keys [kv_starts[b], kv_lens[b]) of its cache
   * (of its varlen rows, of its block-table row); the slots before are never read, and causal
   * masks, windows and ALiBi count keys from kv_starts[b]. */
  const int32_t* kv_starts;
} flashjit_attention_args_v2;

/* sizeof(flashjit_attention_args) as compiled into the library, for bindings to check. */
uint64_t flashjit_args_size(void);
int flashjit_abi_version(void);
const char* flashjit_version(void);

/* This thread's message for the last failed call ("" if none). Valid until the next call. */
const char* flashjit_last_error(void);

flashjit_status flashjit_engine_create(flashjit_engine** out);
void flashjit_engine_destroy(flashjit_engine* engine);
/* The sm_margin of later calls that give none (0 to 4096; ABI version 6). FLASHJIT_SM_MARGIN sets
 * it at creation. */
flashjit_status flashjit_engine_set_sm_margin(flashjit_engine* engine, int32_t sm_margin);

/* Runs attention on `stream` (a CUstream / cudaStream_t; NULL = default stream) of the calling
 * thread's current CUDA context. Nothing is written when it fails. */
flashjit_status flashjit_forward(flashjit_engine* engine, const flashjit_attention_args* args, void* stream);

/* Compiles the kernel `args` would use, for `arch` ("sm_80", "sm_90a", ...), without a GPU.
 * Writes the variant's readable name into name_out (if not NULL, truncated to name_cap). */
flashjit_status flashjit_precompile(flashjit_engine* engine, const flashjit_attention_args* args,
                                    const char* arch, char* name_out, uint64_t name_cap);

/* Version 2 of flashjit_forward and flashjit_precompile. */
flashjit_status flashjit_forward_v2(flashjit_engine* engine, const flashjit_attention_args_v2* args, void* stream);
flashjit_status flashjit_precompile_v2(flashjit_engine* engine, const flashjit_attention_args_v2* args,
                                       const char* arch, char* name_out, uint64_t name_cap);
/* The workspace bytes flashjit_forward_v2 would take for `args` on `stream` (0 for most calls;
 * split-KV decode takes some): what to give in args->workspace. Plans the call as forward would
 * (compiling its kernel if not cached) and launches nothing. */
flashjit_status flashjit_workspace_size_v2(flashjit_engine* engine, const flashjit_attention_args_v2* args,
                                           void* stream, uint64_t* bytes_out);
/* sizeof(flashjit_attention_args_v2) as compiled into the library. */
uint64_t flashjit_args_v2_size(void);

/* ---- The backward pass (ABI version 5). ---- */

/* flashjit_backward_args_v1.flags bits. */
/* Sum dq in a fixed order, so that every call gives the same bits (dk, dv and dsinks always do).
 * Without it, the K/V blocks add into dq's fp32 sums in whatever order they finish: its last bits
 * may differ between calls. The variant is a kernel of its own ("-det" in its name). */
#define FLASHJIT_DETERMINISTIC 1u

/* Size-prefixed like flashjit_attention_args_v2: set struct_size = sizeof(flashjit_backward_args_v1)
 * and abi_version = FLASHJIT_ABI_VERSION (5 or newer), zero what you do not use. So far: f16 and
 * bf16, head dims 1 to 256 (q/k's and v's may differ), causal or not, GQA/MQA, sliding windows,
 * softcap, ALiBi, varlen, kv_lens and sinks; anything else is refused with FLASHJIT_UNSUPPORTED
 * naming the argument. */
typedef struct flashjit_backward_args_v1 {
  uint32_t struct_size;
  uint32_t abi_version;
  /* The forward's arguments as the forward was called: o and lse (required) are read; its
   * workspace must be empty (the backward's is below). */
  const flashjit_attention_args_v2* forward;
  flashjit_tensor dout;          /* dL/do: o's shape and dtype */
  flashjit_tensor dq, dk, dv;    /* written: q's, k's and v's shapes and dtype, any strides */
  float* dsinks;                 /* NULL, or with forward->sinks: written, device fp32 [heads_q] dL/dsinks */
  uint32_t flags;                /* FLASHJIT_DETERMINISTIC, or 0 */
  uint32_t reserved;             /* must be 0 */
  /* Device scratch memory the caller owns, at least flashjit_backward_workspace_size_v1() bytes,
   * 256-byte aligned, any contents. NULL: the engine's per-stream pool. */
  void* workspace;
  uint64_t workspace_bytes;
} flashjit_backward_args_v1;

/* dq, dk and dv for one forward call, on `stream` of the calling thread's current CUDA context.
 * Nothing is written when it fails. */
flashjit_status flashjit_backward_v1(flashjit_engine* engine, const flashjit_backward_args_v1* args, void* stream);
/* The workspace bytes flashjit_backward_v1 takes for `args` on `stream` (plans, launches nothing). */
flashjit_status flashjit_backward_workspace_size_v1(flashjit_engine* engine, const flashjit_backward_args_v1* args,
                                                    void* stream, uint64_t* bytes_out);
/* Compiles the backward kernel `args` would use, for `arch`, without a GPU (as flashjit_precompile_v2). */
flashjit_status flashjit_precompile_backward_v1(flashjit_engine* engine, const flashjit_backward_args_v1* args,
                                                const char* arch, char* name_out, uint64_t name_cap);
/* sizeof(flashjit_backward_args_v1) as compiled into the library. */
uint64_t flashjit_backward_args_v1_size(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASHJIT_H */
