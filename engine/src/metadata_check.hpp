// The checked mode (AttentionArgs::check_metadata, EngineOptions::check_metadata, FLASHJIT_CHECK=1):
// the device arrays that place and bound each sequence — varlen prefix sums, kv_lens, the block
// table — are read back and checked before the launch. By default they are clamped on the device
// instead (memory-safe, sync-free, silent); checking costs one synchronization of the stream and
// a copy of the arrays, so it is a debugging aid, and it refuses to run inside a graph capture.
#pragma once

#include <cuda.h>

#include "cudalib/driver_library.hpp"
#include "flashjit/status.hpp"
#include "problem.hpp"

namespace flashjit {

// INVALID_ARGUMENT naming the array, the index and the rule for the first bad entry; nothing is
// launched then. Reads the arrays in stream order, after the work queued before the call.
Status check_device_metadata(const DriverLibrary& drv, const AttentionProblem& problem, CUstream stream);

}  // namespace flashjit
