#include "progress_bar.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace flashjit::tools {
namespace {

constexpr int kBarCells = 24;
constexpr const char* kEraseLine = "\r\x1b[K";

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1fs", s);
  return buf;
}

}  // namespace

int terminal_columns() {
  winsize ws{};
  if (::isatty(STDERR_FILENO) && ::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 0;
}

std::string format_duration(double seconds) {
  const long s = seconds < 0 ? 0 : long(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

ProgressBar::ProgressBar(std::ostream& os, std::size_t total, ProgressStyle style)
    : os_(os),
      total_(total),
      style_(std::move(style)),
      columns_(style_.columns > 0 ? style_.columns : (terminal_columns() > 0 ? terminal_columns() : 80)),
      t0_(Clock::now()),
      last_write_(t0_) {
  ticker_ = std::thread([this] { tick_loop(); });
}

ProgressBar::~ProgressBar() { finish(); }

std::size_t ProgressBar::begin(const std::string& item) {
  std::lock_guard lock(mu_);
  const std::size_t ticket = next_ticket_++;
  in_flight_[ticket] = InFlight{item, Clock::now()};
  if (style_.tty && !finished_) draw_locked();
  return ticket;
}

void ProgressBar::end(std::size_t ticket, const std::string& line) {
  std::lock_guard lock(mu_);
  in_flight_.erase(ticket);
  ++done_;
  const int width = int(std::to_string(total_).size());
  char counter[64];
  std::snprintf(counter, sizeof counter, "[%*zu/%zu] ", width, done_, total_);
  write_above_locked(counter + line);
}

void ProgressBar::print(const std::string& text) {
  std::lock_guard lock(mu_);
  write_above_locked(text);
}

std::size_t ProgressBar::done() const {
  std::lock_guard lock(mu_);
  return done_;
}

void ProgressBar::finish() {
  {
    std::lock_guard lock(mu_);
    if (finished_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  std::lock_guard lock(mu_);
  if (bar_visible_) os_ << kEraseLine << std::flush;
  bar_visible_ = false;
  finished_ = true;
}

void ProgressBar::tick_loop() {
  const auto period = style_.tty ? style_.refresh
                                 : std::max(std::chrono::milliseconds(10), style_.heartbeat / 10);
  std::unique_lock lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, period, [&] { return stopping_; });
    if (stopping_) break;
    if (style_.tty) draw_locked();
    else heartbeat_locked(Clock::now());
  }
}

void ProgressBar::write_above_locked(const std::string& text) {
  if (bar_visible_) os_ << kEraseLine;
  os_ << text;
  if (text.empty() || text.back() != '\n') os_ << '\n';
  bar_visible_ = false;
  last_write_ = Clock::now();
  if (style_.tty && !finished_) draw_locked();
  else os_.flush();
}

void ProgressBar::draw_locked() {
  os_ << kEraseLine << bar_line_locked(Clock::now()) << std::flush;
  bar_visible_ = true;
  last_write_ = Clock::now();
}

void ProgressBar::heartbeat_locked(Clock::time_point now) {
  if (in_flight_.empty() || now - last_write_ < style_.heartbeat) return;
  const InFlight& oldest = in_flight_.begin()->second;  // tickets grow: the first started first
  std::string line = "  ... still " + style_.verb + " " + oldest.item + " (" +
                     seconds_text(std::chrono::duration<double>(now - oldest.started).count()) + ")";
  if (in_flight_.size() > 1) line += " and " + std::to_string(in_flight_.size() - 1) + " more";
  os_ << line << '\n' << std::flush;
  last_write_ = now;
}

std::string ProgressBar::bar_line_locked(Clock::time_point now) const {
  const double elapsed = std::chrono::duration<double>(now - t0_).count();
  const double frac = total_ ? double(done_) / double(total_) : 1.0;
  char stats[128];
  std::snprintf(stats, sizeof stats, "%zu/%zu %3d%% %s", done_, total_, int(frac * 100), format_duration(elapsed).c_str());
  std::string head = stats;
  if (done_ > 0 && done_ < total_) head += " ETA " + format_duration(elapsed / double(done_) * double(total_ - done_));
  else if (done_ < total_) head += " ETA --:--";
  std::string item, item_tail;
  if (!in_flight_.empty()) {
    const InFlight& oldest = in_flight_.begin()->second;
    item = oldest.item;
    item_tail = " " + seconds_text(std::chrono::duration<double>(now - oldest.started).count());
    if (in_flight_.size() > 1) item_tail += " +" + std::to_string(in_flight_.size() - 1);
  }
  // The item in flight matters most: the bar shrinks, then the verb goes, then the item's end.
  const int width = std::max(20, columns_ - 1);
  const int fixed = int(head.size() + item.size() + item_tail.size()) + 5;
  const int verb = item.empty() ? 0 : int(style_.verb.size()) + 1;
  const int cells = std::clamp(width - fixed - verb, 8, kBarCells);
  const bool with_verb = verb && width - fixed - cells >= verb;
  const int filled = int(frac * cells);
  std::string line = "[" + std::string(filled, '#') + std::string(cells - filled, '.') + "] " + head;
  if (!item.empty()) {
    line += "  " + (with_verb ? style_.verb + " " : std::string());
    const std::size_t room = std::size_t(std::max(8, width - int(line.size() + item_tail.size())));
    line += (item.size() > room ? item.substr(0, room - 3) + "..." : item) + item_tail;
  }
  if (line.size() > std::size_t(width)) line.resize(std::size_t(width));
  return line;
}

}  // namespace flashjit::tools
