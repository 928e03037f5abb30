// Building a seek index by zlib inflate (Z_BLOCK reports every block boundary; ISA-L has no such
// stop), front to back or in spans between the points of a parallel inflate, decoding ranges
// from it (the zran.c method: madler/zlib
// examples/zran.c, and indexed_gzip's zran.c, with ISA-L), and where index files live.
#include "gz/seek_index.hpp"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>

#include "core/thread_pool.hpp"
#include "gz/known_window.hpp"
#include "gz/members.hpp"
#include "gz/parallel_inflate.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::gz {
namespace {

// The index build reads its input in pieces of this size: large enough that pread costs nothing
// next to zlib's inflate (~300 MB/s). Ranges decode through the known-window run, which reads
// its own pieces (256 KiB; known_window.cpp).
constexpr std::size_t kInputChunk = std::size_t{128} << 10;
constexpr std::size_t kOutputChunk = std::size_t{256} << 10;
constexpr std::size_t kTailBytes = std::size_t{64} << 10;

// Compressed input read from the file in pieces, fed to a z_stream.
class Input {
 public:
  Input(const core::RandomAccessInput& file, std::uint64_t offset)
      : file_(file), buf_(new std::uint8_t[kInputChunk]), next_read_(offset) {}

  // Makes input available to z; false at the end of the file.
  bool fill(z_stream& z) {
    sync(z);
    if (pos_ < len_) return true;
    len_ = file_.read_at(next_read_, std::as_writable_bytes(std::span(buf_.get(), kInputChunk)));
    start_ = next_read_;
    next_read_ += len_;
    pos_ = 0;
    z.next_in = buf_.get();
    z.avail_in = static_cast<uInt>(len_);
    return len_ > 0;
  }
  // Records how much z consumed; call after every inflate.
  void sync(const z_stream& z) {
    if (z.next_in) pos_ = len_ - z.avail_in;
  }
  // File offset of the next unconsumed byte.
  std::uint64_t offset() const noexcept { return start_ + pos_; }
  // The next byte without consuming it (fill() must have returned true).
  std::uint8_t peek() const noexcept { return buf_[pos_]; }
  void skip(z_stream& z, std::size_t n) {
    pos_ += n;
    z.next_in = buf_.get() + pos_;
    z.avail_in = static_cast<uInt>(len_ - pos_);
  }
  // Continues reading at `offset` (a member's deflate data after its header was parsed
  // elsewhere); z has no input left.
  void reset(z_stream& z, std::uint64_t offset) {
    start_ = next_read_ = offset;
    pos_ = len_ = 0;
    z.next_in = nullptr;
    z.avail_in = 0;
  }

 private:
  const core::RandomAccessInput& file_;
  std::unique_ptr<std::uint8_t[]> buf_;
  std::uint64_t start_ = 0;  // file offset of buf_[0]
  std::size_t pos_ = 0, len_ = 0;
  std::uint64_t next_read_;
};

struct Inflater {
  z_stream z{};
  explicit Inflater(int window_bits, const std::string& path) {
    if (inflateInit2(&z, window_bits) != Z_OK)
      throw Error(ErrorCode::io, path, "", "cannot initialise zlib");
  }
  ~Inflater() { inflateEnd(&z); }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;
};

// Between members only zero padding (as Python's gzip) or the next member's magic may follow.
// Skips the padding; returns false at the end of the file.
bool skip_to_member(Input& in, z_stream& z, const std::string& path) {
  while (in.fill(z)) {
    if (in.peek() == 0) {
      in.skip(z, 1);
      continue;
    }
    if (in.peek() != 0x1f)
      throw Error(ErrorCode::corrupt, path, "gzip member",
                  "expected a gzip member (1f 8b) or the end of the file, but found other data",
                  in.offset());
    return true;
  }
  return false;
}

[[noreturn]] void throw_inflate_error(const z_stream& z, int rc, const std::string& path,
                                      std::uint64_t at) {
  const char* msg = z.msg ? z.msg : "zlib error";
  if (rc == Z_DATA_ERROR &&
      (std::strcmp(msg, "incorrect data check") == 0 ||
       std::strcmp(msg, "incorrect length check") == 0))
    throw Error(ErrorCode::corrupt, path, "gzip trailer",
                "CRC32 or ISIZE does not match the inflated data", at);
  if (rc == Z_MEM_ERROR) throw Error(ErrorCode::io, path, "", "out of memory in zlib");
  throw Error(ErrorCode::corrupt, path, "gzip stream",
              std::string("invalid compressed data (") + msg + ")", at);
}

[[noreturn]] void throw_truncated(const std::string& path, std::uint64_t at) {
  throw Error(ErrorCode::truncated, path, "gzip stream",
              "expected more compressed data, but the file ends inside a gzip member", at);
}

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

// The index by one inflate front to back.
SeekIndex build_sequential(const core::RandomAccessInput& file, std::uint64_t spacing,
                           std::span<const std::uint64_t> wanted) {
  const std::string& path = file.path();
  SeekIndex index;
  index.compressed_size = file.size();
  index.spacing = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(spacing, std::numeric_limits<std::uint32_t>::max()));
  PointPicker picker(index, spacing, wanted);

  Inflater inf(16 + MAX_WBITS, path);
  z_stream& z = inf.z;
  Input in(file, 0);
  // Output slides through a buffer that keeps the last 32 KiB (the window of the next point).
  std::vector<std::uint8_t> out(kWindowSize + kOutputChunk);
  std::size_t have = 0;             // bytes of out in use
  std::uint64_t total = 0;          // output so far
  std::uint64_t member_out = 0;     // output of the current member
  std::uint64_t last_bit = ~std::uint64_t{0};  // the last boundary seen (zlib may report twice)
  bool first = true;
  while (true) {
    if (!skip_to_member(in, z, path)) break;
    if (!first && inflateReset(&z) != Z_OK)
      throw Error(ErrorCode::io, path, "", "cannot reset zlib");
    first = false;
    member_out = 0;
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
      // At the end of the file zlib may still hold output; only no progress is truncation.
      const bool eof = z.avail_in == 0 && !in.fill(z);
      if (have == out.size()) {
        std::memmove(out.data(), out.data() + have - kWindowSize, kWindowSize);
        have = kWindowSize;
      }
      z.next_out = out.data() + have;
      z.avail_out = static_cast<uInt>(out.size() - have);
      rc = inflate(&z, Z_BLOCK);
      in.sync(z);
      const std::size_t produced = out.size() - have - z.avail_out;
      have += produced;
      total += produced;
      member_out += produced;
      if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
        throw_inflate_error(z, rc, path, in.offset());
      if (eof && produced == 0 && rc != Z_STREAM_END) throw_truncated(path, in.offset());
      // At a block start that is not after the last block (zran.c's test).
      if ((z.data_type & 128) && !(z.data_type & 64)) {
        const std::uint64_t bit = in.offset() * 8 - static_cast<unsigned>(z.data_type & 7);
        if (bit != last_bit) {
          last_bit = bit;
          const std::size_t w =
              static_cast<std::size_t>(std::min<std::uint64_t>(member_out, kWindowSize));
          picker.boundary(bit, total, std::span(out.data() + have - w, w));
        }
      }
    }
  }
  picker.finish(total);
  // A block boundary at the very end (an empty last block, an empty file) has nothing to
  // inflate after it.
  while (!index.points.empty() && index.points.back().uncompressed == total)
    index.points.pop_back();
  index.uncompressed_size = total;
  return index;
}

// The output of a run from a seek point: what comes before `from` is dropped, [from, stop) goes
// to the sink, and the run ends once it has passed `stop`, or at the end of the member that ends
// at `stop` (after its trailer). The CRC32 of everything the run inflated below `stop`, from
// the point on, is kept per member (segments), so that inflate_range can chain the runs of one
// member and check it against its trailer (MemberChecker).
class RangeOutput final : public inflate_detail::RunOutput {
 public:
  RangeOutput(std::uint64_t pos, std::uint64_t from, std::uint64_t stop, const Sink& sink)
      : buf_(new std::uint8_t[kOutputChunk]), pos_(pos), from_(from), stop_(stop), sink_(sink) {}

  // Past `stop`, a little room only: enough to see whether the member ends there.
  std::span<std::uint8_t> space() override {
    return {buf_.get(), pos_ >= stop_ ? kPeek : kOutputChunk};
  }
  void commit(std::size_t n) override {
    const std::uint8_t* p = buf_.get();
    if (pos_ < stop_) {
      const auto counted = static_cast<std::size_t>(std::min<std::uint64_t>(n, stop_ - pos_));
      crc_ = inflate_detail::crc32_update(crc_, p, counted);
      length_ += counted;
    }
    const std::uint64_t a = std::max(pos_, from_), b = std::min(pos_ + n, stop_);
    if (a < b)
      sink_(a, std::as_bytes(std::span(p + (a - pos_), static_cast<std::size_t>(b - a))));
    pos_ += n;
  }
  void member_end(std::uint32_t crc, std::uint32_t isize, std::uint64_t trailer_byte) override {
    segments_.push_back({crc_, length_, true, crc, isize, trailer_byte});
    crc_ = 0;
    length_ = 0;
  }
  void member_start(std::uint64_t) override {}
  // Past `stop`: the stream goes on (a member that begins at `stop` is followed until it gives a
  // byte, so that an empty one is checked too).
  bool done() const override { return pos_ > stop_; }
  std::uint64_t position() const { return pos_; }
  // The run's segments, the last one unfinished unless a member ended at `stop`.
  std::vector<inflate_detail::Segment> finish() {
    if (length_) segments_.push_back({crc_, length_, false, 0, 0, 0});
    length_ = 0;
    return std::move(segments_);
  }

 private:
  static constexpr std::size_t kPeek = 4096;
  std::unique_ptr<std::uint8_t[]> buf_;
  std::uint64_t pos_, from_, stop_;
  const Sink& sink_;
  std::uint32_t crc_ = 0;
  std::uint64_t length_ = 0;
  std::vector<inflate_detail::Segment> segments_;
};

// A point where a member begins: decoding from it sees the member from its first byte. Windows
// are empty exactly there (an index file may still store one for the stream's first point).
bool at_member_start(const SeekPoint& p) { return p.uncompressed == 0 || !p.has_window(); }

// Decodes from point `p` and delivers the output in [from, stop) to the sink; returns the run's
// segments. With ISA-L (through the parallel engine's known-window run; about twice zlib's
// speed), else with the engine's own decoder.
std::vector<inflate_detail::Segment> decode_from(const core::RandomAccessInput& file,
                                                 const SeekIndex& index, const SeekPoint& p,
                                                 std::uint64_t from, std::uint64_t stop,
                                                 const Sink& sink) {
  std::vector<std::uint8_t> scratch;
  const std::span<const std::uint8_t> window = index.window_of(p, scratch);
  RangeOutput out(p.uncompressed, from, stop, sink);
  const inflate_detail::TargetFn no_targets = [](std::size_t) {
    return std::optional<BlockCandidate>{};
  };
  inflate_detail::run_known_window(file, p.compressed_bit, window, 0, 0, no_targets, out);
  if (out.position() < stop)
    throw Error(ErrorCode::truncated, file.path(), "gzip stream",
                "expected more data (the index promises " +
                    std::to_string(stop - out.position()) + " more bytes), but the file ends",
                file.size());
  return out.finish();
}

// How far before `begin` a read may start at a member's first point instead of a later point,
// so that a range that runs to the member's end (a whole image after its header) is checked
// against the trailer: at most 1 MiB (a NIfTI header and extensions are far smaller) and an
// eighth of the range (a small read near the start does not inflate what it skips).
bool worth_checking(std::uint64_t lead, std::uint64_t range) {
  return lead <= (std::uint64_t{1} << 20) && lead <= range / 8;
}


// --- The parallel exact build -------------------------------------------------------------------

// A block boundary a span's decode saw: the block's first bit, the output before it, and the
// length of its window (min(32 KiB, output of its member before it); 0 at a member's start).
struct Boundary {
  std::uint64_t bit = 0;
  std::uint64_t u = 0;
  std::uint32_t window_length = 0;
};

// A stretch of the stream between two points of the parallel inflate, decoded by one task.
struct Span {
  const SeekPoint* start = nullptr;
  std::uint64_t end_bit = UINT64_MAX;  // where the next span starts; UINT64_MAX: at the end
  std::uint64_t end_u = 0;             // its uncompressed offset (the total for the last)
  std::vector<Boundary> boundaries;    // [start, end_bit), in stream order
  // The CRC32s of its output per member piece, with the trailers of the members it ends, for
  // MemberChecker: chained in stream order they check every member whatever spans cut it.
  std::vector<inflate_detail::Segment> segments;
  // When kept: the start's window, then the span's output (what the windows of its points are
  // cut from), in a buffer of the build's pool.
  std::unique_ptr<std::uint8_t[]> kept;
  std::size_t kept_capacity = 0;
  bool keep = false;
  bool done = false;
};

// What the parallel build saw that the sequential one would not: the data is not what the
// parallel inflate's points promised. Never expected of a file the inflate accepted; the caller
// builds sequentially instead.
struct SpanMismatch {};

// finish_member's report of a member's trailer: the span's segment of that member ends.
class TrailerOutput final : public inflate_detail::RunOutput {
 public:
  TrailerOutput(std::vector<inflate_detail::Segment>& segments, std::uint32_t crc,
                std::uint64_t length)
      : segments_(segments), crc_(crc), length_(length) {}
  std::span<std::uint8_t> space() override { return {byte_, 1}; }
  void commit(std::size_t) override {}
  void member_end(std::uint32_t crc, std::uint32_t isize, std::uint64_t trailer_byte) override {
    segments_.push_back({crc_, length_, true, crc, isize, trailer_byte});
  }
  void member_start(std::uint64_t) override {}

 private:
  std::vector<inflate_detail::Segment>& segments_;
  std::uint32_t crc_;
  std::uint64_t length_;
  std::uint8_t byte_[1];
};

// Inflates `span` from its start (raw zlib primed with the start's bits and window, as zran.c
// resumes) through member ends until the block boundary where the next span starts, listing
// every block boundary as the sequential build's Z_BLOCK loop sees them.
void decode_span(const core::RandomAccessInput& file, Span& span) {
  const std::string& path = file.path();
  const SeekPoint& sp = *span.start;
  const std::size_t lead = sp.window.size();
  const std::uint64_t length = span.end_u - sp.uncompressed;
  std::vector<std::uint8_t> scratch;
  std::uint8_t none[1];  // where zlib may point when a kept span has no room (never written)
  if (span.keep) {
    if (lead > 0) std::memcpy(span.kept.get(), sp.window.data(), lead);  // none at a member start
  } else {
    scratch.resize(kOutputChunk);
  }
  Inflater inf(-MAX_WBITS, path);
  z_stream& z = inf.z;
  Input in(file, 0);
  std::uint64_t bit = sp.compressed_bit;
  std::uint64_t produced = 0;  // output of the span so far
  // Output of the current member before `bit`, saturated at the window size: the start's window
  // is min(32 KiB, member output) (the parallel inflate's windows do not reach across members).
  std::uint64_t member_out = lead;
  std::span<const std::uint8_t> dict = sp.window;
  std::uint32_t crc = 0;          // of the member's output in this span
  std::uint64_t crc_length = 0;
  bool first = true;
  for (;;) {
    if (bit == span.end_bit) break;
    if (bit > span.end_bit) throw SpanMismatch{};
    // Raw inflate does not stop before a stream's first block (it starts past the check that
    // Z_BLOCK stops at): its boundary is listed here.
    span.boundaries.push_back(
        {bit, sp.uncompressed + produced,
         static_cast<std::uint32_t>(std::min<std::uint64_t>(member_out, kWindowSize))});
    if (!first && inflateReset(&z) != Z_OK)
      throw Error(ErrorCode::io, path, "", "cannot reset zlib");
    first = false;
    in.reset(z, bit / 8);
    if (bit % 8) {
      std::uint8_t b = 0;
      if (file.read_at(bit / 8, std::as_writable_bytes(std::span(&b, 1))) != 1)
        throw SpanMismatch{};
      in.reset(z, bit / 8 + 1);
      const int n = static_cast<int>(8 - bit % 8);
      if (inflatePrime(&z, n, b >> (bit % 8)) != Z_OK) throw SpanMismatch{};
    }
    if (!dict.empty() &&
        inflateSetDictionary(&z, dict.data(), static_cast<uInt>(dict.size())) != Z_OK)
      throw SpanMismatch{};
    std::uint64_t last_bit = bit;
    int rc = Z_OK;
    bool reached_end = false;
    while (rc != Z_STREAM_END) {
      const bool eof = z.avail_in == 0 && !in.fill(z);
      std::uint8_t* dst;
      std::size_t room;
      if (span.keep) {
        room = static_cast<std::size_t>(std::min<std::uint64_t>(length - produced, kOutputChunk));
        dst = room ? span.kept.get() + lead + produced : none;
      } else {
        dst = scratch.data();
        room = scratch.size();
      }
      z.next_out = dst;
      z.avail_out = static_cast<uInt>(room);
      rc = inflate(&z, Z_BLOCK);
      in.sync(z);
      const std::size_t n = room - z.avail_out;
      crc = inflate_detail::crc32_update(crc, dst, n);
      crc_length += n;
      produced += n;
      member_out += n;
      if (produced > length) throw SpanMismatch{};
      if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) throw SpanMismatch{};
      bool boundary = false;
      if ((z.data_type & 128) && !(z.data_type & 64)) {
        const std::uint64_t b = in.offset() * 8 - static_cast<unsigned>(z.data_type & 7);
        if (b != last_bit) {
          boundary = true;
          last_bit = b;
          if (b == span.end_bit) {
            reached_end = true;
            break;
          }
          if (b > span.end_bit) throw SpanMismatch{};
          span.boundaries.push_back(
              {b, sp.uncompressed + produced,
               static_cast<std::uint32_t>(std::min<std::uint64_t>(member_out, kWindowSize))});
        }
      }
      // No room left and no progress: the span inflates to more than the inflate said.
      if (rc == Z_BUF_ERROR && room == 0 && !boundary) throw SpanMismatch{};
      if (eof && n == 0 && rc != Z_STREAM_END && !boundary) throw SpanMismatch{};
    }
    if (reached_end) break;
    // The member's final block ended: its last bit is the bits zlib holds before the next byte
    // (data_type: bits held, + 64 after the last block).
    const std::uint64_t end_bit = in.offset() * 8 - static_cast<unsigned>(z.data_type & 63);
    TrailerOutput trailer(span.segments, crc, crc_length);
    const std::optional<std::uint64_t> next = inflate_detail::finish_member(file, end_bit, trailer);
    crc = 0;
    crc_length = 0;
    if (!next) {
      if (span.end_bit != UINT64_MAX) throw SpanMismatch{};
      break;
    }
    bit = *next;
    member_out = 0;
    dict = {};
  }
  if (produced != length) throw SpanMismatch{};
  if (crc_length) span.segments.push_back({crc, crc_length, false, 0, 0, 0});
}

// Cuts the windows of `targets` (uncompressed offset, window length, where to put it; sorted by
// offset) out of the output of a decode that starts at `start`.
class WindowCapture {
 public:
  struct Target {
    std::uint64_t u;
    std::uint32_t length;
    std::vector<std::uint8_t>* window;
  };
  WindowCapture(const SeekPoint& start, std::span<const Target> targets)
      : history_(start.window), targets_(targets) {}

  void operator()(std::uint64_t offset, std::span<const std::byte> bytes) {
    const auto* data = reinterpret_cast<const std::uint8_t*>(bytes.data());
    const std::size_t n = bytes.size();
    for (; next_ < targets_.size() && targets_[next_].u <= offset + n; ++next_) {
      const Target& t = targets_[next_];
      const std::size_t from_data =
          static_cast<std::size_t>(std::min<std::uint64_t>(t.u - offset, t.length));
      const std::size_t from_history = t.length - from_data;
      if (from_history > history_.size()) throw SpanMismatch{};
      std::vector<std::uint8_t>& w = *t.window;
      w.assign(history_.end() - static_cast<std::ptrdiff_t>(from_history), history_.end());
      const std::uint8_t* end = data + (t.u - offset);
      w.insert(w.end(), end - from_data, end);
    }
    // The last 32 KiB: what the next targets' windows may reach back into.
    if (n >= kWindowSize) {
      history_.assign(data + n - kWindowSize, data + n);
    } else {
      const std::size_t keep = std::min(history_.size(), kWindowSize - n);
      history_.erase(history_.begin(), history_.end() - static_cast<std::ptrdiff_t>(keep));
      history_.insert(history_.end(), data, data + n);
    }
  }
  bool complete() const { return next_ == targets_.size(); }

 private:
  std::vector<std::uint8_t> history_;
  std::span<const Target> targets_;
  std::size_t next_ = 0;
};

// The parallel build; nullopt when the stream has too few points to split (then the sequential
// build is as fast). Throws SpanMismatch, or the parallel inflate's errors on bad data.
std::optional<SeekIndex> build_parallel(const core::RandomAccessInput& file, std::uint64_t spacing,
                                        std::span<const std::uint64_t> wanted,
                                        const ExactBuildOptions& opts) {
  const unsigned threads = opts.threads;
  SeekIndex fast;
  ParallelInflateOptions options;
  options.threads = threads;
  if (opts.chunk_size) options.chunk_size = opts.chunk_size;
  // Fewer than four chunks make at most three spans: the largest then takes about as long as
  // the sequential build after the parallel inflate (measured on 2 cores: a 12 MB T1 volume,
  // two spans, 0.093 s against 0.086 s sequentially).
  if (file.size() < 4 * std::uint64_t{options.chunk_size}) return std::nullopt;
  std::uint64_t total = 0;
  if (const std::optional<std::vector<Member>> members = read_member_table(file);
      members && members->size() >= 2) {
    // Members that announce their sizes ('VP', BGZF): spans start at members half a chunk or
    // more apart, found from the headers alone.
    std::uint64_t last = 0;
    for (std::size_t k = 0; k < members->size(); ++k) {
      const Member& m = (*members)[k];
      if (k == 0 || m.offset - last >= options.chunk_size / 2) {
        last = m.offset;
        fast.points.push_back(
            SeekPoint{inflate_detail::read_gzip_header(file, m.offset, k == 0) * 8,
                      m.uncompressed_offset, {}});
      }
    }
    total = members->back().uncompressed_offset + members->back().uncompressed_size;
  } else {
    // Span starts: the parallel inflate's points (block starts with their windows, at chunk
    // starts and member starts).
    options.seek_points = &fast.points;
    total = inflate_parallel(file, [](std::uint64_t, std::span<const std::byte>) {}, options);
  }
  fast.compressed_size = file.size();
  fast.uncompressed_size = total;
  const auto& fp = fast.points;
  if (fp.empty() || fp[0].uncompressed != 0) return std::nullopt;
  // Consecutive points closer than half a chunk (small members: BGZF, voxpipe's own) share a
  // span, so that a span is worth a task.
  std::vector<Span> spans;
  const std::uint64_t min_span_bits = std::uint64_t{options.chunk_size} * 4;
  for (std::size_t k = 0; k < fp.size(); ++k) {
    if (fp[k].window.size() > kWindowSize || fp[k].uncompressed > total) return std::nullopt;
    if (!spans.empty()) {
      const std::uint64_t from = spans.back().start->compressed_bit;
      if (fp[k].compressed_bit <= from || fp[k].compressed_bit - from < min_span_bits) continue;
    }
    if (!spans.empty()) {
      spans.back().end_bit = fp[k].compressed_bit;
      spans.back().end_u = fp[k].uncompressed;
    }
    Span span;
    span.start = &fp[k];
    spans.push_back(std::move(span));
  }
  if (spans.size() < 2) return std::nullopt;
  spans.back().end_u = total;
  for (const Span& s : spans)
    if (s.end_u < s.start->uncompressed) return std::nullopt;

  SeekIndex index;
  index.compressed_size = file.size();
  index.spacing = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(spacing, std::numeric_limits<std::uint32_t>::max()));
  PointPicker picker(index, spacing, wanted);
  // Spans keep their output until placed, within this budget; the windows of the others are
  // decoded again below.
  const std::uint64_t budget =
      opts.keep_budget ? opts.keep_budget
                       : std::max<std::uint64_t>(std::uint64_t{256} << 20,
                                                 std::uint64_t{48 << 20} * threads);
  std::mutex mutex;
  std::uint64_t reserved = 0;  // bytes of kept buffers, in use or free
  // Buffers of placed spans, reused by the next ones: a span's output written to fresh memory
  // costs its page faults (on the benchmark VMs about as much as zlib's inflate itself), to
  // recycled memory only the writes.
  std::vector<std::pair<std::unique_ptr<std::uint8_t[]>, std::size_t>> pool;
  std::size_t next_place = 0;  // the first span not yet placed
  // Every member's CRC32 and ISIZE, from the spans' segments in stream order (the first span
  // starts at the first member's start).
  inflate_detail::MemberChecker checker(file.path(), true);
  // Places the boundaries of the finished spans in stream order (under `mutex`).
  const auto place_ready = [&] {
    for (; next_place < spans.size() && spans[next_place].done; ++next_place) {
      Span& s = spans[next_place];
      checker.add(s.segments, at_member_start(*s.start));
      const std::size_t lead = s.start->window.size();
      for (const Boundary& b : s.boundaries) {
        if (!s.keep) {
          picker.boundary(b.bit, b.u, b.window_length, nullptr);
          continue;
        }
        const std::size_t at = lead + static_cast<std::size_t>(b.u - s.start->uncompressed);
        if (b.window_length > at) throw SpanMismatch{};
        const std::span<const std::uint8_t> window(s.kept.get() + at - b.window_length,
                                                   b.window_length);
        picker.boundary(b.bit, b.u, b.window_length, &window);
      }
      if (s.keep) pool.emplace_back(std::move(s.kept), s.kept_capacity);
      std::vector<Boundary>().swap(s.boundaries);
    }
  };
  core::parallel_for(spans.size(), threads, [&](std::size_t i) {
    Span& s = spans[i];
    const std::uint64_t need = s.start->window.size() + (s.end_u - s.start->uncompressed);
    {
      std::lock_guard lock(mutex);
      // The smallest free buffer that holds the span, else a new one (a quarter larger, for
      // the spans to come) if the budget allows, after freeing buffers too small to reuse.
      std::size_t best = pool.size();
      for (std::size_t j = 0; j < pool.size(); ++j)
        if (pool[j].second >= need && (best == pool.size() || pool[j].second < pool[best].second))
          best = j;
      if (best < pool.size()) {
        s.kept = std::move(pool[best].first);
        s.kept_capacity = pool[best].second;
        pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(best));
      } else {
        const std::uint64_t capacity = need + need / 4;
        while (reserved + capacity > budget && !pool.empty()) {
          reserved -= pool.back().second;
          pool.pop_back();
        }
        if (reserved + capacity <= budget) {
          s.kept.reset(new std::uint8_t[static_cast<std::size_t>(capacity)]);
          s.kept_capacity = static_cast<std::size_t>(capacity);
          reserved += capacity;
        }
      }
      s.keep = s.kept != nullptr;
    }
    decode_span(file, s);
    std::lock_guard lock(mutex);
    s.done = true;
    place_ready();
  });
  if (next_place != spans.size()) throw SpanMismatch{};
  picker.finish(total);

  // The windows of points placed in spans that were not kept: each span decoded again (ISA-L)
  // from its start up to its last such point.
  const std::vector<PendingWindow>& pending = picker.pending();
  if (!pending.empty()) {
    struct Job {
      const SeekPoint* start;
      std::vector<WindowCapture::Target> targets;
    };
    std::vector<Job> jobs;
    for (const PendingWindow& pw : pending) {
      SeekPoint& p = index.points[pw.point];
      // The last span that starts at or before the point.
      const auto it = std::upper_bound(spans.begin(), spans.end(), p.uncompressed,
                                       [](std::uint64_t u, const Span& s) {
                                         return u < s.start->uncompressed;
                                       });
      if (it == spans.begin()) throw SpanMismatch{};
      const SeekPoint* start = std::prev(it)->start;
      if (jobs.empty() || jobs.back().start != start) jobs.push_back(Job{start, {}});
      jobs.back().targets.push_back({p.uncompressed, pw.length, &p.window});
    }
    core::parallel_for(jobs.size(), threads, [&](std::size_t j) {
      const Job& job = jobs[j];
      WindowCapture capture(*job.start, job.targets);
      const std::uint64_t from = job.start->uncompressed;
      const std::uint64_t stop = job.targets.back().u;
      // A point at the span's start takes the start's window; nothing to decode for it.
      if (stop == from) {
        capture(from, {});
      } else {
        const Sink sink = [&](std::uint64_t offset, std::span<const std::byte> bytes) {
          capture(offset, bytes);
        };
        decode_from(file, fast, *job.start, from, stop, sink);
      }
      if (!capture.complete()) throw SpanMismatch{};
    });
  }
  if (opts.stats) {
    opts.stats->parallel = true;
    opts.stats->spans = spans.size();
    opts.stats->redecoded_windows = pending.size();
  }
  while (!index.points.empty() && index.points.back().uncompressed == total)
    index.points.pop_back();
  index.uncompressed_size = total;
  return index;
}

}  // namespace

SeekIndex build_seek_index(const core::RandomAccessInput& file, std::uint64_t spacing,
                           std::span<const std::uint64_t> wanted,
                           const ExactBuildOptions& options) {
  const std::string& path = file.path();
  if (!std::is_sorted(wanted.begin(), wanted.end()))
    throw Error(ErrorCode::invalid_argument, path, "wanted offsets", "expected ascending order");
  {
    std::uint8_t magic[2] = {0, 0};
    if (file.read_at(0, std::as_writable_bytes(std::span(magic))) != 2 || magic[0] != 0x1f ||
        magic[1] != 0x8b)
      throw Error(ErrorCode::format, path, "gzip magic",
                  "expected 1f 8b, but the file does not start with it", 0);
  }
  if (options.stats) *options.stats = {};
  if (options.threads >= 2) {
    try {
      if (std::optional<SeekIndex> index = build_parallel(file, spacing, wanted, options))
        return std::move(*index);
    } catch (const SpanMismatch&) {
      // Below: the sequential build says what is wrong, or builds the index.
    } catch (const Error& e) {
      // Bad data: the sequential build fails with its own error (the one a caller of either
      // build sees), naming the first bad byte as zlib finds it.
      if (e.code() != ErrorCode::corrupt && e.code() != ErrorCode::truncated &&
          e.code() != ErrorCode::format)
        throw;
    }
  }
  return build_sequential(file, spacing, wanted);
}

std::size_t start_point(const SeekIndex& index, std::uint64_t begin, std::uint64_t end,
                        const std::string& path) {
  const auto& pts = index.points;
  const auto by_u = [](std::uint64_t u, const SeekPoint& p) { return u < p.uncompressed; };
  // The last point at or before begin.
  std::size_t first =
      static_cast<std::size_t>(std::upper_bound(pts.begin(), pts.end(), begin, by_u) - pts.begin());
  if (first == 0)
    throw Error(ErrorCode::invalid_argument, path, "seek index",
                "expected a point at uncompressed offset 0, but the index has none");
  // Start at the member's first point rather than a point shortly before `begin`, when there
  // is one close enough: the read can then be checked if it runs to the member's end.
  for (std::size_t k = first - 1; k > 0 && !at_member_start(pts[k]); --k) {
    if (!worth_checking(begin - pts[k - 1].uncompressed, end - begin)) break;
    if (at_member_start(pts[k - 1])) first = k;
  }
  return first - 1;
}

void inflate_range(const core::RandomAccessInput& file, const SeekIndex& index, std::uint64_t begin,
                   std::uint64_t end, unsigned threads, const Sink& sink) {
  RangeChain chain;
  inflate_range(file, index, begin, end, threads, sink, chain);
}

void inflate_range(const core::RandomAccessInput& file, const SeekIndex& index, std::uint64_t begin,
                   std::uint64_t end, unsigned threads, const Sink& sink, RangeChain& chain) {
  const std::string& path = file.path();
  if (index.compressed_size != file.size())
    throw Error(ErrorCode::invalid_argument, path, "seek index",
                "expected an index for a file of " + std::to_string(file.size()) +
                    " bytes, but it is for one of " + std::to_string(index.compressed_size));
  if (begin > end || end > index.uncompressed_size)
    throw Error(ErrorCode::invalid_argument, path, "range",
                "expected 0 <= begin <= end <= " + std::to_string(index.uncompressed_size) +
                    ", but found [" + std::to_string(begin) + ", " + std::to_string(end) + ")");
  if (begin == end) return;
  const std::uint64_t chain_end = chain.end;
  chain.end = UINT64_MAX;  // until this range is through
  const auto& pts = index.points;
  const auto by_u = [](std::uint64_t u, const SeekPoint& p) { return u < p.uncompressed; };
  // The point decoding starts at, and the first point at or after end.
  std::size_t first = start_point(index, begin, end, path) + 1;
  const std::size_t last =
      static_cast<std::size_t>(std::upper_bound(pts.begin(), pts.end(), end - 1, by_u) - pts.begin());
  // Points [first - 1, last) start the spans that cover the range.
  struct Task {
    std::size_t point;
    std::uint64_t from, stop;
  };
  std::vector<Task> tasks;
  const std::size_t nspans = last - first + 1;
  if (threads <= 1 || nspans == 1) {
    tasks.push_back({first - 1, begin, end});
  } else {
    // Group consecutive spans into a few tasks of similar output size: each task then decodes
    // through the points inside it without restarting, and the pool stays busy.
    const std::uint64_t ntasks = std::min<std::uint64_t>(nspans, std::uint64_t{threads} * 4);
    const std::uint64_t target = (end - begin + ntasks - 1) / ntasks;
    std::size_t start = first - 1;
    for (std::size_t k = first; k <= last; ++k) {
      const std::uint64_t from = std::max(begin, pts[start].uncompressed);
      const std::uint64_t stop = k == last ? end : pts[k].uncompressed;
      // Points before `begin` (a start moved back to the member's first point) stay inside the
      // first task, which decodes through them.
      if (k == last || (stop > from && stop - from >= target)) {
        tasks.push_back({start, from, stop});
        start = k;
      }
    }
  }
  std::vector<std::vector<inflate_detail::Segment>> segments(tasks.size());
  core::parallel_for(tasks.size(), threads, [&](std::size_t i) {
    segments[i] = decode_from(file, index, pts[tasks[i].point], tasks[i].from, tasks[i].stop, sink);
  });
  // The tasks' runs are contiguous in the stream: chained, they check every member that the
  // read covers from its first byte to its trailer, continuing the last range's chain when this
  // one starts where it ended.
  if (!chain.checker || chain_end != pts[tasks.front().point].uncompressed)
    chain.checker.emplace(path, false);
  for (std::size_t i = 0; i < tasks.size(); ++i)
    chain.checker->add(segments[i], at_member_start(pts[tasks[i].point]));
  chain.end = end;
}

IndexKey index_key(const std::string& gz_path) {
  struct stat st {};
  if (::stat(gz_path.c_str(), &st) != 0) {
    const int err = errno;
    throw Error(err == ENOENT ? ErrorCode::not_found : ErrorCode::io, gz_path, "",
                std::string("cannot stat: ") + std::strerror(err));
  }
  core::InputFile file(gz_path);
  IndexKey key;
  key.size = file.size();
  key.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kTailBytes, key.size));
  std::vector<std::uint8_t> tail(n);
  if (file.read_at(key.size - n, std::as_writable_bytes(std::span(tail))) != n)
    throw Error(ErrorCode::io, gz_path, "", "the file shrank while being read");
  key.tail_crc = static_cast<std::uint32_t>(crc32(crc32(0L, Z_NULL, 0), tail.data(),
                                                  static_cast<uInt>(n)));
  return key;
}

IndexKey input_key(const core::RandomAccessInput& input) {
  IndexKey key;
  key.size = input.size();
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kTailBytes, key.size));
  std::vector<std::uint8_t> tail(n);
  if (input.read_at(key.size - n, std::as_writable_bytes(std::span(tail))) != n)
    throw Error(ErrorCode::io, input.path(), "", "the object ended before its size");
  key.tail_crc = static_cast<std::uint32_t>(crc32(crc32(0L, Z_NULL, 0), tail.data(),
                                                  static_cast<uInt>(n)));
  return key;
}

std::string sidecar_path(const std::string& gz_path) { return gz_path + ".gzidx"; }

std::string cache_path(const std::string& gz_path) {
  namespace fs = std::filesystem;
  std::string dir;
  if (const char* v = std::getenv("VOXPIPE_CACHE_DIR"); v && *v) {
    dir = v;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    dir = std::string(x) + "/voxpipe";
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    dir = std::string(h) + "/.cache/voxpipe";
  } else {
    throw Error(ErrorCode::invalid_argument, gz_path, "index cache",
                "expected VOXPIPE_CACHE_DIR, XDG_CACHE_HOME or HOME to be set, but none is");
  }
  // The same file reached through a symlink or "..": the same cache entry.
  std::error_code ec;
  fs::path abs = fs::weakly_canonical(fs::absolute(gz_path, ec), ec);
  if (ec) abs = fs::absolute(gz_path, ec).lexically_normal();
  const std::string key = abs.string();
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a, 64-bit
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return dir + "/" + abs.filename().string() + "-" + hex + ".gzidx";
}

std::optional<SeekIndex> find_index(const std::string& gz_path) {
  const IndexKey key = index_key(gz_path);
  std::vector<std::string> candidates{sidecar_path(gz_path)};
  try {
    candidates.push_back(cache_path(gz_path));
  } catch (const Error&) {
    // No cache directory configured: only the sidecar.
  }
  for (const std::string& p : candidates) {
    if (!core::file_size(p)) continue;
    try {
      std::optional<IndexKey> found;
      SeekIndex index = read_gzidx_file(p, &found);
      if (found && *found == key && index.compressed_size == key.size) return index;
    } catch (const Error&) {
      // Damaged or unreadable: as if absent; the caller rebuilds and overwrites it.
    }
  }
  return std::nullopt;
}

SeekIndex load_index(const std::string& gz_path, const std::string& index_path) {
  const IndexKey key = index_key(gz_path);
  std::optional<IndexKey> found;
  SeekIndex index = read_gzidx_file(index_path, &found);
  if (found ? *found != key : index.compressed_size != key.size)
    throw Error(ErrorCode::invalid_argument, index_path, "seek index",
                "stale index: " +
                    std::string(found ? "it was written for a different version of "
                                      : "its compressed size does not match ") +
                    gz_path);
  if (index.compressed_size != key.size)
    throw Error(ErrorCode::format, index_path, "compressed size",
                "expected " + std::to_string(key.size) + ", but found " +
                    std::to_string(index.compressed_size));
  return index;
}

SeekIndex load_index(const core::RandomAccessInput& input, const std::string& index_path) {
  std::optional<IndexKey> found;
  SeekIndex index = read_gzidx_file(index_path, &found);
  const IndexKey key = input_key(input);
  const bool stale = found ? (found->size != key.size || found->tail_crc != key.tail_crc)
                           : index.compressed_size != key.size;
  if (stale || index.compressed_size != key.size)
    throw Error(ErrorCode::invalid_argument, index_path, "seek index",
                "stale index: " +
                    std::string(found ? "it was written for a different version of "
                                      : "its compressed size does not match ") +
                    input.path());
  return index;
}

void save_index(const std::string& gz_path, const SeekIndex& index, bool sidecar) {
  const IndexKey key = index_key(gz_path);
  if (index.compressed_size != key.size)
    throw Error(ErrorCode::invalid_argument, gz_path, "seek index",
                "expected an index for a file of " + std::to_string(key.size) +
                    " bytes, but it is for one of " + std::to_string(index.compressed_size));
  const std::string out = sidecar ? sidecar_path(gz_path) : cache_path(gz_path);
  if (!sidecar) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(out).parent_path(), ec);
    if (ec)
      throw Error(ErrorCode::io, out, "", "cannot create the index cache directory: " +
                                              ec.message());
  }
  write_gzidx_file(out, index, key);
}

}  // namespace voxpipe::gz
