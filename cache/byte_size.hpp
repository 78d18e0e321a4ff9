// Byte counts as people type them ("512M", "2G", "1.5GiB"): one parser for the
// FLASHJIT_CACHE_MAX_BYTES variable and the tools' --max-bytes, so both read a value alike.
#pragma once

#include <cstdint>
#include <string>

#include "flashjit/status.hpp"

namespace flashjit::cache {

// "<number>[K|M|G|T][i][B]" (binary multiples; a fraction such as 1.5G is allowed with a suffix).
// `option` names the argument in the error, e.g. "--max-bytes".
Result<std::uint64_t> parse_byte_size(const std::string& text, const std::string& option);

}  // namespace flashjit::cache
