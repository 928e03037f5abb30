#include "gz/parallel_inflate.hpp"

#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "core/thread_pool.hpp"
#include "gz/block_finder.hpp"
#include "gz/deflate_decoder.hpp"
#include "gz/known_window.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::gz {

namespace {

using inflate_detail::RunEnd;
using inflate_detail::RunOutput;
using inflate_detail::Segment;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Block starts are searched for only in the first MiB of a chunk: real blocks are far shorter
// (gzip -6 writes ~16-64 KiB), and a stream without findable starts (one giant block) would
// otherwise cost a full bit-by-bit scan of every chunk.
constexpr std::uint64_t kMaxSearch = std::uint64_t{1} << 20;
// Bytes after the searched range given to the finder's trial decode (64 KiB of output).
constexpr std::uint64_t kTrialMargin = std::uint64_t{128} << 10;

// A member boundary inside a chunk's output (offsets relative to the chunk's first byte).
struct Event {
  std::uint64_t offset = 0;
  bool member_end = false;  // else: member start
  std::uint32_t crc = 0;
  std::uint32_t isize = 0;
  std::uint64_t trailer_byte = 0;
  std::uint64_t bit = 0;  // member start: first block
};

struct Piece {
  std::unique_ptr<std::uint8_t[]> data;
  std::size_t used = 0;
};

// What a speculative decode of one chunk produced.
struct ChunkResult {
  bool ok = false;
  BlockCandidate start;
  // First output, with markers for the unknown window: marked_buffer[32768, 32768 + marked).
  std::unique_ptr<std::uint16_t[]> marked_buffer;
  std::size_t marked = 0;
  const std::uint16_t* marked_data() const { return marked_buffer.get() + 32768; }
  std::vector<Piece> pieces;          // the rest, plain bytes
  std::size_t piece_size = 0;
  std::uint64_t plain = 0;
  std::vector<Event> events;
  RunEnd end;
  std::uint64_t total() const { return marked + plain; }
  // With ParallelInflateOptions::stats: the speculative decode's time, and its marker phase's.
  double seconds = 0;
  double marker_seconds = 0;
};

// Thrown when a speculative chunk outgrows its cap.
struct Abandon {};
// Thrown once every byte < stop_after was delivered and the stream is seen to go on past it.
struct Stop {};

class BufferOutput final : public RunOutput {
 public:
  BufferOutput(ChunkResult& r, std::uint64_t cap, const std::atomic<bool>& cancel)
      : r_(r), cap_(cap), cancel_(cancel) {}
  std::span<std::uint8_t> space() override {
    if (r_.pieces.empty() || r_.pieces.back().used == r_.piece_size)
      r_.pieces.push_back(Piece{std::unique_ptr<std::uint8_t[]>(new std::uint8_t[r_.piece_size]), 0});
    Piece& p = r_.pieces.back();
    return {p.data.get() + p.used, r_.piece_size - p.used};
  }
  void commit(std::size_t n) override {
    r_.pieces.back().used += n;
    r_.plain += n;
    if (r_.total() > cap_ || cancel_.load(std::memory_order_relaxed)) throw Abandon{};
  }
  void member_end(std::uint32_t crc, std::uint32_t isize, std::uint64_t trailer_byte) override {
    r_.events.push_back(Event{r_.total(), true, crc, isize, trailer_byte, 0});
  }
  void member_start(std::uint64_t bit) override {
    r_.events.push_back(Event{r_.total(), false, 0, 0, 0, bit});
  }

 private:
  ChunkResult& r_;
  std::uint64_t cap_;
  const std::atomic<bool>& cancel_;
};

// Splits delivered bytes into segments at member ends and computes their CRC32s.
class SegmentTracker {
 public:
  SegmentTracker(const std::vector<Event>& events, std::vector<Segment>& segments)
      : events_(events), segments_(segments) {}
  void feed(const std::uint8_t* p, std::size_t n) {
    apply();
    while (n > 0) {
      const std::uint64_t room = next_ < events_.size() ? events_[next_].offset - pos_ : n;
      const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(n, room));
      crc_ = inflate_detail::crc32_update(crc_, p, take);
      length_ += take;
      pos_ += take;
      p += take;
      n -= take;
      apply();
    }
  }
  void finish() {
    apply();
    if (length_) segments_.push_back(Segment{crc_, length_, false, 0, 0, 0});
  }

 private:
  void apply() {
    for (; next_ < events_.size() && events_[next_].offset == pos_; ++next_) {
      const Event& e = events_[next_];
      if (!e.member_end) continue;
      segments_.push_back(Segment{crc_, length_, true, e.crc, e.isize, e.trailer_byte});
      crc_ = 0;
      length_ = 0;
    }
  }
  const std::vector<Event>& events_;
  std::vector<Segment>& segments_;
  std::size_t next_ = 0;
  std::uint64_t pos_ = 0;
  std::uint32_t crc_ = 0;
  std::uint64_t length_ = 0;
};

struct Unit {
  std::vector<Segment> segments;
};

class Engine {
 public:
  Engine(const core::RandomAccessInput& file, const Sink& sink, const ParallelInflateOptions& o);
  std::uint64_t run();

 private:
  enum Status { kUnclaimed, kInProgress, kDone, kTaken };
  struct Slot {
    std::mutex find_mutex;
    bool searched = false;
    std::optional<BlockCandidate> candidate;
    Status status = kUnclaimed;
    std::unique_ptr<ChunkResult> result;
  };
  struct Job {
    std::unique_ptr<ChunkResult> result;
    std::vector<std::uint8_t> window;
    std::uint64_t offset = 0;
    Unit* unit = nullptr;
  };
  class DirectOutput;

  std::optional<BlockCandidate> start_of(std::size_t c);
  void worker();
  void resolve();
  void accept(std::unique_ptr<ChunkResult> r);
  void sequential();
  void advance(RunEnd end);
  std::unique_ptr<ChunkResult> speculate(std::size_t c);
  void finalize(Job& job);
  std::vector<std::uint8_t> tail_of(const ChunkResult& r, const std::vector<std::uint8_t>& prev);
  std::uint8_t resolve_marker(std::uint16_t v, const std::vector<std::uint8_t>& prev) const;
  void add_point(std::uint64_t bit, std::uint64_t offset, const std::vector<std::uint8_t>& w);
  void verify() const;
  Unit* new_unit();

  const core::RandomAccessInput& file_;
  const Sink& sink_;
  ParallelInflateOptions opts_;
  inflate_detail::TargetFn target_;
  unsigned threads_;
  std::size_t chunk_;
  std::size_t n_;
  std::size_t ahead_;
  std::uint64_t cap_;
  std::size_t piece_size_;
  std::unique_ptr<Slot[]> slots_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool resolver_active_ = false;
  bool finished_ = false;
  bool stopped_ = false;
  bool failed_ = false;
  // Set with finished_ or failed_: speculation in progress stops at its next block or piece.
  std::atomic<bool> cancel_{false};
  std::exception_ptr error_;
  std::deque<Job> jobs_;
  std::deque<std::unique_ptr<Unit>> units_;
  std::vector<SeekPoint> points_;
  // Under mu_; copied to opts_.stats at the end. timed_: opts_.stats is set.
  bool timed_ = false;
  ParallelInflateStats stats_;

  // The frontier: everything before it is accepted; only the resolver touches it.
  std::size_t f_chunk_ = 0;
  std::uint64_t f_bit_ = 0;
  std::uint64_t f_offset_ = 0;
  std::vector<std::uint8_t> f_window_;
};

// Output at a known offset: straight to the sink, CRC32 on the way.
class Engine::DirectOutput final : public RunOutput {
 public:
  DirectOutput(Engine& e, Unit& unit) : e_(e), unit_(unit), offset_(e.f_offset_), tail_(e.f_window_) {
    buffer_.reset(new std::uint8_t[kBuffer]);
  }
  // Once stop_after is reached, a little room only: enough to see whether the member ends here
  // (then its trailer is checked) or goes on (then the run stops).
  std::span<std::uint8_t> space() override {
    return {buffer_.get(), offset_ >= e_.opts_.stop_after ? kPeek : kBuffer};
  }
  void commit(std::size_t n) override { write({buffer_.get(), n}); }
  void write(std::span<const std::uint8_t> b) override {
    if (b.empty()) return;
    if (offset_ + b.size() > e_.opts_.max_output)
      throw Error(ErrorCode::limit, e_.file_.path(), "decompressed size",
                  "expected at most " + std::to_string(e_.opts_.max_output) +
                      " bytes, but the data inflates to more");
    e_.sink_(offset_, std::as_bytes(b));
    crc_ = inflate_detail::crc32_update(crc_, b.data(), b.size());
    length_ += b.size();
    offset_ += b.size();
    if (b.size() >= 32768) {
      tail_.assign(b.end() - 32768, b.end());
    } else {
      const std::size_t keep = std::min(tail_.size(), 32768 - b.size());
      tail_.erase(tail_.begin(), tail_.end() - keep);
      tail_.insert(tail_.end(), b.begin(), b.end());
    }
    // Not at == stop_after: a read that ends where its member ends runs on to the trailer.
    if (offset_ > e_.opts_.stop_after) throw Stop{};
  }
  void member_end(std::uint32_t crc, std::uint32_t isize, std::uint64_t trailer_byte) override {
    unit_.segments.push_back(Segment{crc_, length_, true, crc, isize, trailer_byte});
    crc_ = 0;
    length_ = 0;
  }
  void member_start(std::uint64_t bit) override {
    // Not at == stop_after either: an empty member there is reached by the read, and checked.
    tail_.clear();
    e_.add_point(bit, offset_, tail_);
  }
  void finish() {
    if (length_) unit_.segments.push_back(Segment{crc_, length_, false, 0, 0, 0});
    length_ = 0;
  }
  std::uint64_t offset() const { return offset_; }
  std::vector<std::uint8_t>& tail() { return tail_; }

 private:
  static constexpr std::size_t kBuffer = std::size_t{1} << 20;
  static constexpr std::size_t kPeek = 4096;
  Engine& e_;
  Unit& unit_;
  std::uint64_t offset_;
  std::vector<std::uint8_t> tail_;
  std::unique_ptr<std::uint8_t[]> buffer_;
  std::uint32_t crc_ = 0;
  std::uint64_t length_ = 0;
};

Engine::Engine(const core::RandomAccessInput& file, const Sink& sink, const ParallelInflateOptions& o)
    : file_(file), sink_(sink), opts_(o) {
  threads_ = std::max(o.threads, 1u);
  chunk_ = std::max<std::size_t>(o.chunk_size, 4096);
  n_ = static_cast<std::size_t>(std::max<std::uint64_t>(1, (file.size() + chunk_ - 1) / chunk_));
  // One thread: nothing to speculate on; chunk starts are still searched when seek points at
  // chunk starts are wanted.
  if (threads_ <= 1 && !o.seek_points) n_ = 1;
  // Two chunks of lead per speculating thread (all but the resolver's): a speculative chunk
  // costs 1.6-1.9x a known-window one (its marker phase), so by the time it is done the resolver
  // has moved about two chunks. More lead only holds finished chunks longer: at 2 threads,
  // 4 chunks ahead instead of 2 raised a 4D read's peak by 13-44 MiB (bold_4d.nii.gz gzip -6:
  // 91 against 47 MiB) for no speed on gzip -6 and 5% on nibabel's level-1 files.
  ahead_ = threads_ <= 1 ? 0 : 2 * std::size_t{threads_ - 1};
  // A read of the first bytes only (a NIfTI header) is over before any speculation would pay.
  if (o.stop_after <= chunk_) ahead_ = 0;
  // 16x: fMRI and anatomy inflate 2-4x, so only masks and other near-constant data reach the
  // cap; for those the sequential path (ISA-L at GB/s on such data) is the better use anyway.
  cap_ = std::max<std::uint64_t>(16 * std::uint64_t{chunk_}, std::uint64_t{1} << 20);
  piece_size_ = std::min<std::size_t>(std::size_t{1} << 20, std::max<std::size_t>(chunk_, 65536));
  slots_.reset(new Slot[n_]);
  timed_ = o.stats != nullptr;
  target_ = [this](std::size_t c) { return start_of(c); };
}

std::optional<BlockCandidate> Engine::start_of(std::size_t c) {
  Slot& s = slots_[c];
  std::lock_guard lock(s.find_mutex);
  if (s.searched) return s.candidate;
  s.searched = true;
  const std::uint64_t from = std::uint64_t{c} * chunk_;
  const std::uint64_t search = std::min<std::uint64_t>(chunk_, kMaxSearch);
  const std::uint64_t end = std::min(file_.size(), from + search + kTrialMargin);
  if (from >= end) return std::nullopt;
  std::vector<std::uint8_t> data(static_cast<std::size_t>(end - from));
  data.resize(file_.read_at(from, std::as_writable_bytes(std::span(data))));
  s.candidate = find_block_start(data, from, from * 8, (from + search) * 8);
  return s.candidate;
}

Unit* Engine::new_unit() {
  std::lock_guard lock(mu_);
  units_.push_back(std::make_unique<Unit>());
  return units_.back().get();
}

void Engine::add_point(std::uint64_t bit, std::uint64_t offset, const std::vector<std::uint8_t>& w) {
  if (!opts_.seek_points) return;
  std::lock_guard lock(mu_);
  points_.push_back(SeekPoint{bit, offset, w});
}

std::uint64_t Engine::run() {
  f_bit_ = inflate_detail::read_gzip_header(file_, 0, true) * 8;
  core::parallel_for(threads_, threads_, [this](std::size_t) { worker(); });
  if (error_) std::rethrow_exception(error_);
  verify();
  if (opts_.seek_points) {
    std::sort(points_.begin(), points_.end(), [](const SeekPoint& a, const SeekPoint& b) {
      return a.uncompressed != b.uncompressed ? a.uncompressed < b.uncompressed
                                              : a.compressed_bit < b.compressed_bit;
    });
    points_.erase(std::unique(points_.begin(), points_.end(),
                              [](const SeekPoint& a, const SeekPoint& b) {
                                return a.uncompressed == b.uncompressed &&
                                       a.compressed_bit == b.compressed_bit;
                              }),
                  points_.end());
    *opts_.seek_points = std::move(points_);
  }
  if (opts_.stats) *opts_.stats = stats_;
  return f_offset_;
}

void Engine::worker() {
  try {
    std::unique_lock lock(mu_);
    for (;;) {
      if (failed_) return;
      const bool frontier_ready =
          !finished_ && f_chunk_ < n_ &&
          (slots_[f_chunk_].status == kUnclaimed || slots_[f_chunk_].status == kDone);
      if (!resolver_active_ && frontier_ready) {
        resolver_active_ = true;
        lock.unlock();
        resolve();
        lock.lock();
        resolver_active_ = false;
        cv_.notify_all();
        continue;
      }
      if (!jobs_.empty()) {
        Job job = std::move(jobs_.front());
        jobs_.pop_front();
        lock.unlock();
        const Clock::time_point t0 = timed_ ? Clock::now() : Clock::time_point{};
        finalize(job);
        job.result.reset();
        const double seconds = timed_ ? seconds_since(t0) : 0;
        lock.lock();
        stats_.finalize_seconds += seconds;
        cv_.notify_all();
        continue;
      }
      if (finished_) return;
      // Speculate on the furthest free chunk of the window: the resolver decodes the chunks at
      // the frontier itself, with a known window (ISA-L), which is faster than marker decoding,
      // so speculation pays only where the resolver will not arrive soon.
      std::size_t c = std::min(n_ - 1, f_chunk_ + ahead_);
      while (c > f_chunk_ && slots_[c].status != kUnclaimed) --c;
      if (c > f_chunk_) {
        slots_[c].status = kInProgress;
        lock.unlock();
        const Clock::time_point t0 = timed_ ? Clock::now() : Clock::time_point{};
        std::unique_ptr<ChunkResult> r = speculate(c);
        if (timed_) r->seconds = seconds_since(t0);
        lock.lock();
        ++stats_.speculated_chunks;
        stats_.speculated_seconds += r->seconds;
        slots_[c].status = kDone;
        // A chunk the frontier has already passed is of no use.
        if (c >= f_chunk_) slots_[c].result = std::move(r);
        cv_.notify_all();
        continue;
      }
      cv_.wait(lock);
    }
  } catch (...) {
    std::lock_guard lock(mu_);
    failed_ = true;
    cancel_ = true;
    if (!error_) error_ = std::current_exception();
    cv_.notify_all();
  }
}

void Engine::resolve() {
  for (;;) {
    std::unique_lock lock(mu_);
    if (failed_ || finished_) return;
    if (f_chunk_ >= n_) {
      finished_ = true;
      cancel_ = true;
      return;
    }
    Slot& s = slots_[f_chunk_];
    if (s.status == kInProgress || s.status == kTaken) return;
    if (s.status == kDone && s.result && s.result->ok && s.result->start.first_bit <= f_bit_ &&
        f_bit_ <= s.result->start.last_bit) {
      std::unique_ptr<ChunkResult> r = std::move(s.result);
      lock.unlock();
      accept(std::move(r));
      continue;
    }
    s.status = kTaken;
    s.result.reset();
    lock.unlock();
    sequential();
  }
}

void Engine::advance(RunEnd end) {
  std::lock_guard lock(mu_);
  for (std::size_t c = f_chunk_; c < std::min(end.chunk, n_); ++c) slots_[c].result.reset();
  f_chunk_ = end.chunk;
  f_bit_ = end.bit;
  if (f_chunk_ >= n_) {
    finished_ = true;
  } else if (f_offset_ > opts_.stop_after) {
    // At == stop_after the next chunk may still end the member: its trailer gets checked.
    finished_ = stopped_ = true;
  }
  if (finished_) cancel_ = true;
  cv_.notify_all();
}

void Engine::sequential() {
  Unit* unit = new_unit();
  add_point(f_bit_, f_offset_, f_window_);
  DirectOutput out(*this, *unit);
  const Clock::time_point t0 = timed_ ? Clock::now() : Clock::time_point{};
  auto count = [&](std::size_t end_chunk) {
    if (!timed_) return;
    const double seconds = seconds_since(t0);
    std::lock_guard lock(mu_);
    ++stats_.known_runs;
    stats_.known_chunks += std::max<std::size_t>(1, std::min(end_chunk, n_) - f_chunk_);
    stats_.known_bytes += out.offset() - f_offset_;
    stats_.known_seconds += seconds;
  };
  RunEnd end;
  try {
    end = inflate_detail::run_known_window(file_, f_bit_, f_window_, f_chunk_ + 1, n_, target_, out);
  } catch (const Stop&) {
    out.finish();
    count(f_chunk_ + 1);
    f_offset_ = out.offset();
    std::lock_guard lock(mu_);
    stopped_ = finished_ = true;
    cancel_ = true;
    cv_.notify_all();
    return;
  }
  out.finish();
  count(end.chunk);
  f_offset_ = out.offset();
  f_window_ = std::move(out.tail());
  advance(end);
}

std::uint8_t Engine::resolve_marker(std::uint16_t v, const std::vector<std::uint8_t>& prev) const {
  if (v < 256) return static_cast<std::uint8_t>(v);
  const std::size_t index = v - kMarkerBase;  // in the 32 KiB before the chunk
  const std::size_t missing = 32768 - prev.size();
  if (index < missing)
    throw Error(ErrorCode::corrupt, file_.path(), "deflate data",
                "invalid distance too far back (before the start of the member)");
  return prev[index - missing];
}

std::vector<std::uint8_t> Engine::tail_of(const ChunkResult& r, const std::vector<std::uint8_t>& prev) {
  const std::uint64_t total = r.total();
  std::uint64_t since = prev.size() + total;  // bytes of this member available
  for (const Event& e : r.events)
    if (!e.member_end) since = total - e.offset;
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(32768, since));
  std::vector<std::uint8_t> w(n);
  const std::int64_t first = static_cast<std::int64_t>(total) - static_cast<std::int64_t>(n);
  for (std::size_t k = 0; k < n; ++k) {
    const std::int64_t i = first + static_cast<std::int64_t>(k);
    if (i < 0) {
      w[k] = prev[prev.size() + i];
    } else if (static_cast<std::uint64_t>(i) < r.marked) {
      w[k] = resolve_marker(r.marked_data()[i], prev);
    } else {
      const std::uint64_t j = i - r.marked;
      w[k] = r.pieces[j / r.piece_size].data[j % r.piece_size];
    }
  }
  return w;
}

void Engine::accept(std::unique_ptr<ChunkResult> r) {
  Unit* unit = new_unit();
  add_point(f_bit_, f_offset_, f_window_);
  std::vector<std::uint8_t> next = tail_of(*r, f_window_);
  for (const Event& e : r->events)
    if (!e.member_end) add_point(e.bit, f_offset_ + e.offset, {});
  const std::uint64_t total = r->total();
  if (f_offset_ + total > opts_.max_output)
    throw Error(ErrorCode::limit, file_.path(), "decompressed size",
                "expected at most " + std::to_string(opts_.max_output) +
                    " bytes, but the data inflates to more");
  const RunEnd end = r->end;
  {
    std::lock_guard lock(mu_);
    ++stats_.speculative_chunks;
    stats_.speculative_bytes += total;
    stats_.marker_bytes += r->marked;
    stats_.marker_seconds += r->marker_seconds;
    stats_.speculate_seconds += r->seconds;
    jobs_.push_back(Job{std::move(r), f_window_, f_offset_, unit});
  }
  f_offset_ += total;
  f_window_ = std::move(next);
  advance(end);
}

void Engine::finalize(Job& job) {
  const ChunkResult& r = *job.result;
  SegmentTracker tracker(r.events, job.unit->segments);
  std::uint64_t offset = job.offset;
  auto deliver = [&](const std::uint8_t* p, std::size_t n) {
    if (n == 0) return;
    sink_(offset, std::as_bytes(std::span(p, n)));
    tracker.feed(p, n);
    offset += n;
  };
  if (r.marked) {
    // Markers through a table of the window: no branch on the window's length per byte. A
    // window shorter than 32 KiB (a member started less than 32 KiB before) leaves entries
    // that no valid stream refers to; any marker for them is an error.
    const std::size_t missing = 32768 - job.window.size();
    std::vector<std::uint8_t> table(32768, 0);
    std::copy(job.window.begin(), job.window.end(), table.begin() + static_cast<std::ptrdiff_t>(missing));
    std::vector<std::uint8_t> bytes(std::min<std::size_t>(r.marked, 1 << 16));
    for (std::size_t at = 0; at < r.marked; at += bytes.size()) {
      const std::size_t n = std::min(bytes.size(), r.marked - at);
      const std::uint16_t* m = r.marked_data() + at;
      unsigned low = 0xffff;
      // Narrow 64 symbols at a time (vectorised); only groups holding a marker are revisited.
      for (std::size_t g = 0; g < n; g += 64) {
        const std::size_t e = std::min(n, g + 64);
        unsigned high = 0;
        for (std::size_t i = g; i < e; ++i) {
          bytes[i] = static_cast<std::uint8_t>(m[i]);
          high |= m[i];
        }
        if (high < 256) continue;
        for (std::size_t i = g; i < e; ++i) {
          if (m[i] < 256) continue;
          bytes[i] = table[m[i] & 0x7fff];
          low = std::min<unsigned>(low, m[i] & 0x7fff);
        }
      }
      if (low < missing) resolve_marker(static_cast<std::uint16_t>(kMarkerBase + low), job.window);
      deliver(bytes.data(), n);
    }
  }
  for (const Piece& p : r.pieces) deliver(p.data.get(), p.used);
  tracker.finish();
}

std::unique_ptr<ChunkResult> Engine::speculate(std::size_t c) {
  auto r = std::make_unique<ChunkResult>();
  r->piece_size = piece_size_;
  const std::optional<BlockCandidate> cand = start_of(c);
  if (!cand) return r;
  r->start = *cand;
  const Clock::time_point t0 = timed_ ? Clock::now() : Clock::time_point{};
  try {
    BitReader reader(
        [this](std::uint64_t offset, std::span<std::uint8_t> dst) {
          return file_.read_at(offset, std::as_writable_bytes(dst));
        },
        file_.size());
    DeflateDecoder<std::uint16_t> dec(reader);
    const std::size_t limit = 32768 + static_cast<std::size_t>(cap_ / 2);
    dec.reserve_output(limit + 512);
    dec.start_with_markers(cand->last_bit);
    std::size_t j = c + 1;
    auto take_marked = [&] {
      r->marked = dec.size() - 32768;
      r->marked_buffer = dec.take_buffer();
      if (timed_) r->marker_seconds = seconds_since(t0);
    };
    for (;;) {
      const DecodeStatus s = dec.decode(limit);
      if (s != DecodeStatus::block_end || reader.overrun()) return std::make_unique<ChunkResult>();
      const std::uint64_t at = reader.position();
      BufferOutput out(*r, cap_, cancel_);
      if (cancel_.load(std::memory_order_relaxed)) return std::make_unique<ChunkResult>();
      if (dec.block_final()) {
        take_marked();
        const std::optional<std::uint64_t> next = inflate_detail::finish_member(file_, at, out);
        if (!next) {
          r->end = RunEnd{n_, file_.size() * 8};
        } else if (inflate_detail::lands_on(target_, j, n_, *next)) {
          r->end = RunEnd{j, *next};
        } else {
          r->end = inflate_detail::run_known_window(file_, *next, {}, j, n_, target_, out);
        }
        break;
      }
      if (inflate_detail::lands_on(target_, j, n_, at)) {
        take_marked();
        r->end = RunEnd{j, at};
        break;
      }
      if (!dec.window_has_markers()) {
        std::vector<std::uint8_t> window(32768);
        const std::uint16_t* src = dec.data() + dec.size() - 32768;
        for (std::size_t i = 0; i < 32768; ++i) window[i] = static_cast<std::uint8_t>(src[i]);
        take_marked();
        r->end = inflate_detail::run_known_window(file_, at, window, j, n_, target_, out);
        break;
      }
    }
  } catch (const Error&) {
    return std::make_unique<ChunkResult>();
  } catch (const Abandon&) {
    return std::make_unique<ChunkResult>();
  }
  r->ok = true;
  return r;
}

void Engine::verify() const {
  // Units are in stream order from the file's first byte. After a stop, the last member may be
  // unfinished: it has no member_end and is left unchecked.
  inflate_detail::MemberChecker checker(file_.path(), true);
  for (const auto& unit : units_) checker.add(unit->segments, false);
}

}  // namespace

std::uint64_t inflate_parallel(const core::RandomAccessInput& file, const Sink& sink,
                               const ParallelInflateOptions& options) {
  Engine engine(file, sink, options);
  return engine.run();
}

}  // namespace voxpipe::gz
