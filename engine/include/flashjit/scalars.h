/* The per-call scalars of an attention call that switch a semantic on, declared once. Each row is
 * a number a caller may leave unset (0 in the C ABI, whose rule is that zero means "none";
 * std::nullopt in the C++ API); given, it must pass its rule, it sets its semantics flag, and it
 * reaches the kernel through params members computed from it:
 *
 *   X(type, field, rule, constant, tag, typical, backward, params, why)
 *     type      float (a C float; std::optional<float> in AttentionArgs)
 *     field     the name everywhere: the AttentionArgs and flashjit_attention_args_v2 member, the
 *               semantics flag, the validated value in AttentionProblem, the Python binding's
 *               argument
 *     rule      what a given value must be, by name: one of validation's rules
 *               (engine/src/problem.cpp), e.g. finite_positive ("finite and > 0")
 *     constant  the kernel's compile-time flag; tag: its mark in a variant's readable name
 *     typical   the value tuning times a bucket's kernel with
 *     backward  1: the backward applies it too; 0: the backward refuses a call that sets it
 *     params    (FLASHJIT_SCALAR_PARAM(type, member, fill, why) ...): the kernel params members it
 *               reaches the kernel through, 4-byte types (they sit among the params' 4-byte fields),
 *               and what fills each: an expression in `value` (the validated scalar) and `scale`
 *               (the softmax scale), both double, and `log2e`
 *     why       one line: the semantics flag's help
 *
 * Generated from it: the AttentionArgs members, the semantics flags (their place in a variant's
 * name is this list's place in the semantics list), the C ABI's conversion, validation, the
 * problem's values, the kernel params members and their fill, tuning's values and the backward's
 * refusal; a Python test checks the binding names each field. Written out by hand: the member of
 * flashjit_attention_args_v2 (its layout is an ABI: a new member goes at the struct's end, where
 * this list's order would not put it; the C ABI's conversion asserts each member's type), the
 * math (common/score_tile.cuh), the Python binding.
 *
 * The softmax scale is no row: every call has one (its default depends on the head dim), it
 * switches no semantic on, and the v1 struct carries it too.
 * Plain C preprocessor: the host, the C ABI's conversion and NVRTC all include this file.
 *
 * FLASHJIT_SCALARS(ROW, X) calls ROW(X, type, field, ...) per row, so that a list taking its own X
 * (the semantics list) can adapt a row; FLASHJIT_SCALAR_ROWS(X) calls X(type, field, ...)
 * directly. FLASHJIT_SCALAR_EXPAND params lists a row's FLASHJIT_SCALAR_PARAM entries, which the
 * expanding file defines. */
#ifndef FLASHJIT_SCALARS_H
#define FLASHJIT_SCALARS_H

#define FLASHJIT_SCALARS(ROW, X)                                                                        \
  ROW(X, float, softcap, finite_positive, "kSoftcap", "softcap", 50.0f /* Gemma 2's attention softcap */, \
      1,                                                                                                \
      (FLASHJIT_SCALAR_PARAM(float, softcap_scale, scale / value, "scale / cap, applied before tanh")   \
       FLASHJIT_SCALAR_PARAM(float, softcap_log2, value * log2e,                                        \
                             "cap * log2(e): scores leave the softcap in log2 units")),                 \
      "scores become cap * tanh(score / cap)")

#define FLASHJIT_SCALAR_CALL(X, type, field, rule, constant, tag, typical, backward, params, why) \
  X(type, field, rule, constant, tag, typical, backward, params, why)
#define FLASHJIT_SCALAR_ROWS(X) FLASHJIT_SCALARS(FLASHJIT_SCALAR_CALL, X)
#define FLASHJIT_SCALAR_EXPAND(...) __VA_ARGS__

#endif
