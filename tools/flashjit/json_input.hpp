// JSON files named on the command line (warmup --variants, tune --workload): read with a size
// cap, nesting bounded before parsing (base/json_depth.hpp), and integers range-checked before
// they are narrowed. Every error names the option or file position and the rule.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include "flashjit/status.hpp"

namespace flashjit::tools {

// Variant lists and workloads are kilobytes; 16 MiB is far beyond any real one and keeps a wrong
// path (a disk image, /dev/zero) from being read into memory whole.
inline constexpr std::size_t kMaxJsonFileBytes = std::size_t(16) << 20;

// Parses `text`; `source` names it in errors ("--variants: 'v.json'").
Result<nlohmann::json> parse_json_text(std::string_view text, const std::string& source);

// Reads and parses the file `path` given to `option`.
Result<nlohmann::json> read_json_file(const std::string& path, const std::string& option);

// `value` as an integer in [lo, hi]; otherwise "<where>: must be an integer in [lo, hi], got X",
// X being the number as written (4294967360, not what it would wrap to) or its JSON type.
Result<std::int64_t> json_integer(const nlohmann::json& value, const std::string& where, std::int64_t lo,
                                  std::int64_t hi);

}  // namespace flashjit::tools
