#include "autotune/tune_mode.hpp"

#include <doctest/doctest.h>

#include "autotune_test_util.hpp"

using namespace flashjit;
using namespace flashjit::autotune;
using namespace flashjit::autotune::test;

TEST_CASE("tune_mode: every accepted spelling parses") {
  CHECK(parse_tune_mode("off").value() == TuneMode::off);
  CHECK(parse_tune_mode("first-use").value() == TuneMode::on_first_use);
  CHECK(parse_tune_mode("on_first_use").value() == TuneMode::on_first_use);
  CHECK(parse_tune_mode("offline").value() == TuneMode::offline_only);
  CHECK(parse_tune_mode("offline_only").value() == TuneMode::offline_only);
  CHECK(parse_tune_mode("OFF").value() == TuneMode::off);
  CHECK(parse_tune_mode("First-Use").value() == TuneMode::on_first_use);
}

TEST_CASE("tune_mode: names round trip") {
  for (TuneMode m : {TuneMode::off, TuneMode::on_first_use, TuneMode::offline_only})
    CHECK(parse_tune_mode(tune_mode_name(m)).value() == m);
}

TEST_CASE("tune_mode: bad values are invalid_argument naming the value and the choices") {
  for (const char* bad : {"", "on", "1", "first use", "offline-only ", "always"}) {
    auto r = parse_tune_mode(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Code::invalid_argument);
    CHECK(r.error().message().find("first-use") != std::string::npos);
    CHECK(r.error().detail("value") == std::string(bad));
  }
}

TEST_CASE("tune_mode: FLASHJIT_TUNE unset or empty gives the fallback silently") {
  LogSink log;
  {
    EnvGuard env(kTuneModeEnv, std::nullopt);
    CHECK(tune_mode_from_env(TuneMode::offline_only, log.fn()) == TuneMode::offline_only);
    CHECK(tune_mode_from_env(TuneMode::off, log.fn()) == TuneMode::off);
  }
  {
    EnvGuard env(kTuneModeEnv, "");
    CHECK(tune_mode_from_env(TuneMode::on_first_use, log.fn()) == TuneMode::on_first_use);
  }
  CHECK(log.lines().empty());
}

TEST_CASE("tune_mode: FLASHJIT_TUNE is read") {
  LogSink log;
  {
    EnvGuard env(kTuneModeEnv, "first-use");
    CHECK(tune_mode_from_env(TuneMode::off, log.fn()) == TuneMode::on_first_use);
  }
  {
    EnvGuard env(kTuneModeEnv, "off");
    CHECK(tune_mode_from_env(TuneMode::on_first_use, log.fn()) == TuneMode::off);
  }
  {
    EnvGuard env(kTuneModeEnv, "offline_only");
    CHECK(tune_mode_from_env(TuneMode::off, log.fn()) == TuneMode::offline_only);
  }
  CHECK(log.lines().empty());
}

TEST_CASE("tune_mode: a malformed FLASHJIT_TUNE falls back and says so") {
  LogSink log;
  EnvGuard env(kTuneModeEnv, "fast");
  CHECK(tune_mode_from_env(TuneMode::offline_only, log.fn()) == TuneMode::offline_only);
  REQUIRE(log.lines().size() == 1);
  CHECK(log.contains("FLASHJIT_TUNE"));
  CHECK(log.contains("'fast'"));
  CHECK(log.contains("using 'offline'"));
  // No logger: still the fallback, and no crash.
  CHECK(tune_mode_from_env(TuneMode::off) == TuneMode::off);
}
