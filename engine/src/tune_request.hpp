// Engine::tune: one request's tuning key timed now on the calling context's GPU (or its stored
// result reused), stored, and reported candidate by candidate.
#pragma once

#include "flashjit/flashjit.hpp"
#include "kernel_loader.hpp"
#include "planner.hpp"

namespace flashjit {

// Tunes `request` in `call`'s context with `loader`'s kernels; `planner` forgets the context's
// plans so the next call uses the result.
Result<TuneReport> tune_request(const TuneRequest& request, const CallContext& call, KernelLoader& loader,
                                Planner& planner, const KernelLoader::Log& log);

}  // namespace flashjit
