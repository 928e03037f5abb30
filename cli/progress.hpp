// The one progress bar of every subcommand that can run for seconds.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <ostream>
#include <string>

namespace voxpipe::cli {

// "NAME [#####.....] 42% 3/7 volumes, ETA 0:12 LABEL" on stderr, redrawn with \r at most every
// 100 ms; silent when `err` is null (stderr is not a terminal), so that logs, pipes and tests
// get no control characters. `unit` names what is counted: "bytes" shows sizes ("1.2/3.4 MiB"),
// any other word follows the counts. The ETA extrapolates the rate since counting began (the
// construction, or the first expect() before any step), "ETA ?" until a step is done.
// Thread-safe.
class Progress {
 public:
  Progress(std::ostream* err, std::uint64_t total, std::string name, std::string unit)
      : err_(err),
        total_(std::max<std::uint64_t>(total, 1)),
        name_(std::move(name)),
        unit_(std::move(unit)),
        start_(std::chrono::steady_clock::now()) {}

  // The number of steps the bar counts to, once it is known better.
  void expect(std::uint64_t total) {
    std::lock_guard lock(mutex_);
    total_ = std::max<std::uint64_t>(total, 1);
    if (done_ == 0) start_ = std::chrono::steady_clock::now();  // scanning is not counting
  }
  // Draws the bar now (at 0 before the first step, which may take long).
  void show() {
    std::lock_guard lock(mutex_);
    draw(true);
  }
  void phase(std::string label) {
    std::lock_guard lock(mutex_);
    label_ = std::move(label);
    draw(true);
  }
  void tick(std::uint64_t steps = 1) {
    std::lock_guard lock(mutex_);
    done_ += steps;
    draw(false);
  }
  // Sets the count to `done` (for reports of a position rather than of steps).
  void at(std::uint64_t done) {
    std::lock_guard lock(mutex_);
    done_ = done;
    draw(false);
  }
  // Erases the bar, e.g. before a line of output (the next tick or phase draws it again).
  void finish() {
    std::lock_guard lock(mutex_);
    if (err_ && width_) *err_ << '\r' << std::string(width_, ' ') << '\r' << std::flush;
    width_ = 0;
  }

 private:
  static std::string duration(double seconds) {
    const auto s = static_cast<long long>(seconds + 0.5);
    char buf[32];
    if (s >= 3600)
      std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
    else
      std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
    return buf;
  }

  std::string counts(std::uint64_t done) const {
    if (unit_ != "bytes") return std::to_string(done) + "/" + std::to_string(total_) + " " + unit_;
    static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    double scale = 1;
    while (u < 4 && static_cast<double>(total_) >= 1024 * scale) {
      scale *= 1024;
      ++u;
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, u ? "%.1f/%.1f %s" : "%.0f/%.0f %s", static_cast<double>(done) / scale,
                  static_cast<double>(total_) / scale, units[u]);
    return buf;
  }

  void draw(bool force) {
    if (!err_) return;
    const auto now = std::chrono::steady_clock::now();
    if (!force && now - last_ < std::chrono::milliseconds(100) && done_ < total_) return;
    last_ = now;
    constexpr std::uint64_t kBar = 30;
    const std::uint64_t done = std::min(done_, total_);
    const std::uint64_t filled = done * kBar / total_;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const std::string eta =
        done ? duration(elapsed * static_cast<double>(total_ - done) / static_cast<double>(done)) : "?";
    std::string line = name_ + " [" + std::string(filled, '#') + std::string(kBar - filled, '.') +
                       "] " + std::to_string(done * 100 / total_) + "% " + counts(done) + ", ETA " +
                       eta + (label_.empty() ? "" : " " + label_);
    const std::size_t shown = line.size();
    if (line.size() < width_) line += std::string(width_ - line.size(), ' ');
    width_ = std::max(width_, shown);
    *err_ << '\r' << line << std::flush;
  }

  std::ostream* err_;
  std::uint64_t total_;
  std::string name_;
  std::string unit_;
  std::uint64_t done_ = 0;
  std::string label_;
  std::size_t width_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_{};
  std::mutex mutex_;
};

}  // namespace voxpipe::cli
