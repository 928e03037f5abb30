#include "gz/parallel_inflate.hpp"

#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "gz/block_finder.hpp"
#include "gz/deflate_decoder.hpp"
#include "gz/known_window.hpp"
#include "gz/speculation.hpp"
#include "voxpipe/buffer_pool.hpp"
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

// A member boundary inside a chunk's output (offsets relative to the chunk's first byte).
struct Event {
  std::uint64_t offset = 0;
  bool member_end = false;  // else: member start
  std::uint32_t crc = 0;
  std::uint32_t isize = 0;
  std::uint64_t trailer_byte = 0;
  std::uint64_t bit = 0;  // member start: first block
};

// Objects of one kind handed out to many threads and taken back for the next user, within one
// inflate. Memory the kernel gives a process is zeroed on first touch, page by page: in a
// 2-thread read of bold_4d.nii.gz (171 MB, gzip -6) to float32, 26.6% of all cycles were the
// kernel clearing pages, the output array's (unavoidable) and those of the buffers every
// speculative chunk allocated afresh (its 128 MB marker buffer, a fresh mapping each time, and
// its 1 MiB pieces). Recycled buffers cost only their writes. At most `keep` idle objects are
// kept (set_keep lowers it as the work left shrinks), and none that `retain` refuses; the rest
// are freed.
template <class T>
class Recycler {
 public:
  struct Return {
    Recycler* owner = nullptr;
    void operator()(T* p) const { owner->put(p); }
  };
  // Goes back to its recycler when dropped; the recycler must outlive it.
  using Lease = std::unique_ptr<T, Return>;

  Recycler(std::size_t keep, std::function<std::unique_ptr<T>()> make,
           std::function<bool(T&)> retain = {})
      : keep_(keep), make_(std::move(make)), retain_(std::move(retain)) {}
  Lease get() {
    {
      std::lock_guard lock(mu_);
      if (!idle_.empty()) {
        T* p = idle_.back().release();
        idle_.pop_back();
        ++reused_;
        return Lease(p, Return{this});
      }
      ++made_;
    }
    return Lease(make_().release(), Return{this});
  }
  // Objects made afresh, and handed out again, so far.
  std::uint64_t made() {
    std::lock_guard lock(mu_);
    return made_;
  }
  std::uint64_t reused() {
    std::lock_guard lock(mu_);
    return reused_;
  }
  void set_keep(std::size_t keep) {
    std::vector<std::unique_ptr<T>> excess;  // freed after the lock is released
    std::lock_guard lock(mu_);
    keep_ = keep;
    while (idle_.size() > keep_) {
      excess.push_back(std::move(idle_.back()));
      idle_.pop_back();
    }
  }

 private:
  void put(T* p) {
    std::unique_ptr<T> owned(p);  // freed after the lock is released, unless kept
    if (retain_ && !retain_(*p)) return;
    std::lock_guard lock(mu_);
    if (idle_.size() < keep_) idle_.push_back(std::move(owned));
  }
  std::mutex mu_;
  std::vector<std::unique_ptr<T>> idle_;
  std::uint64_t made_ = 0;
  std::uint64_t reused_ = 0;
  std::size_t keep_;
  std::function<std::unique_ptr<T>()> make_;
  std::function<bool(T&)> retain_;
};

// Mapped, not from the heap: a mapping is given back to the kernel when it is freed, where
// malloc keeps freed 1 MiB blocks of its arenas resident. A 2-thread read of bold_4d.nii.gz to
// float32 peaked 37 MiB (median; 51 max) over its output with heap pieces, 20 (31) mapped,
// 27 (38) before the pools.
class Bytes {
 public:
  explicit Bytes(std::size_t n) : block_(map_buffer(n)) {}
  ~Bytes() { unmap_buffer(block_); }
  Bytes(const Bytes&) = delete;
  Bytes& operator=(const Bytes&) = delete;
  std::uint8_t* data() const { return reinterpret_cast<std::uint8_t*>(block_.data); }

 private:
  BufferPool::Block block_;
};
using BytesLease = Recycler<Bytes>::Lease;

// A speculative decoder with its reader: kept whole between chunks, its output buffer (window
// and marker-mode output) stays mapped and is written again by the next chunk.
struct MarkerDecoder {
  MarkerDecoder(ByteFetch fetch, std::uint64_t stream_size)
      : reader(std::move(fetch), stream_size), dec(reader) {}
  // The chunk's marker phase is over and wrote dec.size() elements: pages that earlier chunks
  // touched beyond them (more than `slack` bytes) go back to the kernel, so that a chunk waiting
  // for its window holds what it uses, not the most any chunk used (level-1 fMRI chunks use
  // 4-29 MB of 16-bit symbols, one after the other in any order). The buffer's content past
  // size() is never read before it is written again. Returns the bytes given back.
  std::size_t trim(std::size_t slack) {
    const std::size_t used = dec.size();
    static const std::size_t page = [] {
      const long p = sysconf(_SC_PAGESIZE);
      return p > 0 ? static_cast<std::size_t>(p) : std::size_t{4096};
    }();
    const auto from = reinterpret_cast<std::uintptr_t>(dec.data() + used);
    const auto to = reinterpret_cast<std::uintptr_t>(dec.data() + touched);
    if (touched > used && to - from > slack) {
      const std::uintptr_t first = (from + page - 1) / page * page, last = to / page * page;
      touched = used;
      // Advice only: where it fails the pages stay, as they would in the pool.
      if (last > first && madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) == 0)
        return last - first;
      return 0;
    }
    touched = std::max(touched, used);
    return 0;
  }
  BitReader reader;
  DeflateDecoder<std::uint16_t> dec;
  std::size_t touched = 0;  // elements of dec's buffer written (and not trimmed) so far
};

struct Piece {
  BytesLease bytes;
  std::size_t used = 0;
  std::uint8_t* data() const { return bytes->data(); }
};

// What a speculative decode of one chunk produced.
struct ChunkResult {
  bool ok = false;
  BlockCandidate start;
  // First output, with markers for the unknown window: the decoder's buffer holds 32768
  // markers, then these `marked` symbols.
  Recycler<MarkerDecoder>::Lease marker;
  std::size_t marked = 0;
  const std::uint16_t* marked_data() const { return marker->dec.data() + 32768; }
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
  BufferOutput(ChunkResult& r, Recycler<Bytes>& pieces, std::uint64_t cap,
               const std::atomic<bool>& cancel)
      : r_(r), pieces_(pieces), cap_(cap), cancel_(cancel) {}
  std::span<std::uint8_t> space() override {
    if (r_.pieces.empty() || r_.pieces.back().used == r_.piece_size)
      r_.pieces.push_back(Piece{pieces_.get(), 0});
    Piece& p = r_.pieces.back();
    return {p.data() + p.used, r_.piece_size - p.used};
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
  Recycler<Bytes>& pieces_;
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

// A worker thread's own state: none (decoders come from the engine's pools).
struct NoState {};

class Engine final : inflate_detail::ChunkSchedule<Engine, ChunkResult, NoState> {
 public:
  Engine(const core::RandomAccessInput& file, const Sink& sink, const ParallelInflateOptions& o);
  // The chunks left in the schedule's slots (after an error or a stop) hold leases from the
  // pools below, and the schedule's members outlive ours: they go first.
  ~Engine() { slots_.reset(); }
  std::uint64_t run();

 private:
  friend class inflate_detail::ChunkSchedule<Engine, ChunkResult, NoState>;
  struct Job {
    std::unique_ptr<ChunkResult> result;
    std::vector<std::uint8_t> window;
    std::uint64_t offset = 0;
    Unit* unit = nullptr;
  };
  class DirectOutput;

  // The schedule's hooks (speculation.hpp).
  std::unique_ptr<NoState> worker_state() { return std::make_unique<NoState>(); }
  std::unique_ptr<ChunkResult> speculate(NoState&, std::size_t c);
  void accept(std::unique_ptr<ChunkResult> r);
  void decode_at_frontier(NoState&);
  void discard(std::unique_ptr<ChunkResult>& r) { r.reset(); }
  void speculated(const ChunkResult& r);
  bool side_work(std::unique_lock<std::mutex>& lock);
  bool frontier_moved() const { return f_offset_ > opts_.stop_after; }
  void after_advance() { set_pool_limits(); }

  std::optional<BlockCandidate> start_of(std::size_t c);
  void set_pool_limits();
  std::unique_ptr<ChunkResult> speculate_chunk(std::size_t c);
  void finalize(Job& job);
  std::vector<std::uint8_t> tail_of(const ChunkResult& r, const std::vector<std::uint8_t>& prev);
  std::uint8_t resolve_marker(std::uint16_t v, const std::vector<std::uint8_t>& prev) const;
  // A marker referred to a byte before its member's start.
  [[noreturn]] void too_far_back() const;
  void add_point(std::uint64_t bit, std::uint64_t offset, const std::vector<std::uint8_t>& w);
  void verify() const;
  Unit* new_unit();

  const core::RandomAccessInput& file_;
  const Sink& sink_;
  ParallelInflateOptions opts_;
  inflate_detail::TargetFn target_;
  unsigned threads_;
  std::size_t chunk_;
  std::uint64_t cap_;
  std::size_t piece_size_;
  std::size_t search_size_;
  // Before everything here that holds their leases: they are destroyed after it (the
  // schedule's slots are emptied by ~Engine).
  std::optional<Recycler<Bytes>> pieces_;        // piece_size_: chunk output, DirectOutput
  std::optional<Recycler<Bytes>> searches_;      // search_size_: block finder input
  std::optional<Recycler<MarkerDecoder>> decoders_;

  // Under the schedule's mu_, as are the stats and the frontier's chunk and bit.
  std::deque<Job> jobs_;
  std::deque<std::unique_ptr<Unit>> units_;
  std::vector<SeekPoint> points_;
  std::size_t most_pieces_ = 0;  // the most pieces a speculative chunk has used (under mu_)
  std::atomic<std::uint64_t> trimmed_{0};
  // Under mu_; copied to opts_.stats at the end. timed_: opts_.stats is set.
  bool timed_ = false;
  ParallelInflateStats stats_;

  // The rest of the frontier (the schedule has its chunk and bit): everything before it is
  // accepted; only the resolver touches it.
  std::uint64_t f_offset_ = 0;
  std::vector<std::uint8_t> f_window_;
};

// Output at a known offset: straight to the sink, CRC32 on the way.
class Engine::DirectOutput final : public RunOutput {
 public:
  DirectOutput(Engine& e, Unit& unit)
      : e_(e), unit_(unit), offset_(e.f_offset_), tail_(e.f_window_), buffer_(e.pieces_->get()) {}
  // Once stop_after is reached, a little room only: enough to see whether the member ends here
  // (then its trailer is checked) or goes on (then the run stops).
  std::span<std::uint8_t> space() override {
    return {buffer_->data(), offset_ >= e_.opts_.stop_after ? kPeek : e_.piece_size_};
  }
  void commit(std::size_t n) override { write({buffer_->data(), n}); }
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
  static constexpr std::size_t kPeek = 4096;
  Engine& e_;
  Unit& unit_;
  std::uint64_t offset_;
  std::vector<std::uint8_t> tail_;
  BytesLease buffer_;
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
  // cost 1.6-1.9x a known-window one (its marker phase) when this was chosen, 1.16-1.34x with
  // today's decoder and resolver (bench/chunk_cost.cpp), so by the time it is done the
  // resolver has moved one to two chunks. More lead only holds finished chunks longer: at
  // 2 threads, 4 chunks ahead instead of 2 raised a 4D read's peak by 13-44 MiB (bold_4d.nii.gz
  // gzip -6: 91 against 47 MiB) for no speed on gzip -6 and 5% on nibabel's level-1 files.
  ahead_ = threads_ <= 1 ? 0 : 2 * std::size_t{threads_ - 1};
  // A read of the first bytes only (a NIfTI header) is over before any speculation would pay.
  if (o.stop_after <= chunk_) ahead_ = 0;
  // 16x: fMRI and anatomy inflate 2-4x, so only masks and other near-constant data reach the
  // cap; for those the sequential path (ISA-L at GB/s on such data) is the better use anyway.
  cap_ = std::max<std::uint64_t>(16 * std::uint64_t{chunk_}, std::uint64_t{1} << 20);
  piece_size_ = std::min<std::size_t>(std::size_t{1} << 20, std::max<std::size_t>(chunk_, 65536));
  search_size_ = inflate_detail::chunk_search_bytes(chunk_);
  // Idle buffers kept: what the chunks in flight (at most 2 x threads, each inflating to about
  // 4x its compressed size on neuroimaging data) hold at once, so that the pools keep no more
  // than the engine held at its busiest moment.
  const std::size_t in_flight = 2 * std::size_t{threads_};
  pieces_.emplace(in_flight * (4 * chunk_ / piece_size_ + 1),
                  [this] { return std::make_unique<Bytes>(piece_size_); });
  searches_.emplace(threads_, [this] { return std::make_unique<Bytes>(search_size_); });
  // A decoder whose buffer a chunk filled beyond 4 x chunk_ bytes (a chunk of near-constant
  // data that kept markers in its window for long) is freed rather than kept mapped: the chunks
  // of fMRI data that follow use a fraction of that (bold_4d.nii.gz, 8 MiB chunks: 2.4 MB of
  // marker-mode output per chunk on average at gzip -6, 7.7 MB at zlib level 1).
  const std::size_t retain = 32768 + 2 * chunk_;
  decoders_.emplace(
      in_flight,
      [this] {
        return std::make_unique<MarkerDecoder>(
            [this](std::uint64_t offset, std::span<std::uint8_t> dst) {
              return file_.read_at(offset, std::as_writable_bytes(dst));
            },
            file_.size());
      },
      [retain](MarkerDecoder& m) {
        m.touched = std::max(m.touched, m.dec.size());
        return m.touched <= retain;
      });
  slots_.reset(new Slot[n_]);
  timed_ = o.stats != nullptr;
  target_ = [this](std::size_t c) { return start_of(c); };
}

std::optional<BlockCandidate> Engine::start_of(std::size_t c) {
  Slot& s = slots_[c];
  std::lock_guard lock(s.find_mutex);
  if (s.searched) return s.candidate;
  s.searched = true;
  const BytesLease buffer = searches_->get();
  s.candidate =
      inflate_detail::find_chunk_start(file_, c, chunk_, std::span(buffer->data(), search_size_));
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
  run_workers(threads_);
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
  if (opts_.stats) {
    stats_.decoders_made = decoders_->made();
    stats_.decoders_reused = decoders_->reused();
    stats_.pieces_made = pieces_->made();
    stats_.pieces_reused = pieces_->reused();
    stats_.trimmed_bytes = trimmed_.load();
    *opts_.stats = stats_;
  }
  return f_offset_;
}

bool Engine::side_work(std::unique_lock<std::mutex>& lock) {
  // Delivering an accepted chunk: any free thread, in any order.
  if (jobs_.empty()) return false;
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
  return true;
}

void Engine::speculated(const ChunkResult& r) {
  ++stats_.speculated_chunks;
  stats_.speculated_seconds += r.seconds;
  most_pieces_ = std::max(most_pieces_, r.pieces.size());
}

void Engine::set_pool_limits() {
  // A read's peak memory comes at its end, where the output is all written: idle buffers kept
  // there would add to it (a 2-thread read of bold_4d.nii.gz to float32 ended 49 MiB over its
  // output with the pools full, 13 MiB without pools). So the pools keep only what the chunks
  // left to speculate can use: none once the frontier is within their reach.
  std::size_t chunks, pieces;
  {
    std::lock_guard lock(mu_);
    const std::size_t left = finished_ || f_chunk_ >= n_ ? 0 : std::min(ahead_, n_ - 1 - f_chunk_);
    chunks = left;
    pieces = left * most_pieces_ + (finished_ ? 0 : 1);  // + DirectOutput's
  }
  decoders_->set_keep(std::min(chunks, 2 * std::size_t{threads_}));
  pieces_->set_keep(pieces);
  searches_->set_keep(chunks ? threads_ : 0);
}

void Engine::decode_at_frontier(NoState&) {
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
    stop();
    return;
  }
  out.finish();
  count(end.chunk);
  f_offset_ = out.offset();
  f_window_ = std::move(out.tail());
  advance(end);
}

void Engine::too_far_back() const {
  throw Error(ErrorCode::corrupt, file_.path(), "deflate data",
              "invalid distance too far back (before the start of the member)");
}

std::uint8_t Engine::resolve_marker(std::uint16_t v, const std::vector<std::uint8_t>& prev) const {
  if (v < 256) return static_cast<std::uint8_t>(v);
  const std::size_t index = v - kMarkerBase;  // in the 32 KiB before the chunk
  const std::size_t missing = 32768 - prev.size();
  if (index < missing) too_far_back();
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
      w[k] = r.pieces[j / r.piece_size].data()[j % r.piece_size];
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
    const MarkerResolver resolver(job.window);
    std::vector<std::uint8_t> bytes(std::min<std::size_t>(r.marked, 1 << 16));
    for (std::size_t at = 0; at < r.marked; at += bytes.size()) {
      const std::size_t n = std::min(bytes.size(), r.marked - at);
      if (!resolver.resolve(r.marked_data() + at, n, bytes.data())) too_far_back();
      deliver(bytes.data(), n);
    }
  }
  for (const Piece& p : r.pieces) deliver(p.data(), p.used);
  tracker.finish();
}

std::unique_ptr<ChunkResult> Engine::speculate(NoState&, std::size_t c) {
  const Clock::time_point t0 = timed_ ? Clock::now() : Clock::time_point{};
  std::unique_ptr<ChunkResult> r = speculate_chunk(c);
  if (timed_) r->seconds = seconds_since(t0);
  return r;
}

std::unique_ptr<ChunkResult> Engine::speculate_chunk(std::size_t c) {
  auto r = std::make_unique<ChunkResult>();
  r->piece_size = piece_size_;
  const std::optional<BlockCandidate> cand = start_of(c);
  if (!cand) return r;
  r->start = *cand;
  const Clock::time_point t0 = timed_ ? Clock::now() : Clock::time_point{};
  try {
    Recycler<MarkerDecoder>::Lease m = decoders_->get();
    DeflateDecoder<std::uint16_t>& dec = m->dec;
    const BitReader& reader = m->reader;
    const std::size_t limit = 32768 + static_cast<std::size_t>(cap_ / 2);
    // Address space only: pages are touched as output reaches them (a recycled decoder has its
    // buffer already).
    dec.reserve_output(limit + 512);
    dec.start_with_markers(cand->last_bit);
    std::size_t j = c + 1;
    auto take_marked = [&] {
      r->marked = dec.size() - 32768;
      // Slack: 1 MiB at the default chunk size.
      trimmed_.fetch_add(m->trim(chunk_ / 8), std::memory_order_relaxed);
      r->marker = std::move(m);
      if (timed_) r->marker_seconds = seconds_since(t0);
    };
    for (;;) {
      const DecodeStatus s = dec.decode(limit);
      if (s != DecodeStatus::block_end || reader.overrun()) return std::make_unique<ChunkResult>();
      const std::uint64_t at = reader.position();
      BufferOutput out(*r, *pieces_, cap_, cancel_);
      if (cancel_.load(std::memory_order_relaxed)) return std::make_unique<ChunkResult>();
      if (dec.block_final()) {
        take_marked();
        std::uint64_t next = 0;
        const std::optional<RunEnd> end =
            inflate_detail::end_member(file_, at, out, target_, j, n_, next);
        r->end = end ? *end
                     : inflate_detail::run_known_window(file_, next, {}, j, n_, target_, out);
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
