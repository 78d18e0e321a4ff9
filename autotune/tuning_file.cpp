#include "autotune/tuning_file.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

#include "base/json_depth.hpp"
#include "base/printable.hpp"

namespace flashjit::autotune {

namespace {

using json = nlohmann::json;

// Tiling fields and the format version are small; anything beyond this is damage, and the
// bound keeps the narrowing to int exact.
constexpr std::int64_t kMaxStoredInt = std::int64_t(1) << 30;

// Checked accessors: a hand-edited or damaged file must never throw (nlohmann throws on type
// mismatches), so every field is looked up and type-checked explicitly.
const json* member(const json& obj, const char* name) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(name);
  return it == obj.end() ? nullptr : &*it;
}

bool get_string(const json& obj, const char* name, std::string& out) {
  const json* v = member(obj, name);
  if (!v || !v->is_string()) return false;
  out = v->get_ref<const std::string&>();
  return true;
}

bool get_int(const json& obj, const char* name, int& out) {
  const json* v = member(obj, name);
  if (!v || !v->is_number_integer()) return false;
  const auto x = v->get<std::int64_t>();
  if (x < -kMaxStoredInt || x > kMaxStoredInt) return false;
  out = static_cast<int>(x);
  return true;
}

// A time in milliseconds: finite and positive.
bool get_ms(const json& obj, const char* name, double& out) {
  const json* v = member(obj, name);
  if (!v || !v->is_number()) return false;
  out = v->get<double>();
  return std::isfinite(out) && out > 0;
}

json tiling_json(const Tiling& t) { return to_json(t); }

bool get_tiling(const json& obj, const char* name, const KnobTable& knobs, Tiling& out) {
  const json* v = member(obj, name);
  if (!v) return false;
  auto t = tiling_from_json(knobs, *v, name);
  if (!t.ok()) return false;
  out = t.value();
  return true;
}

json candidate_json(const CandidateResult& c) {
  json j{{"tiling", tiling_json(c.tiling)}, {"status", candidate_status_name(c.status)}};
  if (c.ms) j["ms"] = *c.ms;
  if (!c.reason.empty()) j["reason"] = c.reason;
  return j;
}

bool get_candidate(const json& j, const KnobTable& knobs, CandidateResult& out) {
  std::string status;
  if (!get_tiling(j, "tiling", knobs, out.tiling) || !get_string(j, "status", status)) return false;
  auto s = parse_candidate_status(status);
  if (!s) return false;
  out.status = *s;
  if (out.status == CandidateStatus::timed) {
    double ms = 0;
    if (!get_ms(j, "ms", ms)) return false;
    out.ms = ms;
  }
  if (member(j, "reason") && !get_string(j, "reason", out.reason)) return false;
  return true;
}

json record_json(const TuningRecord& r) {
  json j{{"tiling", tiling_json(r.tiling)},
         {"ms", r.ms},
         {"default_tiling", tiling_json(r.default_tiling)},
         {"candidates", json::array()},
         {"candidate_set_hash", r.candidate_set_hash},
         {"partial", r.partial},
         {"tune_seconds", r.tune_seconds},
         {"tuned_at", r.tuned_at},
         {"nvrtc_version", r.nvrtc_version},
         {"driver_version", r.driver_version}};
  if (r.default_ms) j["default_ms"] = *r.default_ms;
  for (const CandidateResult& c : r.candidates) j["candidates"].push_back(candidate_json(c));
  return j;
}

// Empty on success, else what is wrong with the record.
std::string get_record(const json& j, const KnobTable& knobs, TuningRecord& out) {
  if (!j.is_object()) return "not an object";
  if (!get_tiling(j, "tiling", knobs, out.tiling)) return "missing or bad 'tiling'";
  if (!get_ms(j, "ms", out.ms)) return "missing or bad 'ms'";
  if (!get_tiling(j, "default_tiling", knobs, out.default_tiling)) return "missing or bad 'default_tiling'";
  if (member(j, "default_ms")) {
    double ms = 0;
    if (!get_ms(j, "default_ms", ms)) return "bad 'default_ms'";
    out.default_ms = ms;
  }
  if (!get_string(j, "candidate_set_hash", out.candidate_set_hash) || out.candidate_set_hash.empty())
    return "missing or bad 'candidate_set_hash'";
  if (!get_string(j, "nvrtc_version", out.nvrtc_version)) return "missing or bad 'nvrtc_version'";
  if (!get_string(j, "driver_version", out.driver_version)) return "missing or bad 'driver_version'";
  const json* cands = member(j, "candidates");
  if (!cands || !cands->is_array()) return "missing or bad 'candidates'";
  for (const json& c : *cands) {
    CandidateResult cr;
    if (!get_candidate(c, knobs, cr)) return "bad entry in 'candidates'";
    out.candidates.push_back(std::move(cr));
  }
  // Informational fields: tolerated when absent or odd.
  if (const json* p = member(j, "partial"); p && p->is_boolean()) out.partial = p->get<bool>();
  if (const json* s = member(j, "tune_seconds"); s && s->is_number()) out.tune_seconds = s->get<double>();
  get_string(j, "tuned_at", out.tuned_at);
  return {};
}

}  // namespace

ParsedTuningFile parse_tuning_file(std::string_view text, const TuningFileHeader& expect, const KnobTableLookup& knobs) {
  ParsedTuningFile out;
  auto corrupt = [&](std::string why) {
    out.state = TuningFileState::corrupt;
    out.problem = std::move(why);
    out.records.clear();
    return out;
  };
  // A tuning file sits in a folder others may have written to; bound its nesting first.
  if (auto depth = check_json_depth(text, "tuning file"); !depth.ok()) return corrupt(depth.error().message());
  const json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return corrupt("not valid JSON");
  if (!doc.is_object()) return corrupt("not a JSON object");
  std::string format;
  if (!get_string(doc, "format", format) || format != kTuningFormat)
    return corrupt(std::string("not a tuning file (no \"format\": \"") + kTuningFormat + "\")");
  int version = 0;
  if (!get_int(doc, "format_version", version)) return corrupt("missing or bad 'format_version'");
  if (version > kTuningFormatVersion) {
    out.state = TuningFileState::newer_format;
    out.problem = "format version " + std::to_string(version) + " is newer than this flashjit's (" +
                  std::to_string(kTuningFormatVersion) + ")";
    return out;
  }
  if (version < kTuningFormatVersion) return corrupt("old format version " + std::to_string(version));
  TuningFileHeader h;
  if (!get_string(doc, "device_name", h.device_name) || !get_string(doc, "arch", h.arch))
    return corrupt("missing 'device_name' or 'arch'");
  // Device slugs could collide ("A B" and "A-B"); another device's timings must not be used.
  if (h.device_name != expect.device_name || h.arch != expect.arch)
    return corrupt("written for device '" + printable(h.device_name) + "' " + printable(h.arch) + ", not '" +
                   printable(expect.device_name) + "' " + expect.arch);
  const json* records = member(doc, "records");
  if (!records || !records->is_object()) return corrupt("missing 'records' object");
  for (auto it = records->begin(); it != records->end(); ++it) {
    TuningRecord r;
    const std::string family = it.key().substr(0, it.key().find('/'));
    const KnobTable* table = knobs ? knobs(family) : nullptr;
    std::string why = table ? get_record(it.value(), *table, r) : "no kernel family '" + family + "' in this flashjit";
    if (why.empty()) out.records.emplace(it.key(), std::move(r));
    else out.bad_records.push_back(printable(it.key()) + ": " + why);
  }
  return out;
}

std::string serialize_tuning_file(const TuningFileHeader& header, const std::map<std::string, TuningRecord>& records) {
  json doc{{"format", kTuningFormat},
           {"format_version", kTuningFormatVersion},
           {"device_name", header.device_name},
           {"arch", header.arch},
           {"nvrtc_version", header.nvrtc_version},
           {"driver_version", header.driver_version},
           {"records", json::object()}};
  for (const auto& [key, r] : records) doc["records"][key] = record_json(r);
  // Replacing invalid UTF-8 (say, in a device name) keeps dump() from throwing.
  return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace flashjit::autotune
