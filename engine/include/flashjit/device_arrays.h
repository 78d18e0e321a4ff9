/* The plain per-call device arrays of an attention call, declared once. Each row is a pointer a
 * caller may leave null, read-only to the kernel, one element per sequence or per query head:
 *
 *   X(elem, field, extent, constant, tag, why)
 *     elem      float (fp32) or int (int32)
 *     field     the name everywhere: the AttentionArgs and flashjit_attention_args_v2 member, the
 *               semantics flag (set when the pointer is not null), the kernel params member, the
 *               Python binding's argument
 *     extent    elements the kernel reads: batch (one per sequence) or heads_q (one per query head)
 *     constant  the kernel's compile-time flag; tag: its mark in a variant's readable name
 *
 * Generated from it: the AttentionArgs members, the semantics flags (their place in a variant's
 * name is this list's place in the semantics list), the C ABI's conversion, validation (the extent
 * in bounds, no overlap with the outputs), the kernel params members and their fill; a Python test
 * checks the binding names each field. Written out by hand: flashjit_attention_args_v2 (its layout
 * is an ABI; this list's order is not), checked mode's reading of the values, and the math.
 * Plain C preprocessor: the host, the C ABI's conversion and NVRTC all include this file.
 *
 * FLASHJIT_DEVICE_ARRAYS(ROW, X) calls ROW(X, elem, field, ...) per row, so that a list taking its
 * own X (the semantics list) can adapt a row; FLASHJIT_DEVICE_ARRAY_ROWS(X) calls X(elem, field,
 * ...) directly. */
#ifndef FLASHJIT_DEVICE_ARRAYS_H
#define FLASHJIT_DEVICE_ARRAYS_H

#define FLASHJIT_DEVICE_ARRAYS(ROW, X)                                                                  \
  ROW(X, float, sinks, heads_q, "kSinks", "sinks",                                                     \
      "a per-head logit that joins the softmax denominator and nothing else (GPT-OSS)")                \
  ROW(X, int, kv_lens, batch, "kKvLens", "kvlens",                                                     \
      "keys each sequence uses of its cache (FlashAttention's cache_seqlens): caches filled to "       \
      "different lengths; masks and windows align to each sequence's own length")                     \
  ROW(X, int, kv_starts, batch, "kKvStarts", "kvstarts",                                               \
      "each sequence's first key in its cache (FlashAttention's cache_leftpad): sequence b uses keys " \
      "[kv_starts[b], kv_lens[b]); masks, windows and ALiBi count keys from there")

#define FLASHJIT_DEVICE_ARRAY_CALL(X, elem, field, extent, constant, tag, why) X(elem, field, extent, constant, tag, why)
#define FLASHJIT_DEVICE_ARRAY_ROWS(X) FLASHJIT_DEVICE_ARRAYS(FLASHJIT_DEVICE_ARRAY_CALL, X)

#endif
