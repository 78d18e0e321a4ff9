// The on-disk format of a tuning store file (JSON), apart from how the file is read, locked and
// replaced (tuning_store.cpp). One file per (device, arch):
//
//   {
//     "format": "flashjit-tuning", "format_version": 2,
//     "device_name": "NVIDIA H100 80GB HBM3", "arch": "sm_90a",
//     "nvrtc_version": "12.4", "driver_version": "12040",      <- of the last writer
//     "records": {
//       "fa2_sm80/f16-d128-causal-v8/sq4096/sk4096/bh64": {
//         "tiling": {"block_m": 128, "block_n": 64, "warps": 4, "stages": 2}, "ms": 0.91,
//                                        <- the knobs of the key's family (its knob table)
//         "default_tiling": {...}, "default_ms": 1.02,
//         "candidates": [{"tiling": {...}, "status": "timed", "ms": 1.02},
//                        {"tiling": {...}, "status": "pruned", "reason": "needs 240 KB ..."}],
//         "candidate_set_hash": "<32 hex>", "partial": false, "tune_seconds": 12.5,
//         "tuned_at": "2025-01-31T12:00:00Z", "nvrtc_version": "12.4", "driver_version": "12040"
//       }, ...
//     }
//   }
//
// Versions are also kept per record: processes with different toolkits may share one cache,
// and each must be able to add its results without discarding (or wrongly relabelling) the
// other's. A record is used only under its own versions.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "autotune/tuning_record.hpp"
#include "base/variant_json.hpp"

namespace flashjit::autotune {

// Tells a tuning file from any other JSON that happens to sit at its path.
inline constexpr const char* kTuningFormat = "flashjit-tuning";
// Bumped on any change an older reader would misread; older versions are not migrated (tuning
// is re-done instead), newer ones are left alone for the flashjit that wrote them.
// 2: tilings are the knobs of each family's table; semantics names gained varlen, window, ...
inline constexpr int kTuningFormatVersion = 2;

struct TuningFileHeader {
  std::string device_name;
  std::string arch;
  std::string nvrtc_version;
  std::string driver_version;
};

enum class TuningFileState {
  ok,
  corrupt,       // unparsable, not a tuning file, an older format or another device's
  newer_format,  // written by a newer flashjit: readable to it only, so never overwritten
};

struct ParsedTuningFile {
  TuningFileState state = TuningFileState::ok;
  std::string problem;  // why, when state is not ok
  std::map<std::string, TuningRecord> records;
  // Records that failed their checks, as "<key>: <why>"; the rest of the file is still used.
  std::vector<std::string> bad_records;
};

// `expect` gives the device name and arch the file must have been written for (its versions
// are not compared here: that is per record, at lookup). A record's tilings are read with the
// knob table of the family its key starts with ("fa2_sm80/..."); unknown families are bad records.
ParsedTuningFile parse_tuning_file(std::string_view text, const TuningFileHeader& expect, const KnobTableLookup& knobs);

// Pretty-printed, keys sorted, so files diff well and identical content gives identical bytes.
std::string serialize_tuning_file(const TuningFileHeader& header, const std::map<std::string, TuningRecord>& records);

}  // namespace flashjit::autotune
