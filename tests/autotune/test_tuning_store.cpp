#include "autotune/tuning_store.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "autotune/tuner.hpp"
#include "autotune/tuning_file.hpp"
#include "autotune_test_util.hpp"

using namespace flashjit;
using namespace flashjit::autotune;
using namespace flashjit::autotune::test;

namespace {

const char* kDevice = "NVIDIA H100 80GB HBM3";
const char* kArch = "sm_90a";

TuningStore open_store(const std::string& root, LogSink* log = nullptr, const std::string& nvrtc = "12.4",
                       const std::string& driver = "12040", const std::string& device = kDevice) {
  auto s = TuningStore::open(root, device, kArch, nvrtc, driver, log ? log->fn() : Logger([](const std::string&) {}), test_knobs);
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.error().to_string()));
  return std::move(s).value();
}

TuningKey key_for(std::int64_t seqlen) {
  Semantics s;
  s.mask = Mask::causal;
  return make_tuning_key("fa2_sm80", s, seqlen, seqlen, 32);
}

const std::string kHash = candidate_set_hash(sample_candidates());

TuningRecord sample_record(double ms = 0.7) {
  FakeGpu gpu;
  gpu.set_time(T(128, 64, 8, 3), ms);
  auto o = tune(sample_candidates(), kDefault, gpu.measure(), {}, {}, {});
  REQUIRE(o.ok());
  return o->to_record(kHash);
}

}  // namespace

TEST_CASE("tuning_store: file names come from arch and a device slug") {
  CHECK(device_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3");
  CHECK(device_slug("  NVIDIA  GeForce RTX 4090 (rev. 2) ") == "nvidia-geforce-rtx-4090-rev-2");
  CHECK(device_slug("../../etc/passwd") == "etc-passwd");
  CHECK(device_slug("") == "unknown-device");
  CHECK(device_slug("***") == "unknown-device");
  CHECK(device_slug(std::string(500, 'a')).size() == kMaxDeviceSlugLength);
  CHECK(tuning_file_name("sm_90a", "NVIDIA H100 80GB HBM3") == "sm_90a-nvidia-h100-80gb-hbm3.json");
}

TEST_CASE("tuning_store: put, reopen, find") {
  TempDir tmp;
  const std::string root = tmp / "root";
  TuningRecord rec = sample_record();
  {
    TuningStore store = open_store(root);
    CHECK(store.path() == root + "/tuning/sm_90a-nvidia-h100-80gb-hbm3.json");
    CHECK_FALSE(store.find(key_for(4096), kHash).has_value());
    REQUIRE(store.put(key_for(4096), rec).ok());
    CHECK(exists(store.path()));  // written at once, not at exit
    auto found = store.find(key_for(4000), kHash);  // same bucket
    REQUIRE(found.has_value());
    CHECK(found->tiling == rec.tiling);
  }
  TuningStore again = open_store(root);
  auto found = again.find(key_for(4096), kHash);
  REQUIRE(found.has_value());
  CHECK(found->tiling == T(128, 64, 8, 3));
  CHECK(found->ms == doctest::Approx(0.7));
  CHECK(found->default_tiling == kDefault);
  CHECK(*found->default_ms == doctest::Approx(1.2));
  CHECK(found->candidate_set_hash == kHash);
  CHECK(found->nvrtc_version == "12.4");
  CHECK(found->driver_version == "12040");
  CHECK(found->tuned_at == rec.tuned_at);
  REQUIRE(found->candidates.size() == rec.candidates.size());
  for (std::size_t i = 0; i < rec.candidates.size(); ++i) {
    CHECK(found->candidates[i].tiling == rec.candidates[i].tiling);
    CHECK(found->candidates[i].status == rec.candidates[i].status);
    CHECK(found->candidates[i].ms == rec.candidates[i].ms);
    CHECK(found->candidates[i].reason == rec.candidates[i].reason);
  }
  CHECK_FALSE(again.find(key_for(8192), kHash).has_value());
  CHECK(again.records().size() == 1);

  // The file is readable JSON with the documented header.
  auto doc = nlohmann::json::parse(read_file(again.path()));
  CHECK(doc["format"] == kTuningFormat);
  CHECK(doc["format_version"] == kTuningFormatVersion);
  CHECK(doc["device_name"] == kDevice);
  CHECK(doc["arch"] == kArch);
  CHECK(doc["nvrtc_version"] == "12.4");
  CHECK(doc["driver_version"] == "12040");
  CHECK(doc["records"].contains("fa2_sm80/f16-dqk128-dv128-causal-vec8/sq4096/sk4096/bh32"));
}

TEST_CASE("tuning_store: folders are private, like the kernel cache") {
  TempDir tmp;
  TuningStore store = open_store(tmp / "root");
  REQUIRE(store.put(key_for(64), sample_record()).ok());
  struct stat st{};
  REQUIRE(::stat((tmp / "root/tuning").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  REQUIRE(::stat((tmp / "root/tuning/locks").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);

  ::chmod((tmp / "root/tuning").c_str(), 0777);
  auto refused = TuningStore::open(tmp / "root", kDevice, kArch, "12.4", "12040", {}, test_knobs);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code() == Code::permission_denied);
}

TEST_CASE("tuning_store: the root defaults to FLASHJIT_CACHE_DIR") {
  TempDir tmp;
  EnvGuard env("FLASHJIT_CACHE_DIR", tmp / "envroot");
  auto s = TuningStore::open(std::nullopt, kDevice, kArch, "12.4", "12040", {}, test_knobs);
  REQUIRE(s.ok());
  CHECK(s->path() == tmp / "envroot/tuning/sm_90a-nvidia-h100-80gb-hbm3.json");
}

TEST_CASE("tuning_store: bad arch or empty device name is refused") {
  TempDir tmp;
  CHECK(TuningStore::open(tmp / "r", kDevice, "../x", "1", "1", {}, test_knobs).error().code() == Code::invalid_argument);
  CHECK(TuningStore::open(tmp / "r", "", kArch, "1", "1", {}, test_knobs).error().code() == Code::invalid_argument);
}

TEST_CASE("tuning_store: another nvrtc, driver or candidate set makes a record stale") {
  TempDir tmp;
  const std::string root = tmp / "root";
  REQUIRE(open_store(root).put(key_for(4096), sample_record()).ok());

  LogSink log;
  TuningStore new_nvrtc = open_store(root, &log, "12.6", "12040");
  CHECK_FALSE(new_nvrtc.find(key_for(4096), kHash).has_value());
  CHECK_FALSE(new_nvrtc.find(key_for(4096), kHash).has_value());
  CHECK(log.count("made with NVRTC '12.4', this process uses '12.6'") == 1);  // logged once

  TuningStore new_driver = open_store(root, &log, "12.4", "12080");
  CHECK_FALSE(new_driver.find(key_for(4096), kHash).has_value());
  CHECK(log.contains("made with driver '12040'"));

  TuningStore same = open_store(root, &log);
  CHECK_FALSE(same.find(key_for(4096), candidate_set_hash({T(64, 64, 4, 2)})).has_value());
  CHECK(log.contains("different candidate set"));
  CHECK(same.find(key_for(4096), kHash).has_value());
}

TEST_CASE("tuning_store: processes with different versions keep each other's records") {
  TempDir tmp;
  const std::string root = tmp / "root";
  TuningStore old_tools = open_store(root, nullptr, "12.4");
  TuningStore new_tools = open_store(root, nullptr, "12.6");
  REQUIRE(old_tools.put(key_for(1024), sample_record()).ok());
  REQUIRE(new_tools.put(key_for(2048), sample_record()).ok());
  TuningStore reopened_old = open_store(root, nullptr, "12.4");
  TuningStore reopened_new = open_store(root, nullptr, "12.6");
  CHECK(reopened_old.find(key_for(1024), kHash).has_value());
  CHECK_FALSE(reopened_old.find(key_for(2048), kHash).has_value());
  CHECK(reopened_new.find(key_for(2048), kHash).has_value());
  CHECK_FALSE(reopened_new.find(key_for(1024), kHash).has_value());
}

TEST_CASE("tuning_store: a corrupt file is logged, moved aside and treated as empty") {
  TempDir tmp;
  const std::string root = tmp / "root";
  const std::string path = open_store(root).path();
  for (const std::string& junk : {std::string("{\"format\": \"flashjit-tuning\", \"format_ver"), std::string("[1,2,3]"),
                                  std::string("{\"hello\": 1}"), std::string("\x00\xff garbage", 10)}) {
    CAPTURE(junk);
    write_file(path, junk);
    LogSink log;
    TuningStore s = open_store(root, &log);
    CHECK(s.records().empty());
    CHECK(log.contains("moved aside"));
    CHECK_FALSE(exists(path));
    std::size_t aside = 0;
    for (const auto& f : files_in(tmp / "root/tuning"))
      if (f.find(".json.corrupt-") != std::string::npos) ++aside;
    CHECK(aside >= 1);
    // And the store works again.
    REQUIRE(s.put(key_for(128), sample_record()).ok());
    CHECK(open_store(root).find(key_for(128), kHash).has_value());
    ::unlink(path.c_str());
  }
  // Every corrupt file was kept, none overwritten by the next.
  std::size_t aside = 0;
  for (const auto& f : files_in(tmp / "root/tuning"))
    if (f.find(".json.corrupt-") != std::string::npos) ++aside;
  CHECK(aside == 4);
}

TEST_CASE("tuning_store: a corrupt file found by put is moved aside and replaced") {
  TempDir tmp;
  const std::string root = tmp / "root";
  LogSink log;
  TuningStore s = open_store(root, &log);
  write_file(s.path(), "not json at all");
  REQUIRE(s.put(key_for(256), sample_record()).ok());
  CHECK(log.contains("moved aside"));
  CHECK(open_store(root).find(key_for(256), kHash).has_value());
}

TEST_CASE("tuning_store: a FIFO, a folder or an unsafe file at the tuning file's name is never read, and moved aside") {
  TempDir tmp;
  const std::string root = tmp / "root";
  std::string path;
  {
    TuningStore s = open_store(root);
    REQUIRE(s.put(key_for(64), sample_record()).ok());
    path = s.path();
  }
  std::string what;
  SUBCASE("a FIFO") {
    REQUIRE(::unlink(path.c_str()) == 0);
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    what = "FIFO";
  }
  SUBCASE("a folder") {
    REQUIRE(::unlink(path.c_str()) == 0);
    REQUIRE(::mkdir(path.c_str(), 0700) == 0);
    what = "folder";
  }
  SUBCASE("writable by others") {
    REQUIRE(::chmod(path.c_str(), 0666) == 0);
    what = "writable by group or others";
  }
  const int code = test_support::run_bounded(10, [&] {
    LogSink log;
    auto s = TuningStore::open(root, kDevice, kArch, "12.4", "12040", log.fn(), test_knobs);
    if (!s.ok()) return 1;
    if (!s->records().empty()) return 2;  // nothing was read from it
    if (!log.contains(what) || !log.contains("moved aside")) return 3;
    return s->put(key_for(128), sample_record()).ok() ? 0 : 4;
  });
  CHECK(code == 0);  // 128 + SIGALRM means the open blocked
  auto after = open_store(root);
  CHECK(after.find(key_for(128), kHash).has_value());
  CHECK_FALSE(after.find(key_for(64), kHash).has_value());
}

TEST_CASE("tuning_store: another device's file at our path is not used") {
  TempDir tmp;
  const std::string root = tmp / "root";
  TuningStore a = open_store(root, nullptr, "12.4", "12040", "GPU A");
  REQUIRE(a.put(key_for(512), sample_record()).ok());
  // "GPU-A" has the same slug, so the same file.
  LogSink log;
  TuningStore b = open_store(root, &log, "12.4", "12040", "GPU-A");
  CHECK(b.path() == a.path());
  CHECK_FALSE(b.find(key_for(512), kHash).has_value());
  CHECK(log.contains("written for device 'GPU A'"));
}

TEST_CASE("tuning_store: a bad record is skipped, the others kept") {
  TempDir tmp;
  const std::string root = tmp / "root";
  std::string path;
  {
    TuningStore s = open_store(root);
    for (int n : {1024, 2048, 4096}) REQUIRE(s.put(key_for(n), sample_record()).ok());
    path = s.path();
  }
  auto doc = nlohmann::json::parse(read_file(path));
  doc["records"][key_for(1024).to_string()]["ms"] = "fast";
  doc["records"][key_for(2048).to_string()]["tiling"]["warps"] = 3.5;
  doc["records"]["odd/entry"] = 7;
  write_file(path, doc.dump());
  LogSink log;
  TuningStore s = open_store(root, &log);
  CHECK_FALSE(s.find(key_for(1024), kHash).has_value());
  CHECK_FALSE(s.find(key_for(2048), kHash).has_value());
  CHECK(s.find(key_for(4096), kHash).has_value());
  CHECK(log.contains("ignoring record " + key_for(1024).to_string() + ": missing or bad 'ms'"));
  CHECK(log.contains("ignoring record odd/entry"));
  CHECK_FALSE(log.contains("moved aside"));
  CHECK(exists(path));
}

TEST_CASE("tuning_store: a file of a newer format is never overwritten") {
  TempDir tmp;
  const std::string root = tmp / "root";
  const std::string path = open_store(root).path();
  const std::string future = R"({"format": "flashjit-tuning", "format_version": 99, "shiny": true})";
  write_file(path, future);
  LogSink log;
  TuningStore s = open_store(root, &log);
  CHECK(log.contains("newer than this flashjit's"));
  Status st = s.put(key_for(64), sample_record());
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code() == Code::unsupported);
  CHECK(read_file(path) == future);
  CHECK(s.find(key_for(64), kHash).has_value());  // kept in memory for this process
}

TEST_CASE("tuning_store: a file of the previous format is set aside, never misread") {
  TempDir tmp;
  const std::string root = tmp / "root";
  const std::string path = open_store(root).path();
  // What flashjit 0.1 wrote: format 1, semantics named the old way, the same tiling fields.
  const std::string old = R"({"format": "flashjit-tuning", "format_version": 1, "device_name": ")" + std::string(kDevice) +
                          R"(", "arch": "sm_90a", "nvrtc_version": "12.4", "driver_version": "12040", "records": {
      "fa2_sm80/f16-d128-causal-v8/sq4096/sk4096/bh32": {"tiling": {"block_m": 64, "block_n": 32, "warps": 4,
      "stages": 2}, "ms": 0.5, "default_tiling": {"block_m": 128, "block_n": 64, "warps": 4, "stages": 2},
      "candidates": [], "candidate_set_hash": "x", "nvrtc_version": "12.4", "driver_version": "12040"}}})";
  write_file(path, old);
  LogSink log;
  TuningStore s = open_store(root, &log);
  CHECK(log.contains("old format version 1"));
  CHECK(s.records().empty());
  CHECK_FALSE(s.find(key_for(4096), kHash).has_value());
  REQUIRE(s.put(key_for(64), sample_record()).ok());  // the store goes on in the current format
  CHECK(read_file(path).find("\"format_version\": 2") != std::string::npos);
}

TEST_CASE("tuning_store: reload picks up what another store wrote") {
  TempDir tmp;
  const std::string root = tmp / "root";
  TuningStore a = open_store(root);
  TuningStore b = open_store(root);
  REQUIRE(b.put(key_for(64), sample_record()).ok());
  CHECK_FALSE(a.find(key_for(64), kHash).has_value());
  REQUIRE(a.reload().ok());
  CHECK(a.find(key_for(64), kHash).has_value());
  // And a put merges: b's key survives a's write, and a learns it.
  REQUIRE(b.put(key_for(128), sample_record()).ok());
  REQUIRE(a.put(key_for(256), sample_record()).ok());
  CHECK(a.find(key_for(128), kHash).has_value());
  TuningStore c = open_store(root);
  CHECK(c.records().size() == 3);
}

TEST_CASE("tuning_store: the cache being cleared under a running store is survived") {
  TempDir tmp;
  const std::string root = tmp / "root";
  TuningStore s = open_store(root);
  REQUIRE(s.put(key_for(64), sample_record()).ok());
  std::filesystem::remove_all(root);
  REQUIRE(s.put(key_for(128), sample_record()).ok());
  CHECK(open_store(root).find(key_for(128), kHash).has_value());
}

TEST_CASE("tuning_store: threads putting different keys at once lose nothing") {
  TempDir tmp;
  const std::string root = tmp / "root";
  TuningStore s = open_store(root);
  constexpr int kThreads = 8, kKeysEach = 10;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kKeysEach; ++i) {
        TuningKey k = key_for(64);
        k.batch_heads_bucket = 1 << (t + 1);
        k.seq_q_bucket = 1 << (i + 1);
        CHECK(s.put(k, sample_record()).ok());
      }
    });
  for (auto& th : threads) th.join();
  CHECK(open_store(root).records().size() == std::size_t(kThreads * kKeysEach));
}

TEST_CASE("tuning_store: processes putting different keys at once lose nothing") {
  TempDir tmp;
  const std::string root = tmp / "root";
  REQUIRE(open_store(root).records().empty());  // folders exist before the race
  constexpr int kProcesses = 4, kKeysEach = 15;
  TuningRecord rec = sample_record();
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p)
    children.push_back(fork_child([&, p] {
      auto s = TuningStore::open(root, kDevice, kArch, "12.4", "12040", [](const std::string&) {}, test_knobs);
      if (!s) return 2;
      for (int i = 0; i < kKeysEach; ++i) {
        TuningKey k = key_for(64);
        k.batch_heads_bucket = 1 << (p + 1);
        k.seq_q_bucket = 1 << (i + 1);
        if (!s->put(k, rec).ok()) return 3;
      }
      return 0;
    }));
  for (pid_t c : children) CHECK(wait_child(c) == 0);
  TuningStore s = open_store(root);
  CHECK(s.records().size() == std::size_t(kProcesses * kKeysEach));
  for (int p = 0; p < kProcesses; ++p)
    for (int i = 0; i < kKeysEach; ++i) {
      TuningKey k = key_for(64);
      k.batch_heads_bucket = 1 << (p + 1);
      k.seq_q_bucket = 1 << (i + 1);
      CHECK(s.find(k, kHash).has_value());
    }
  // No temp files left behind by the atomic writes.
  for (const auto& f : files_in(tmp / "root/tuning")) CHECK(f.find(".tmp-") == std::string::npos);
}

TEST_CASE("tuning_file: deep nesting is corrupt before any parse; echoed names are escaped") {
  TuningFileHeader expect{"NVIDIA H100", "sm_90a", "12.4", "12040"};
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  ParsedTuningFile p = parse_tuning_file(deep, expect, test_knobs);
  CHECK(p.state == TuningFileState::corrupt);
  CHECK(p.problem.find("nested deeper than") != std::string::npos);

  nlohmann::json doc{{"format", kTuningFormat}, {"format_version", kTuningFormatVersion},
                     {"device_name", "evil\x1b]0;x\x07"}, {"arch", "sm_90a"}, {"records", nlohmann::json::object()}};
  p = parse_tuning_file(doc.dump(), expect, test_knobs);
  CHECK(p.state == TuningFileState::corrupt);
  CHECK(p.problem.find("'evil\\x1b]0;x\\x07'") != std::string::npos);
}
