// Byte counts as people type and read them: "512M", "2G", "1.5GiB" in; "1.2 MiB" out.
#pragma once

#include <cstdint>
#include <string>

#include "cache/byte_size.hpp"
#include "flashjit/status.hpp"

namespace flashjit::tools {

using cache::parse_byte_size;  // shared with FLASHJIT_CACHE_MAX_BYTES

// "812 B", "4.0 KiB", "1.2 MiB", "3.50 GiB".
std::string format_bytes(std::uint64_t bytes);

}  // namespace flashjit::tools
