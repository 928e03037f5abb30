// The one progress report of every subcommand that can run for seconds: a bar on a terminal,
// plain lines in a log (--progress, docs/cli.md "Progress").
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

namespace voxpipe::cli {

// How a long command reports its progress on stderr: the value of --progress.
enum class ProgressMode {
  automatic,  // "auto" (default): the bar on a terminal; elsewhere log lines, once the command
              // has run one interval (a short command in a script stays quiet)
  bar,        // the bar, redrawn with \r, wherever stderr goes
  log,        // a line every interval, and one at the end with the total time
  none,       // nothing
};

// "auto", "bar", "log" or "none"; nullopt for anything else.
inline std::optional<ProgressMode> progress_mode_from_name(std::string_view name) {
  if (name == "auto") return ProgressMode::automatic;
  if (name == "bar") return ProgressMode::bar;
  if (name == "log") return ProgressMode::log;
  if (name == "none") return ProgressMode::none;
  return std::nullopt;
}

// The time between two log lines: often enough that a job's log shows it alive, rarely enough
// that an hour's run writes about 700 lines.
inline constexpr std::chrono::seconds kProgressLogInterval{5};

// The time between two log lines of this run: $VOXPIPE_PROGRESS_INTERVAL seconds (a number
// >= 0; 0 writes a line at every step), else kProgressLogInterval. Another value is ignored:
// it tunes a report, not the command's result.
inline std::chrono::steady_clock::duration progress_log_interval() {
  if (const char* s = std::getenv("VOXPIPE_PROGRESS_INTERVAL"); s && *s) {
    char* end = nullptr;
    const double seconds = std::strtod(s, &end);
    if (!*end && seconds >= 0 && seconds <= 86400)
      return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(seconds));
  }
  return kProgressLogInterval;
}

// The report of `total` steps of the command `name` ("voxpipe resample") on `err`, in the mode
// `mode` resolves to (`err_is_terminal` decides what automatic means). `unit` names what is
// counted: "bytes" shows sizes ("1.2/3.4 MiB"), any other word follows the counts.
//
//   bar: "NAME [#####.....] 42% 3/7 volumes, ETA 0:12 LABEL", redrawn with \r at most every
//        100 ms; finish() and end() erase it.
//   log: "NAME: 3/7 volumes (42%), 1.5 volumes/s, ETA 0:03 [LABEL]", a line when a step or a
//        phase comes at least progress_log_interval() after the previous line (the first one
//        after the construction), and at end() "NAME: 7/7 volumes (100%), 1.6 volumes/s,
//        done in 0:04". Under automatic (stderr not a terminal) end() writes its line only
//        when an interval line was written.
//
// The rate and the ETA count from the construction, or from the first expect() before any
// step (a scan is not counting); "ETA ?" until a step is done. A step costs a lock and a clock
// read; text is made only when a line is written. Thread-safe.
class Progress {
 public:
  Progress(std::ostream& err, ProgressMode mode, bool err_is_terminal, std::uint64_t total,
           std::string name, std::string unit)
      : err_(mode == ProgressMode::none ? nullptr : &err),
        log_(mode == ProgressMode::log || (mode == ProgressMode::automatic && !err_is_terminal)),
        log_at_end_(mode == ProgressMode::log),
        total_(std::max<std::uint64_t>(total, 1)),
        name_(std::move(name)),
        unit_(std::move(unit)),
        began_(std::chrono::steady_clock::now()),
        start_(began_) {
    if (log_) {
      interval_ = progress_log_interval();
      next_line_ = began_ + interval_;
    }
  }

  // Whether anything is reported at all (false for none).
  bool active() const { return err_ != nullptr; }

  // The number of steps the report counts to, once it is known better.
  void expect(std::uint64_t total) {
    std::lock_guard lock(mutex_);
    total_ = std::max<std::uint64_t>(total, 1);
    if (done_ == 0) start_ = std::chrono::steady_clock::now();  // scanning is not counting
  }
  // Draws the bar now (at 0 before the first step, which may take long).
  void show() {
    std::lock_guard lock(mutex_);
    if (!log_) draw(true);
  }
  void phase(std::string label) {
    std::lock_guard lock(mutex_);
    label_ = std::move(label);
    if (log_)
      update();
    else
      draw(true);
  }
  void tick(std::uint64_t steps = 1) {
    std::lock_guard lock(mutex_);
    done_ += steps;
    update();
  }
  // Sets the count to `done` (for reports of a position rather than of steps).
  void at(std::uint64_t done) {
    std::lock_guard lock(mutex_);
    done_ = done;
    update();
  }
  // Erases the bar, e.g. before a line of output (the next tick or phase draws it again).
  void finish() {
    std::lock_guard lock(mutex_);
    erase();
  }
  // The command's work is done: erases the bar, or writes the closing log line. Nothing is
  // reported after it. A command that fails does not call it: its error is the last line.
  void end() {
    std::lock_guard lock(mutex_);
    if (!err_) return;
    if (log_) {
      if (log_at_end_ || lines_) {
        const auto now = std::chrono::steady_clock::now();
        *err_ << name_ << ": " << counts(std::min(done_, total_)) << " ("
              << std::min(done_, total_) * 100 / total_ << "%), " << rate(now) << ", done in "
              << duration(std::chrono::duration<double>(now - began_).count()) << "\n"
              << std::flush;
      }
    } else {
      erase();
    }
    err_ = nullptr;
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

  // 1024-based size unit of `bytes`: its index in {B, KiB, MiB, GiB, TiB} and its scale.
  static int size_unit(double bytes, double& scale) {
    int u = 0;
    scale = 1;
    while (u < 4 && bytes >= 1024 * scale) {
      scale *= 1024;
      ++u;
    }
    return u;
  }
  static constexpr const char* kSizeUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};

  std::string counts(std::uint64_t done) const {
    if (unit_ != "bytes") return std::to_string(done) + "/" + std::to_string(total_) + " " + unit_;
    double scale = 1;
    const int u = size_unit(static_cast<double>(total_), scale);
    char buf[64];
    std::snprintf(buf, sizeof buf, u ? "%.1f/%.1f %s" : "%.0f/%.0f %s", static_cast<double>(done) / scale,
                  static_cast<double>(total_) / scale, kSizeUnits[u]);
    return buf;
  }

  // Steps per second since counting began: "3.1 volumes/s", "25.3 MiB/s".
  std::string rate(std::chrono::steady_clock::time_point now) const {
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double r = elapsed > 0 ? static_cast<double>(std::min(done_, total_)) / elapsed : 0.0;
    char buf[64];
    if (unit_ == "bytes") {
      double scale = 1;
      const int u = size_unit(r, scale);
      std::snprintf(buf, sizeof buf, "%.1f %s/s", r / scale, kSizeUnits[u]);
    } else {
      std::snprintf(buf, sizeof buf, "%.1f %s/s", r, unit_.c_str());
    }
    return buf;
  }

  std::string eta(std::chrono::steady_clock::time_point now, std::uint64_t done) const {
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    return done ? duration(elapsed * static_cast<double>(total_ - done) / static_cast<double>(done)) : "?";
  }

  void update() {
    if (!err_) return;
    if (!log_) {
      draw(false);
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now < next_line_) return;
    next_line_ = now + interval_;
    ++lines_;
    const std::uint64_t done = std::min(done_, total_);
    *err_ << name_ << ": " << counts(done) << " (" << done * 100 / total_ << "%), " << rate(now)
          << ", ETA " << eta(now, done);
    if (!label_.empty()) *err_ << " [" << label_ << "]";
    *err_ << "\n" << std::flush;
  }

  void draw(bool force) {
    if (!err_) return;
    const auto now = std::chrono::steady_clock::now();
    if (!force && now - last_ < std::chrono::milliseconds(100) && done_ < total_) return;
    last_ = now;
    constexpr std::uint64_t kBar = 30;
    const std::uint64_t done = std::min(done_, total_);
    const std::uint64_t filled = done * kBar / total_;
    std::string line = name_ + " [" + std::string(filled, '#') + std::string(kBar - filled, '.') +
                       "] " + std::to_string(done * 100 / total_) + "% " + counts(done) + ", ETA " +
                       eta(now, done) + (label_.empty() ? "" : " " + label_);
    const std::size_t shown = line.size();
    if (line.size() < width_) line += std::string(width_ - line.size(), ' ');
    width_ = std::max(width_, shown);
    *err_ << '\r' << line << std::flush;
  }

  void erase() {
    if (err_ && width_) *err_ << '\r' << std::string(width_, ' ') << '\r' << std::flush;
    width_ = 0;
  }

  std::ostream* err_;      // null: nothing is reported (none, or after end())
  const bool log_;         // lines rather than the bar
  const bool log_at_end_;  // the closing line even when no interval line was written
  std::uint64_t total_;
  std::string name_;
  std::string unit_;
  std::uint64_t done_ = 0;
  std::string label_;
  std::size_t width_ = 0;
  std::uint64_t lines_ = 0;
  std::chrono::steady_clock::duration interval_{};
  const std::chrono::steady_clock::time_point began_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_{};
  std::chrono::steady_clock::time_point next_line_{};
  std::mutex mutex_;
};

}  // namespace voxpipe::cli
