// A progress display for work done item by item on several threads, written to one stream
// (normally stderr).
//
// On a terminal: one bar line, redrawn in place at least every `refresh`, showing the count,
// percent, elapsed time, ETA and the items in flight with how long each has run; lines printed
// through print() or end() appear above the bar.
// Elsewhere (a log file, a pipe, CI): one plain line per finished item, and, while items are in
// flight, a "still working on X" line whenever nothing was written for `heartbeat`, so no step
// is ever silent for longer than that.
//
// Every method is safe to call from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <map>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>

namespace flashjit::tools {

struct ProgressStyle {
  bool tty = false;      // draw a bar redrawn in place (else plain lines)
  int columns = 0;       // bar line width; 0: the terminal's width on stderr, else 80
  std::string verb = "working on";  // heartbeat and bar wording: "compiling"
  std::chrono::milliseconds refresh{200};     // bar redraw period (tty)
  std::chrono::milliseconds heartbeat{1000};  // longest silence allowed (plain lines)
};

// Width of the terminal on stderr, or 0 when it is not one.
int terminal_columns();

// "0:07", "1:02:03".
std::string format_duration(double seconds);

class ProgressBar {
 public:
  ProgressBar(std::ostream& os, std::size_t total, ProgressStyle style = {});
  ~ProgressBar();  // finish()
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // An item started; the ticket is passed to end().
  std::size_t begin(const std::string& item);
  // The item finished: counts it and prints "[done/total] line".
  void end(std::size_t ticket, const std::string& line);
  // Prints text (one or more lines) without counting anything.
  void print(const std::string& text);
  // Stops the redraw thread and erases the bar; further calls only print plain lines.
  void finish();

  std::size_t done() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct InFlight {
    std::string item;
    Clock::time_point started;
  };

  void tick_loop();
  void write_above_locked(const std::string& text);
  void draw_locked();
  void heartbeat_locked(Clock::time_point now);
  std::string bar_line_locked(Clock::time_point now) const;

  std::ostream& os_;
  const std::size_t total_;
  const ProgressStyle style_;
  const int columns_;
  const Clock::time_point t0_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool finished_ = false;
  bool bar_visible_ = false;
  std::size_t done_ = 0;
  std::size_t next_ticket_ = 0;
  std::map<std::size_t, InFlight> in_flight_;
  Clock::time_point last_write_;
  std::thread ticker_;
};

}  // namespace flashjit::tools
