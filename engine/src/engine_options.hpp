// EngineOptions as the engine runs with them: what the caller gave, with the environment
// (FLASHJIT_LOG, FLASHJIT_DISK_CACHE, FLASHJIT_CHECK, FLASHJIT_SM_MARGIN) filling the choices the
// caller left open.
#pragma once

#include "flashjit/flashjit.hpp"

namespace flashjit {

EngineOptions with_env(EngineOptions options);

}  // namespace flashjit
