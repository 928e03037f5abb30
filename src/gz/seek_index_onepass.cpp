// The exact seek index in one parallel pass over the data. The compressed file is cut into
// chunks; each chunk is decoded ahead from a block start found in it (block_finder.hpp), as the
// parallel inflate does (parallel_inflate.cpp, after rapidgzip): our decoder in marker mode while
// the chunk's window is unknown, then with the last 32 KiB of its own output as the window. Both
// stop at every deflate block, so a chunk records every block boundary it passes (ISA-L does not
// stop there, and zlib decodes only from a known window). In stream order a chunk is accepted once
// its predecessor ends a block exactly where it starts; its markers are then resolved from the
// predecessor's last 32 KiB, its members' CRC32s chained against their trailers, and its
// boundaries, with their windows cut from its output, go through the point rule as the
// sequential build's would. A chunk whose start was no real block start, or that was not decoded
// ahead, is decoded from the known position instead, placing its boundaries as it goes.
//
// One inflate of the data where the parallel build before it ran two (a parallel inflate to find
// span starts, then the spans again with zlib): on 2 cores, the same decoder in both, 2 threads
// against the sequential build went from 1.25x to 3.06x on bold_4d.nii.gz (171 MB, gzip -6) and
// from 1.11x to 2.41x on its zlib level-1 copy (our decoder is also faster than zlib's inflate).
#include <zlib.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "gz/block_finder.hpp"
#include "gz/deflate_decoder.hpp"
#include "gz/known_window.hpp"
#include "gz/parallel_inflate.hpp"
#include "gz/seek_index_detail.hpp"
#include "gz/speculation.hpp"
#include "voxpipe/buffer_pool.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::gz::index_detail {

namespace {

using inflate_detail::RunEnd;
using inflate_detail::RunOutput;
using inflate_detail::Segment;

// A chunk's output is kept in pieces of this size from the process's buffer pool (huge-page
// backed, and recycled: first touch of fresh memory costs about as much as inflating into it on
// the machines we measure), reused from chunk to chunk within the build.
constexpr std::size_t kPieceBytes = std::size_t{4} << 20;
// The marker decoder hands its output on every kFlush symbols (its own buffer stays warm).
constexpr std::size_t kFlush = std::size_t{1} << 20;
// Boundary::member_u when the boundary's member started before the chunk.
constexpr std::uint64_t kInherited = std::numeric_limits<std::uint64_t>::max();

// Thrown when a chunk decoded ahead outgrows its cap, or the build no longer needs it.
struct Abandon {};

// The pieces of all chunks of one build: every piece it ever handed out goes back to the
// process's pool at its end (whatever chunks still point into them, which are not used again).
class PiecePool {
 public:
  PiecePool() = default;
  PiecePool(const PiecePool&) = delete;
  PiecePool& operator=(const PiecePool&) = delete;
  ~PiecePool() {
    for (const BufferPool::Block& b : owned_) BufferPool::instance().release(b);
  }
  std::byte* get() {
    std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      std::byte* p = free_.back();
      free_.pop_back();
      return p;
    }
    owned_.reserve(owned_.size() + 1);  // so that the push cannot throw after the acquire
    const BufferPool::Block b = BufferPool::instance().acquire(kPieceBytes);
    owned_.push_back(b);
    return b.data;
  }
  void put(std::vector<std::byte*>& pieces) {
    std::lock_guard lock(mutex_);
    free_.insert(free_.end(), pieces.begin(), pieces.end());
    pieces.clear();
  }

 private:
  std::mutex mutex_;
  std::vector<BufferPool::Block> owned_;
  std::vector<std::byte*> free_;
};

// Output appended in order into pieces of the pool.
template <class T>
class Pieces {
 public:
  static constexpr std::size_t kPer = kPieceBytes / sizeof(T);
  std::uint64_t size() const { return size_; }
  // Room after the last element (never empty).
  std::span<T> space(PiecePool& pool) {
    if (size_ == pieces_.size() * std::uint64_t{kPer}) pieces_.push_back(pool.get());
    const auto at = static_cast<std::size_t>(size_ % kPer);
    return {piece(pieces_.size() - 1) + at, kPer - at};
  }
  void commit(std::size_t n) { size_ += n; }
  void append(const T* p, std::size_t n, PiecePool& pool) {
    while (n > 0) {
      const std::span<T> dst = space(pool);
      const std::size_t k = std::min(n, dst.size());
      std::memcpy(dst.data(), p, k * sizeof(T));
      commit(k);
      p += k;
      n -= k;
    }
  }
  // The elements [from, from + n) within one piece, or nullptr when they cross pieces.
  const T* contiguous(std::uint64_t from, std::size_t n) const {
    const auto at = static_cast<std::size_t>(from % kPer);
    if (at + n > kPer) return nullptr;
    return piece(static_cast<std::size_t>(from / kPer)) + at;
  }
  void copy(std::uint64_t from, std::size_t n, T* dst) const {
    while (n > 0) {
      const auto at = static_cast<std::size_t>(from % kPer);
      const std::size_t k = std::min(n, kPer - at);
      std::memcpy(dst, piece(static_cast<std::size_t>(from / kPer)) + at, k * sizeof(T));
      dst += k;
      from += k;
      n -= k;
    }
  }
  // The i-th piece and its element count.
  std::size_t count() const { return pieces_.size(); }
  std::span<const T> piece_span(std::size_t i) const {
    const std::uint64_t first = std::uint64_t{i} * kPer;
    return {piece(i), static_cast<std::size_t>(std::min<std::uint64_t>(kPer, size_ - first))};
  }
  void release(PiecePool& pool) {
    pool.put(pieces_);
    size_ = 0;
  }

 private:
  T* piece(std::size_t i) const { return reinterpret_cast<T*>(pieces_[i]); }
  std::vector<std::byte*> pieces_;
  std::uint64_t size_ = 0;
};

// A block boundary a chunk passed: the block's first bit; u, the chunk's output before it; and
// where in the chunk's output its member began (kInherited: before the chunk), which with the
// predecessor's window gives the length of its window (min(32 KiB, its member's output before
// it)).
struct Boundary {
  std::uint64_t bit = 0;
  std::uint64_t u = 0;
  std::uint64_t member_u = kInherited;
};

// What decoding one chunk ahead produced.
struct Chunk {
  bool ok = false;
  BlockCandidate start;
  Pieces<std::uint16_t> marked;  // the first output, markers standing for the unknown window
  Pieces<std::uint8_t> plain;    // the rest, after the window was known to hold no marker
  Pieces<std::uint8_t> resolved;  // at acceptance: `marked` as bytes
  // The boundaries after the chunk's first block (its start is the predecessor's end), in
  // stream order.
  std::vector<Boundary> boundaries;
  // The CRC32s of `plain` per member piece, with the trailers of the members it ends; the
  // marked output's CRC32 joins the first at acceptance (no member ends inside the marked part).
  std::vector<Segment> segments;
  std::uint64_t member_u = kInherited;  // the last member start in the chunk
  RunEnd end;
  std::uint64_t total() const { return marked.size() + plain.size(); }
  void release(PiecePool& pool) {
    marked.release(pool);
    plain.release(pool);
    resolved.release(pool);
  }
};

// The output of a chunk's run after its marker phase: kept in the chunk's pieces, its CRC32
// per member piece, its block boundaries and member starts recorded.
class ChunkOutput final : public RunOutput {
 public:
  ChunkOutput(Chunk& c, PiecePool& pool, std::uint64_t cap, const std::atomic<bool>& cancel)
      : c_(c), pool_(pool), cap_(cap), cancel_(cancel) {}
  std::span<std::uint8_t> space() override {
    const std::span<std::uint8_t> s = c_.plain.space(pool_);
    last_ = s.data();
    return s;
  }
  void commit(std::size_t n) override {
    crc_ = inflate_detail::crc32_update(crc_, last_, n);
    length_ += n;
    c_.plain.commit(n);
    if (c_.total() > cap_ || cancel_.load(std::memory_order_relaxed)) throw Abandon{};
  }
  void member_end(std::uint32_t crc, std::uint32_t isize, std::uint64_t trailer_byte) override {
    c_.segments.push_back(Segment{crc_, length_, true, crc, isize, trailer_byte});
    crc_ = 0;
    length_ = 0;
  }
  void member_start(std::uint64_t) override { c_.member_u = c_.total(); }
  void block_start(std::uint64_t bit) override {
    c_.boundaries.push_back(Boundary{bit, c_.total(), c_.member_u});
  }
  void finish() {
    if (length_) c_.segments.push_back(Segment{crc_, length_, false, 0, 0, 0});
  }

 private:
  Chunk& c_;
  PiecePool& pool_;
  std::uint64_t cap_;
  const std::atomic<bool>& cancel_;
  const std::uint8_t* last_ = nullptr;
  std::uint32_t crc_ = 0;
  std::uint64_t length_ = 0;
};

// One thread's decoders, kept across its chunks so that their buffers stay warm.
struct Decoders {
  explicit Decoders(const core::RandomAccessInput& file)
      : reader(inflate_detail::file_fetch(file), file.size(),
               inflate_detail::reader_buffer_bytes(file)),
        marked(reader),
        plain(reader) {}
  BitReader reader;
  DeflateDecoder<std::uint16_t> marked;
  DeflateDecoder<std::uint8_t> plain;
};

class OnePassBuild final : inflate_detail::ChunkSchedule<OnePassBuild, Chunk, Decoders> {
 public:
  OnePassBuild(const core::RandomAccessInput& file, std::uint64_t spacing,
               std::span<const std::uint64_t> wanted, const ExactBuildOptions& options,
               BuildProgress& progress);
  // nullopt when the file has fewer than two chunks.
  std::optional<SeekIndex> run();
  // The same index on the calling thread alone: one run from the first block to the end.
  SeekIndex run_in_order();

 private:
  friend class inflate_detail::ChunkSchedule<OnePassBuild, Chunk, Decoders>;
  class FrontierOutput;

  // The schedule's hooks (speculation.hpp).
  std::unique_ptr<Decoders> worker_state() { return std::make_unique<Decoders>(file_); }
  std::unique_ptr<Chunk> speculate(Decoders& d, std::size_t c);
  void accept(std::unique_ptr<Chunk> r);
  void decode_at_frontier(Decoders& d);
  void discard(std::unique_ptr<Chunk>& r);
  void speculated(const Chunk&) {}
  bool side_work(std::unique_lock<std::mutex>&) { return false; }
  bool frontier_moved() const { return false; }
  void after_advance() { progress_.at(std::min(f_bit_ / 8, file_.size())); }

  std::optional<BlockCandidate> start_of(std::size_t c);
  SeekIndex finish_index();
  std::span<const std::uint8_t> window_of(const Chunk& r, std::uint64_t u, std::uint64_t member_u,
                                          std::vector<std::uint8_t>& scratch) const;

  const core::RandomAccessInput& file_;
  const ExactBuildOptions& options_;
  BuildProgress& progress_;
  SeekIndex index_;
  PointPicker picker_;
  inflate_detail::MemberChecker checker_;
  inflate_detail::TargetFn target_;
  unsigned threads_;
  std::size_t chunk_;
  std::uint64_t cap_;
  PiecePool pool_;

  // The rest of the frontier (the schedule has its chunk and bit): everything before it is
  // placed; only the resolver touches it (and the picker, the checker and index_).
  std::uint64_t f_offset_ = 0;
  std::vector<std::uint8_t> f_window_;  // min(32 KiB, its member's output) before the frontier
  std::size_t accepted_ = 0;  // chunks decoded ahead and accepted
  std::size_t runs_ = 0;      // decodes from the frontier
};

// The output of a decode from the frontier (a known position and window): its boundaries are
// placed as they come (everything before them is placed), their windows from the last 32 KiB
// kept here; the CRC32s go to the checker as members end.
class OnePassBuild::FrontierOutput final : public RunOutput {
 public:
  explicit FrontierOutput(OnePassBuild& b)
      : b_(b), buf_(kWindowSize + kOutputChunk), member_out_(b.f_window_.size()) {
    std::copy(b.f_window_.begin(), b.f_window_.end(), buf_.begin());
    have_ = b.f_window_.size();
  }
  std::span<std::uint8_t> space() override {
    if (have_ == buf_.size()) {
      std::memmove(buf_.data(), buf_.data() + have_ - kWindowSize, kWindowSize);
      have_ = kWindowSize;
    }
    return {buf_.data() + have_, buf_.size() - have_};
  }
  void commit(std::size_t n) override {
    crc_ = inflate_detail::crc32_update(crc_, buf_.data() + have_, n);
    length_ += n;
    have_ += n;
    produced_ += n;
    member_out_ += n;
  }
  void member_end(std::uint32_t crc, std::uint32_t isize, std::uint64_t trailer_byte) override {
    const Segment s{crc_, length_, true, crc, isize, trailer_byte};
    b_.checker_.add(std::span(&s, 1), false);
    crc_ = 0;
    length_ = 0;
  }
  void member_start(std::uint64_t) override { member_out_ = 0; }
  void block_start(std::uint64_t bit) override {
    b_.picker_.boundary(bit, b_.f_offset_ + produced_, window());
    b_.progress_.at(bit / 8);
  }
  // Ends the run: the last segment to the checker, the frontier's offset and window moved on.
  void finish() {
    if (length_) {
      const Segment s{crc_, length_, false, 0, 0, 0};
      b_.checker_.add(std::span(&s, 1), false);
    }
    const std::span<const std::uint8_t> w = window();
    b_.f_window_.assign(w.begin(), w.end());
    b_.f_offset_ += produced_;
  }

 private:
  std::span<const std::uint8_t> window() const {
    const auto w = static_cast<std::size_t>(std::min<std::uint64_t>(member_out_, kWindowSize));
    return {buf_.data() + have_ - w, w};
  }
  OnePassBuild& b_;
  std::vector<std::uint8_t> buf_;
  std::size_t have_ = 0;
  std::uint64_t produced_ = 0;
  std::uint64_t member_out_;
  std::uint32_t crc_ = 0;
  std::uint64_t length_ = 0;
};

OnePassBuild::OnePassBuild(const core::RandomAccessInput& file, std::uint64_t spacing,
                           std::span<const std::uint64_t> wanted,
                           const ExactBuildOptions& options, BuildProgress& progress)
    : file_(file),
      options_(options),
      progress_(progress),
      picker_(index_, spacing, wanted),
      checker_(file.path(), true) {
  index_.compressed_size = file.size();
  index_.spacing = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(spacing, std::numeric_limits<std::uint32_t>::max()));
  threads_ = std::max(options.threads, 1u);
  chunk_ = std::max<std::size_t>(
      options.chunk_size ? options.chunk_size : ParallelInflateOptions{}.chunk_size, 4096);
  n_ = static_cast<std::size_t>((file.size() + chunk_ - 1) / chunk_);
  // Two chunks of lead per thread besides the resolver's, as the parallel inflate's engine
  // (parallel_inflate.cpp says why), and the same cap on a chunk's output.
  ahead_ = 2 * std::size_t{threads_ - 1};
  ahead_first_ = options.decode_ahead_first;
  cap_ = std::max<std::uint64_t>(16 * std::uint64_t{chunk_}, std::uint64_t{1} << 20);
  target_ = [this](std::size_t c) { return start_of(c); };
}

std::optional<BlockCandidate> OnePassBuild::start_of(std::size_t c) {
  Slot& s = slots_[c];
  std::lock_guard lock(s.find_mutex);
  if (!s.searched) {
    std::vector<std::uint8_t> scratch(inflate_detail::chunk_search_bytes(chunk_));
    s.candidate = inflate_detail::find_chunk_start(file_, c, chunk_, scratch);
    s.searched = true;
  }
  return s.candidate;
}

std::optional<SeekIndex> OnePassBuild::run() {
  if (n_ < 2 || threads_ < 2) return std::nullopt;
  slots_.reset(new Slot[n_]);
  f_bit_ = inflate_detail::read_gzip_header(file_, 0, true) * 8;
  // No more workers than chunks: the others would find nothing to do.
  run_workers(static_cast<unsigned>(std::min<std::size_t>(threads_, n_)));
  if (!finished_ || f_chunk_ < n_) throw SpanMismatch{};
  if (options_.stats) {
    options_.stats->parallel = true;
    options_.stats->spans = accepted_ + runs_;
    options_.stats->accepted = accepted_;
  }
  return finish_index();
}

SeekIndex OnePassBuild::run_in_order() {
  // One chunk: the run has no chunk start to stop at and goes through every member to the end.
  n_ = 1;
  f_bit_ = inflate_detail::read_gzip_header(file_, 0, true) * 8;
  Decoders d(file_);
  FrontierOutput out(*this);
  out.block_start(f_bit_);
  const RunEnd end =
      inflate_detail::run_blocks(file_, d.reader, d.plain, f_bit_, {}, 1, n_, target_, out);
  out.finish();
  if (end.chunk != n_) throw SpanMismatch{};
  return finish_index();
}

SeekIndex OnePassBuild::finish_index() {
  const std::uint64_t total = f_offset_;
  picker_.finish(total);
  // A block boundary at the very end (an empty last block) has nothing to inflate after it.
  while (!index_.points.empty() && index_.points.back().uncompressed == total)
    index_.points.pop_back();
  index_.uncompressed_size = total;
  return std::move(index_);
}

void OnePassBuild::discard(std::unique_ptr<Chunk>& r) {
  if (!r) return;
  r->release(pool_);
  r.reset();
}

std::unique_ptr<Chunk> OnePassBuild::speculate(Decoders& d, std::size_t c) {
  auto r = std::make_unique<Chunk>();
  const std::optional<BlockCandidate> cand = start_of(c);
  if (!cand) return r;
  r->start = *cand;
  try {
    DeflateDecoder<std::uint16_t>& dec = d.marked;
    dec.start_with_markers(cand->last_bit);
    // Symbols of dec's buffer already moved to r->marked.
    std::size_t taken = dec.window_size();
    const auto take = [&] {
      r->marked.append(dec.data() + taken, dec.size() - taken, pool_);
      if (dec.size() > kWindowSize + kFlush) dec.discard_front(kWindowSize);
      taken = dec.size();
      if (r->total() > cap_) throw Abandon{};
    };
    ChunkOutput out(*r, pool_, cap_, cancel_);
    std::size_t j = c + 1;
    for (;;) {
      const DecodeStatus s = dec.decode(dec.size() + kFlush);
      // A decode error here is a false start (or bad data, which the resolver will meet).
      if (s == DecodeStatus::error || d.reader.overrun() ||
          cancel_.load(std::memory_order_relaxed))
        throw Abandon{};
      if (s == DecodeStatus::output_full) {
        take();
        continue;
      }
      const std::uint64_t at = d.reader.position();
      if (dec.block_final()) {
        take();
        std::uint64_t next = 0;
        if (const std::optional<RunEnd> end =
                inflate_detail::end_member(file_, at, out, target_, j, n_, next)) {
          r->end = *end;
        } else {
          out.block_start(next);
          r->end = inflate_detail::run_blocks(file_, d.reader, d.plain, next, {}, j, n_, target_,
                                              out);
        }
        break;
      }
      if (inflate_detail::lands_on(target_, j, n_, at)) {
        take();
        r->end = RunEnd{j, at};
        break;
      }
      r->boundaries.push_back(Boundary{at, r->marked.size() + (dec.size() - taken), kInherited});
      if (!dec.window_has_markers()) {
        std::array<std::uint8_t, kWindowSize> window;
        const std::uint16_t* src = dec.data() + dec.size() - kWindowSize;
        for (std::size_t i = 0; i < kWindowSize; ++i) window[i] = static_cast<std::uint8_t>(src[i]);
        take();
        r->end = inflate_detail::run_blocks(file_, d.reader, d.plain, at, window, j, n_, target_,
                                            out);
        break;
      }
      if (dec.size() > kWindowSize + kFlush) take();
    }
    out.finish();
  } catch (const Error&) {
    r->release(pool_);
    return std::make_unique<Chunk>();
  } catch (const Abandon&) {
    r->release(pool_);
    return std::make_unique<Chunk>();
  }
  r->ok = true;
  return r;
}

std::span<const std::uint8_t> OnePassBuild::window_of(const Chunk& r, std::uint64_t u,
                                                      std::uint64_t member_u,
                                                      std::vector<std::uint8_t>& scratch) const {
  const std::vector<std::uint8_t>& prev = f_window_;
  const auto length = static_cast<std::size_t>(std::min<std::uint64_t>(
      kWindowSize, member_u == kInherited ? prev.size() + u : u - member_u));
  // A member's first block (or its first byte, at the chunk's end): no window. Looked up, it
  // would name a piece past the last when the part ends on a piece boundary (or has none).
  if (length == 0) return {};
  const auto from_prev = static_cast<std::size_t>(length > u ? length - u : 0);
  const std::size_t from_chunk = length - from_prev;
  const std::uint64_t first = u - from_chunk;
  const std::uint64_t marked = r.resolved.size();
  if (from_prev == 0) {
    // Within one piece of one part: no copy.
    if (u <= marked) {
      if (const std::uint8_t* p = r.resolved.contiguous(first, from_chunk)) return {p, length};
    } else if (first >= marked) {
      if (const std::uint8_t* p = r.plain.contiguous(first - marked, from_chunk))
        return {p, length};
    }
  }
  scratch.resize(length);
  std::copy(prev.end() - static_cast<std::ptrdiff_t>(from_prev), prev.end(), scratch.begin());
  std::uint8_t* dst = scratch.data() + from_prev;
  if (first < marked) {
    const auto k = static_cast<std::size_t>(std::min<std::uint64_t>(from_chunk, marked - first));
    r.resolved.copy(first, k, dst);
    r.plain.copy(0, from_chunk - k, dst + k);
  } else {
    r.plain.copy(first - marked, from_chunk, dst);
  }
  return scratch;
}

void OnePassBuild::accept(std::unique_ptr<Chunk> chunk) {
  Chunk& r = *chunk;
  const MarkerResolver resolver(f_window_);
  std::uint32_t crc = 0;
  for (std::size_t i = 0; i < r.marked.count(); ++i) {
    std::span<const std::uint16_t> m = r.marked.piece_span(i);
    while (!m.empty()) {
      const std::span<std::uint8_t> dst = r.resolved.space(pool_);
      const std::size_t n = std::min(dst.size(), m.size());
      if (!resolver.resolve(m.data(), n, dst.data()))
        throw Error(ErrorCode::corrupt, file_.path(), "deflate data",
                    "invalid distance too far back (before the start of the member)");
      crc = inflate_detail::crc32_update(crc, dst.data(), n);
      r.resolved.commit(n);
      m = m.subspan(n);
    }
  }
  const std::uint64_t marked = r.marked.size();
  if (marked) {
    if (r.segments.empty()) {
      r.segments.push_back(Segment{crc, marked, false, 0, 0, 0});
    } else {
      Segment& first = r.segments.front();
      first.crc = static_cast<std::uint32_t>(
          ::crc32_combine(crc, first.crc, static_cast<z_off_t>(first.length)));
      first.length += marked;
    }
  }
  checker_.add(r.segments, false);
  // The chunk's first block (where its predecessor ended), then the boundaries it recorded.
  std::vector<std::uint8_t> scratch;
  picker_.boundary(f_bit_, f_offset_, window_of(r, 0, kInherited, scratch));
  for (const Boundary& b : r.boundaries)
    picker_.boundary(b.bit, f_offset_ + b.u, window_of(r, b.u, b.member_u, scratch));
  const std::span<const std::uint8_t> tail = window_of(r, r.total(), r.member_u, scratch);
  std::vector<std::uint8_t> next(tail.begin(), tail.end());
  f_offset_ += r.total();
  f_window_ = std::move(next);
  ++accepted_;
  const RunEnd end = r.end;
  r.release(pool_);
  advance(end);
}

void OnePassBuild::decode_at_frontier(Decoders& d) {
  FrontierOutput out(*this);
  out.block_start(f_bit_);
  const RunEnd end = inflate_detail::run_blocks(file_, d.reader, d.plain, f_bit_, f_window_,
                                                f_chunk_ + 1, n_, target_, out);
  out.finish();
  ++runs_;
  advance(end);
}

}  // namespace

std::optional<SeekIndex> build_one_pass(const core::RandomAccessInput& file, std::uint64_t spacing,
                                        std::span<const std::uint64_t> wanted,
                                        const ExactBuildOptions& options, BuildProgress& progress) {
  OnePassBuild build(file, spacing, wanted, options, progress);
  return build.run();
}

SeekIndex build_in_order(const core::RandomAccessInput& file, std::uint64_t spacing,
                         std::span<const std::uint64_t> wanted, const ExactBuildOptions& options,
                         BuildProgress& progress) {
  OnePassBuild build(file, spacing, wanted, options, progress);
  return build.run_in_order();
}

}  // namespace voxpipe::gz::index_detail
