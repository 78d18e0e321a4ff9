// The progress display: plain lines with counters and heartbeats off a terminal; a redrawn bar
// with count, percent, ETA and the item in flight on one.
#include <doctest/doctest.h>

#include <sstream>
#include <thread>

#include "progress_bar.hpp"

using namespace flashjit::tools;
using namespace std::chrono_literals;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("format_duration") {
  CHECK(format_duration(0) == "0:00");
  CHECK(format_duration(7.4) == "0:07");
  CHECK(format_duration(62) == "1:02");
  CHECK(format_duration(3723) == "1:02:03");
  CHECK(format_duration(-5) == "0:00");
}

TEST_CASE("plain lines: one per finished item, counted") {
  std::ostringstream os;
  {
    ProgressStyle style;
    style.tty = false;
    ProgressBar bar(os, 12, style);
    auto a = bar.begin("first");
    auto b = bar.begin("second");
    bar.end(b, "second done");
    bar.print("a note\nover two lines");
    bar.end(a, "first done");
    CHECK(bar.done() == 2);
  }
  const std::string text = os.str();
  CHECK(has(text, "[ 1/12] second done\n"));
  CHECK(has(text, "[ 2/12] first done\n"));
  CHECK(has(text, "a note\nover two lines\n"));
  CHECK(!has(text, "\x1b["));  // no terminal control off a terminal
}

TEST_CASE("plain lines: a heartbeat whenever an item runs silently past the limit") {
  std::ostringstream os;
  ProgressStyle style;
  style.tty = false;
  style.verb = "compiling";
  style.heartbeat = 50ms;
  ProgressBar bar(os, 2, style);
  auto a = bar.begin("slow-kernel");
  bar.begin("other-kernel");
  std::this_thread::sleep_for(300ms);
  bar.end(a, "slow-kernel done");
  bar.finish();
  const std::string text = os.str();
  CHECK(has(text, "still compiling slow-kernel ("));
  CHECK(has(text, "and 1 more"));
}

TEST_CASE("plain lines: no heartbeat while nothing is in flight") {
  std::ostringstream os;
  ProgressStyle style;
  style.heartbeat = 20ms;
  ProgressBar bar(os, 1, style);
  std::this_thread::sleep_for(150ms);
  bar.finish();
  CHECK(os.str().empty());
}

TEST_CASE("terminal: the bar shows count, percent, ETA and the item in flight, redrawn in place") {
  std::ostringstream os;
  ProgressStyle style;
  style.tty = true;
  style.columns = 160;
  style.verb = "compiling";
  style.refresh = 20ms;
  ProgressBar bar(os, 4, style);
  auto a = bar.begin("sm_80 kernel-a");
  bar.end(a, "kernel-a compiled");
  bar.begin("sm_80 kernel-b");
  std::this_thread::sleep_for(200ms);
  bar.finish();  // before reading: the stream is only safe to read once the redraw thread stopped
  const std::string during = os.str();
  CHECK(has(during, "\r\x1b[K"));
  CHECK(has(during, "1/4  25%"));
  CHECK(has(during, "ETA "));
  CHECK(has(during, "compiling sm_80 kernel-b"));
  CHECK(has(during, "[1/4] kernel-a compiled\n"));
  // Redrawn at the refresh rate while the item runs (several frames in 200 ms).
  std::size_t frames = 0;
  for (std::size_t p = 0; (p = during.find("kernel-b", p)) != std::string::npos; ++p) ++frames;
  CHECK(frames >= 3);
  // finish() erases the bar: the stream ends with the erase sequence.
  CHECK(during.substr(during.size() - 4) == "\r\x1b[K");
}

TEST_CASE("terminal: a narrow line keeps the item in flight and fits the width") {
  std::ostringstream os;
  ProgressStyle style;
  style.tty = true;
  style.columns = 60;
  style.refresh = 1000ms;
  ProgressBar bar(os, 3, style);
  bar.begin("sm_90a fa2_sm80-bf16-dqk128-dv128-causal-gqa-lse-vec8-m128n64w4s2");
  bar.finish();
  std::string text = os.str();
  text.resize(text.size() - 4);  // the final erase
  const std::size_t start = text.rfind("\r\x1b[K") + 4;
  const std::string line = text.substr(start);
  CHECK(line.size() <= 59);
  CHECK(has(line, "0/3"));
  CHECK(has(line, "sm_90a fa2_sm80"));
}
