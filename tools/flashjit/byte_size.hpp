// Byte counts as people type and read them: "512M", "2G", "1.5GiB" in; "1.2 MiB" out.
#pragma once

#include <cstdint>
#include <string>

#include "flashjit/status.hpp"

namespace flashjit::tools {

// "<number>[K|M|G|T][i][B]" (binary multiples; a fraction such as 1.5G is allowed with a suffix).
// `option` names the argument in the error, e.g. "--max-bytes".
Result<std::uint64_t> parse_byte_size(const std::string& text, const std::string& option);

// "812 B", "4.0 KiB", "1.2 MiB", "3.50 GiB".
std::string format_bytes(std::uint64_t bytes);

}  // namespace flashjit::tools
