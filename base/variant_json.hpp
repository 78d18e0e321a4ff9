// JSON forms of variants, generated from the semantics field list and each family's knob table:
// what `flashjit warmup --variants` reads and tuning files store. Parsers never throw, refuse
// unknown keys (they are typos) and range-check every integer before narrowing it.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <string_view>

#include "flashjit/status.hpp"
#include "flashjit/variant.hpp"

namespace flashjit {

// {"dtype": "f16", "fp32_math": "exact", "head_dim_qk": 128, ..., "vec": 8}: every field.
nlohmann::json to_json(const Semantics& s);
// Fields absent from `j` keep their defaults; the result passes Semantics::check(). `where`
// names the place in errors ("variants.json[2]").
Result<Semantics> semantics_from_json(const nlohmann::json& j, const std::string& where);

// Finds a family's knob table by name (nullptr when unknown): how layers below the engine read
// stored tilings without knowing the families.
using KnobTableLookup = std::function<const KnobTable*(std::string_view family)>;

// {"block_m": 128, "block_n": 64, ...}: every knob of the tiling's table.
nlohmann::json to_json(const Tiling& t);
// Exactly the knobs of `table`, each an integer in [1, 2^20].
Result<Tiling> tiling_from_json(const KnobTable& table, const nlohmann::json& j, const std::string& where);

}  // namespace flashjit
