// Building a seek index by zlib inflate (Z_BLOCK reports every block boundary; ISA-L has no such
// stop), front to back, or in spans between the member starts of a file whose members announce
// their sizes; other files are built in parallel in one pass, and on one thread in one run of
// our decoder (seek_index_onepass.cpp), with the zlib build front to back as the reference and
// the reporter of bad data. The zran.c method: madler/zlib examples/zran.c, and indexed_gzip's
// zran.c.
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/thread_pool.hpp"
#include "gz/known_window.hpp"
#include "gz/members.hpp"
#include "gz/parallel_inflate.hpp"
#include "gz/seek_index.hpp"
#include "gz/seek_index_detail.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::gz {
namespace {

using index_detail::at_member_start;
using index_detail::BuildProgress;
using index_detail::decode_from;
using index_detail::kOutputChunk;
using index_detail::PendingWindow;
using index_detail::PointPicker;
using index_detail::SpanMismatch;

// The index build reads its input in pieces of this size: large enough that pread costs nothing
// next to zlib's inflate (~300 MB/s). Ranges decode through the known-window run, which reads
// its own pieces (256 KiB; known_window.cpp).
constexpr std::size_t kInputChunk = std::size_t{128} << 10;

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

// The index by one zlib inflate front to back: the reference the other builds equal, and the
// build that reports what is wrong with bad data (zlib's messages, at the byte zlib stops).
SeekIndex build_sequential(const core::RandomAccessInput& input, std::uint64_t spacing,
                           std::span<const std::uint64_t> wanted, BuildProgress& progress) {
  // Read front to back: the furthest byte read is the progress.
  std::optional<index_detail::ReadProgressInput> reporting;
  if (progress.wanted())
    reporting.emplace(input, [&](std::uint64_t furthest) { progress.at(furthest); });
  const core::RandomAccessInput& file =
      reporting ? static_cast<const core::RandomAccessInput&>(*reporting) : input;
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

// --- The parallel exact build of sized members ---------------------------------------------------

// A block boundary a span's decode saw: the block's first bit, the output before it, and the
// length of its window (min(32 KiB, output of its member before it); 0 at a member's start).
struct Boundary {
  std::uint64_t bit = 0;
  std::uint64_t u = 0;
  std::uint32_t window_length = 0;
};

// A stretch of the stream between two member starts, decoded by one task.
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
  // is min(32 KiB, member output) (none: spans start at member starts).
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

// The parallel build of a file whose members announce their sizes ('VP', BGZF: a member table):
// spans start at members half a chunk or more apart, found from the headers alone, with no pass
// over the data first. nullopt when the file has no such table or too few spans (then the
// one-pass build or the sequential one). Throws SpanMismatch, or Error on bad data.
std::optional<SeekIndex> build_from_members(const core::RandomAccessInput& file,
                                            std::uint64_t spacing,
                                            std::span<const std::uint64_t> wanted,
                                            const ExactBuildOptions& opts,
                                            BuildProgress& progress) {
  const unsigned threads = opts.threads;
  SeekIndex fast;
  const std::size_t chunk_size =
      opts.chunk_size ? opts.chunk_size : ParallelInflateOptions{}.chunk_size;
  // Fewer than four chunks make at most three spans: the largest then takes about as long as
  // the sequential build.
  if (file.size() < 4 * std::uint64_t{chunk_size}) return std::nullopt;
  const std::optional<std::vector<Member>> members = read_member_table(file);
  if (!members || members->size() < 2) return std::nullopt;
  std::uint64_t last = 0;
  for (std::size_t k = 0; k < members->size(); ++k) {
    const Member& m = (*members)[k];
    if (k == 0 || m.offset - last >= chunk_size / 2) {
      last = m.offset;
      fast.points.push_back(SeekPoint{
          inflate_detail::read_gzip_header(file, m.offset, k == 0) * 8, m.uncompressed_offset, {}});
    }
  }
  const std::uint64_t total =
      members->back().uncompressed_offset + members->back().uncompressed_size;
  fast.compressed_size = file.size();
  fast.uncompressed_size = total;
  const auto& fp = fast.points;
  if (fp.empty() || fp[0].uncompressed != 0) return std::nullopt;
  // Consecutive points closer than half a chunk (small members: BGZF, voxpipe's own) share a
  // span, so that a span is worth a task.
  std::vector<Span> spans;
  const std::uint64_t min_span_bits = std::uint64_t{chunk_size} * 4;
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
  // The progress once the spans before `s` and `s` are placed: the compressed end of `s`.
  const auto placed_progress = [&](const Span& s) {
    return s.end_bit == UINT64_MAX ? file.size() : s.end_bit / 8;
  };
  // Places the boundaries of the finished spans in stream order (under `mutex`).
  const auto place_ready = [&] {
    const std::size_t placed_before = next_place;
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
    if (next_place > placed_before) progress.at(placed_progress(spans[next_place - 1]));
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
  BuildProgress progress(options.progress, file.size());
  if (options.zlib_reference) {
    SeekIndex index = build_sequential(file, spacing, wanted, progress);
    progress.complete();
    return index;
  }
  // Over a network the fetches take CPU too (the client receiving and copying the bodies, TLS):
  // with two threads the parallel build of an object cost more than it saved, measured on
  // 2 cores against a local S3 server (bench_remote.py case 5, a 171 MB .nii.gz) when the
  // parallel build still inflated the data twice: parallel 2.4 s, sequential (zlib) 1.6 s, a
  // whole read of the object 1.1 s. With the one-pass build and the one-thread build on our
  // decoder, the same case (medians of 5, interleaved, other work on the cores): one-pass on
  // 2 threads 1.04 s, one thread 1.04 s, a whole read (get_fdata float32) 0.90 s; the one-pass
  // build saves nothing there and costs a second core and 76 MiB more peak memory. Objects keep
  // the one-thread build below three threads.
  const unsigned min_parallel_threads = file.fetches() ? 3 : 2;
  try {
    std::optional<SeekIndex> index;
    if (options.threads >= min_parallel_threads) {
      index = build_from_members(file, spacing, wanted, options, progress);
      if (!index) index = index_detail::build_one_pass(file, spacing, wanted, options, progress);
    }
    if (!index) index = index_detail::build_in_order(file, spacing, wanted, options, progress);
    progress.complete();
    return std::move(*index);
  } catch (const SpanMismatch&) {
    // Below: zlib's build says what is wrong, or builds the index.
  } catch (const Error& e) {
    // Bad data: zlib's build fails with its own error (the one a caller sees whichever build
    // ran), naming the first bad byte as zlib finds it. An error from the progress callback
    // stops the build.
    if (progress.threw() || (e.code() != ErrorCode::corrupt && e.code() != ErrorCode::truncated &&
                             e.code() != ErrorCode::format))
      throw;
  }
  if (options.stats) options.stats->zlib_fallback = true;
  SeekIndex index = build_sequential(file, spacing, wanted, progress);
  progress.complete();
  return index;
}

}  // namespace voxpipe::gz
