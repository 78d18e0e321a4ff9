#include "json_input.hpp"

#include <fstream>
#include <limits>

#include "base/json_depth.hpp"
#include "base/printable.hpp"

namespace flashjit::tools {

namespace {

constexpr std::size_t kReadChunkBytes = 64 * 1024;  // one read per typical file

}  // namespace

Result<nlohmann::json> parse_json_text(std::string_view text, const std::string& source) {
  FJ_TRY(check_json_depth(text, source));
  auto doc = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Error(Code::invalid_argument, source + ": not valid JSON");
  return doc;
}

Result<nlohmann::json> read_json_file(const std::string& path, const std::string& option) {
  const std::string source = option + ": '" + printable(path) + "'";
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error(Code::io_error, source + ": cannot open it");
  std::string text;
  char chunk[kReadChunkBytes];
  while (text.size() <= kMaxJsonFileBytes && in.read(chunk, sizeof chunk).gcount() > 0)
    text.append(chunk, std::size_t(in.gcount()));
  if (in.bad()) return Error(Code::io_error, source + ": cannot read it");
  if (text.size() > kMaxJsonFileBytes)
    return Error(Code::invalid_argument,
                 source + ": larger than " + std::to_string(kMaxJsonFileBytes >> 20) + " MiB, not a variant list or workload");
  return parse_json_text(text, source);
}

Result<std::int64_t> json_integer(const nlohmann::json& value, const std::string& where, std::int64_t lo,
                                  std::int64_t hi) {
  std::string got;
  if (value.is_number_unsigned()) {
    const auto u = value.get<std::uint64_t>();
    if (u <= std::uint64_t(std::numeric_limits<std::int64_t>::max()) && std::int64_t(u) >= lo && std::int64_t(u) <= hi)
      return std::int64_t(u);
    got = std::to_string(u);
  } else if (value.is_number_integer()) {
    const auto s = value.get<std::int64_t>();
    if (s >= lo && s <= hi) return s;
    got = std::to_string(s);
  } else if (value.is_number_float()) {
    got = printable(value.get<double>());
  } else {
    got = std::string("a JSON ") + value.type_name();
  }
  return Error(Code::invalid_argument, where + ": must be an integer in [" + std::to_string(lo) + ", " +
                                           std::to_string(hi) + "], got " + got);
}

}  // namespace flashjit::tools
