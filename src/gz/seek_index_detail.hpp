// What the seek index's parts share: seek_index.cpp (reading ranges, keys, index files) and
// seek_index_build.cpp (building an index), which decodes the windows of some points the way a
// range read decodes; the measure of a build's progress by the bytes it reads, which
// gzip_api.cpp's fast build uses too; and what the exact builds share with the one-pass
// parallel build (seek_index_onepass.cpp): the point rule, the progress, its entry point.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/file.hpp"
#include "gz/known_window.hpp"
#include "gz/seek_index.hpp"
#include "gz/stream.hpp"

namespace voxpipe::gz::index_detail {

// Output is taken in pieces of this size, by the index build and by range reads.
constexpr std::size_t kOutputChunk = std::size_t{256} << 10;

// A point where a member begins: decoding from it sees the member from its first byte. Windows
// are empty exactly there (an index file may still store one for the stream's first point).
inline bool at_member_start(const SeekPoint& p) {
  return p.uncompressed == 0 || !p.has_window();
}

// Decodes from point `p` and delivers the output in [from, stop) to the sink; returns the run's
// segments. With ISA-L (through the parallel engine's known-window run; about twice zlib's
// speed), else with the engine's own decoder.
std::vector<inflate_detail::Segment> decode_from(const core::RandomAccessInput& file,
                                                 const SeekIndex& index, const SeekPoint& p,
                                                 std::uint64_t from, std::uint64_t stop,
                                                 const Sink& sink);

// Tells `on_read` the furthest byte read so far, whenever it grows, one call at a time: the
// progress of a pass that reads the file front to back (a parallel inflate a few chunks ahead of
// its output), measured without a hook inside it. An exception from `on_read` leaves read_at.
class ReadProgressInput final : public core::RandomAccessInput {
 public:
  ReadProgressInput(const core::RandomAccessInput& file,
                    std::function<void(std::uint64_t furthest)> on_read)
      : file_(file), on_read_(std::move(on_read)) {}
  std::size_t read_at(std::uint64_t offset, std::span<std::byte> dst) const override {
    const std::size_t n = file_.read_at(offset, dst);
    std::lock_guard lock(mutex_);
    if (offset + n > furthest_) {
      furthest_ = offset + n;
      on_read_(furthest_);
    }
    return n;
  }
  std::uint64_t size() const noexcept override { return file_.size(); }
  const std::string& path() const noexcept override { return file_.path(); }
  bool fetches() const noexcept override { return file_.fetches(); }
  void prefetch(std::span<const ByteRange> ranges) const override { file_.prefetch(ranges); }
  void read_ahead(std::span<const ByteRange> ranges) const override { file_.read_ahead(ranges); }

 private:
  const core::RandomAccessInput& file_;
  std::function<void(std::uint64_t)> on_read_;
  mutable std::mutex mutex_;
  mutable std::uint64_t furthest_ = 0;
};

// ExactBuildOptions::progress for one build_seek_index call: `done` increasing across the builds
// it may run (a parallel build that falls back to the sequential one starts again from the
// front), held below the total until the index is complete.
class BuildProgress {
 public:
  BuildProgress(const std::function<void(std::uint64_t, std::uint64_t)>& report,
                std::uint64_t total)
      : report_(report), total_(total) {}

  bool wanted() const { return static_cast<bool>(report_); }

  // `done` bytes of the total; told only when it passes the last report. Once the callback has
  // thrown (the build is stopping with its exception), never again.
  void at(std::uint64_t done) {
    if (!report_) return;
    std::lock_guard lock(mutex_);
    done = std::min(done, total_ - 1);  // total_ >= 2: the file starts with the gzip magic
    if (threw_ || done <= last_) return;
    call(done);
  }

  // The index is complete.
  void complete() {
    if (!report_) return;
    std::lock_guard lock(mutex_);
    if (!threw_) call(total_);
  }

  // Whether an exception left the callback: the build stops with it rather than trying the
  // sequential build.
  bool threw() const {
    std::lock_guard lock(mutex_);
    return threw_;
  }

 private:
  void call(std::uint64_t done) {
    last_ = done;
    threw_ = true;
    report_(done, total_);
    threw_ = false;
  }

  const std::function<void(std::uint64_t, std::uint64_t)>& report_;
  const std::uint64_t total_;
  mutable std::mutex mutex_;
  std::uint64_t last_ = 0;
  bool threw_ = false;
};

// A point whose window is not at hand when it is placed (the parallel build decodes it later):
// index.points[point] needs the `length` bytes of output before it.
struct PendingWindow {
  std::size_t point = 0;
  std::uint32_t length = 0;
};

// The state of the index while it is built: which boundary to turn into a point. The rule
// depends on the points before (spacing counts from the last one), so boundaries must come in
// stream order; the parallel build feeds them in that order after decoding spans out of order.
class PointPicker {
 public:
  PointPicker(SeekIndex& index, std::uint64_t spacing, std::span<const std::uint64_t> wanted)
      : index_(index), spacing_(spacing), wanted_(wanted) {}

  // A deflate block starts at `bit` with `u` bytes of output before it, `window` the last
  // min(32 KiB, output of this member) of them.
  void boundary(std::uint64_t bit, std::uint64_t u, std::span<const std::uint8_t> window) {
    boundary(bit, u, static_cast<std::uint32_t>(window.size()), &window);
  }

  // The same with the window's length only; `window` null: its bytes are not at hand, and a
  // point placed here is listed in pending() with an empty window.
  void boundary(std::uint64_t bit, std::uint64_t u, std::uint32_t window_length,
                const std::span<const std::uint8_t>* window) {
    // The wanted offsets before this boundary: the previous boundary is the last at or before
    // each of them.
    bool any_before = false;
    while (next_ < wanted_.size() && wanted_[next_] < u) {
      any_before = true;
      ++next_;
    }
    if (any_before) emit_candidate();
    const bool member_start = window_length == 0;
    bool here = member_start || index_.points.empty() ||
                (spacing_ != 0 && u - index_.points.back().uncompressed >= spacing_);
    while (next_ < wanted_.size() && wanted_[next_] == u) {
      here = true;
      ++next_;
    }
    if (here) {
      push(SeekPoint{bit, u, window ? std::vector<std::uint8_t>(window->begin(), window->end())
                                    : std::vector<std::uint8_t>{}},
           window_length, window != nullptr);
      candidate_valid_ = false;
    } else if (next_ < wanted_.size()) {
      // Keep it in case the next wanted offset comes before the next boundary.
      candidate_.compressed_bit = bit;
      candidate_.uncompressed = u;
      if (window)
        candidate_.window.assign(window->begin(), window->end());
      else
        candidate_.window.clear();
      candidate_length_ = window_length;
      candidate_has_window_ = window != nullptr;
      candidate_valid_ = true;
    }
  }

  // The points placed without their window's bytes, in point order.
  const std::vector<PendingWindow>& pending() const { return pending_; }

  // The end of the data: wanted offsets before it fall in the last block.
  void finish(std::uint64_t total) {
    if (next_ < wanted_.size() && wanted_[next_] < total) emit_candidate();
  }

 private:
  void emit_candidate() {
    if (!candidate_valid_) return;
    candidate_valid_ = false;
    if (candidate_.uncompressed == index_.points.back().uncompressed) return;  // no gain
    push(std::move(candidate_), candidate_length_, candidate_has_window_);
    candidate_ = SeekPoint{};
  }

  void push(SeekPoint p, std::uint32_t window_length, bool has_window) {
    if (window_length != 0 && !has_window)
      pending_.push_back({index_.points.size(), window_length});
    index_.points.push_back(std::move(p));
  }

  SeekIndex& index_;
  std::uint64_t spacing_;
  std::span<const std::uint64_t> wanted_;
  std::size_t next_ = 0;
  SeekPoint candidate_;
  std::uint32_t candidate_length_ = 0;
  bool candidate_has_window_ = false;
  bool candidate_valid_ = false;
  std::vector<PendingWindow> pending_;
};

// What the parallel build saw that the sequential one would not: the data is not what the
// parallel inflate's points promised. Never expected of a file the inflate accepted; the caller
// builds sequentially instead.
struct SpanMismatch {};

// The exact index in one parallel pass (seek_index_onepass.cpp): chunks decoded ahead from the
// block starts found in them, recording every block boundary, then accepted and placed in stream
// order. nullopt when the file has fewer than two chunks (nothing to share out). Throws
// SpanMismatch, or voxpipe::Error on bad data (the caller then builds sequentially, which
// reports its own error).
std::optional<SeekIndex> build_one_pass(const core::RandomAccessInput& file, std::uint64_t spacing,
                                        std::span<const std::uint64_t> wanted,
                                        const ExactBuildOptions& options, BuildProgress& progress);

// The same index on one thread (seek_index_onepass.cpp): one run of our decoder from the first
// block to the end of the file, each block boundary placed as it passes, with its window from
// the last 32 KiB of output (zlib's Z_BLOCK inflate, which the build used before, is about half
// as fast). Throws voxpipe::Error on bad data (the caller then builds with zlib, which reports
// its own error), SpanMismatch if the run stops short of the end.
SeekIndex build_in_order(const core::RandomAccessInput& file, std::uint64_t spacing,
                         std::span<const std::uint64_t> wanted, const ExactBuildOptions& options,
                         BuildProgress& progress);

}  // namespace voxpipe::gz::index_detail
