// Validation of a backward call: the forward's arguments by the forward's own rules (one code
// path, so both passes agree on every semantic), then what only the backward has: the LSE as an
// input, dO like o, dq/dk/dv like q/k/v and written without touching anything else. Features
// no backward kernel serves yet are the backward families' refusals, not argument errors.
#pragma once

#include "problem.hpp"

namespace flashjit {

// A problem whose `backward` points at `args` and whose `args` is `args.forward`. Its semantics
// are the forward's, with write_lse off (the backward reads the LSE, so the variant is not named
// for writing it) and vec narrowed to what dO, dq, dk and dv also allow.
Result<AttentionProblem> validate_backward(const BackwardArgs& args);

}  // namespace flashjit
