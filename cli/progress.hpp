// A one-line progress bar for the subcommands that work through many files.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <ostream>
#include <string>

namespace voxpipe::cli {

// "NAME [#####.....] 42% LABEL" on stderr, redrawn with \r at most every 100 ms; silent when
// `err` is null (stderr is not a terminal), so that logs and tests get no control characters.
// Thread-safe.
class Progress {
 public:
  Progress(std::ostream* err, std::uint64_t total, std::string name)
      : err_(err), total_(std::max<std::uint64_t>(total, 1)), name_(std::move(name)) {}

  // The number of steps the bar counts to, once it is known better.
  void expect(std::uint64_t total) {
    std::lock_guard lock(mutex_);
    total_ = std::max<std::uint64_t>(total, 1);
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
  // Erases the bar, e.g. before a line of output (the next tick or phase draws it again).
  void finish() {
    std::lock_guard lock(mutex_);
    if (err_ && width_) *err_ << '\r' << std::string(width_, ' ') << '\r' << std::flush;
    width_ = 0;
  }

 private:
  void draw(bool force) {
    if (!err_) return;
    const auto now = std::chrono::steady_clock::now();
    if (!force && now - last_ < std::chrono::milliseconds(100) && done_ < total_) return;
    last_ = now;
    constexpr std::uint64_t kBar = 30;
    const std::uint64_t filled = std::min(done_, total_) * kBar / total_;
    std::string line = name_ + " [" + std::string(filled, '#') + std::string(kBar - filled, '.') +
                       "] " + std::to_string(std::min(done_, total_) * 100 / total_) + "% " + label_;
    const std::size_t shown = line.size();
    if (line.size() < width_) line += std::string(width_ - line.size(), ' ');
    width_ = std::max(width_, shown);
    *err_ << '\r' << line << std::flush;
  }

  std::ostream* err_;
  std::uint64_t total_;
  std::string name_;
  std::uint64_t done_ = 0;
  std::string label_;
  std::size_t width_ = 0;
  std::chrono::steady_clock::time_point last_{};
  std::mutex mutex_;
};

}  // namespace voxpipe::cli
