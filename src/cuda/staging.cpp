#include "cuda/staging.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <thread>
#include <type_traits>
#include <vector>

#include "cuda/element_op.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::cuda {

namespace {

// The alignment of host staging buffers: a page, as pinned memory and O_DIRECT reads want.
constexpr std::align_val_t kBufferAlignment{4096};

// `error` with the file and offset added where it lacks them; other exceptions become
// Error(io) naming `stage` ("read" or "sink"). bad_alloc passes unchanged.
std::exception_ptr with_context(std::exception_ptr error, const std::string& name,
                                 std::uint64_t offset, const char* stage) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    if (!e.path().empty() && e.offset()) return error;
    return std::make_exception_ptr(Error(e.code(), e.path().empty() ? name : e.path(), e.field(),
                                         e.detail(), e.offset() ? e.offset() : offset));
  } catch (const std::bad_alloc&) {
    return error;
  } catch (const std::exception& e) {
    return std::make_exception_ptr(
        Error(ErrorCode::io, name, std::string("staging ") + stage, e.what(), offset));
  } catch (...) {
    return std::make_exception_ptr(
        Error(ErrorCode::io, name, std::string("staging ") + stage, "unknown exception", offset));
  }
}

// The error a pipeline reports: of several, the one of the earliest chunk, so that it does not
// depend on thread timing (a short file fails the chunk that crosses its end, not whichever read
// came later). Guarded by its ring's mutex.
struct FirstError {
  std::exception_ptr error;
  std::uint64_t chunk = 0;
  void record(std::exception_ptr e, std::uint64_t k) {
    if (!error || k < chunk) {
      error = std::move(e);
      chunk = k;
    }
  }
};

// The ring's shared state. One mutex guards it all; the waits are per chunk, not per byte, so
// contention is negligible next to a multi-megabyte read or copy.
class Ring {
 public:
  enum class Slot { free, filling, full, consumed };

  Ring(unsigned slots, std::uint64_t chunks) : state_(slots, Slot::free), chunk_(slots, 0), chunks_(chunks) {}

  // A reader claims the next chunk and waits for its slot; false when there is nothing left or
  // the pipeline stopped. *must_release: the slot held a consumed chunk whose sink work may
  // still be running.
  bool claim(std::uint64_t* k, unsigned* slot, bool* must_release) {
    std::unique_lock lock(mutex_);
    if (stopped_ || next_ >= chunks_) return false;
    *k = next_++;
    *slot = static_cast<unsigned>(*k % state_.size());
    const unsigned s = *slot;
    const std::uint64_t k_val = *k, m = state_.size();
    // The slot is ours once its previous chunk (k - M) has been consumed (or, for the first
    // round, right away); another reader may still be filling it with k - M.
    cv_.wait(lock, [&] {
      return stopped_ || (k_val < m && state_[s] == Slot::free) ||
             (state_[s] == Slot::consumed && chunk_[s] == k_val - m);
    });
    if (stopped_) return false;
    *must_release = state_[s] == Slot::consumed;
    state_[s] = Slot::filling;
    chunk_[s] = k_val;
    return true;
  }

  void filled(unsigned slot) { set(slot, Slot::full); }
  void consumed(unsigned slot) { set(slot, Slot::consumed); }

  // The consumer waits for chunk k in its slot; false when the pipeline stopped.
  bool wait_full(std::uint64_t k) {
    const unsigned s = static_cast<unsigned>(k % state_.size());
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return stopped_ || (state_[s] == Slot::full && chunk_[s] == k); });
    return !stopped_;
  }

  // Records the error of chunk k (FirstError) and stops everyone.
  void fail(std::exception_ptr error, std::uint64_t k) {
    {
      std::lock_guard lock(mutex_);
      failure_.record(std::move(error), k);
      stopped_ = true;
    }
    cv_.notify_all();
  }
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopped_ = true;
    }
    cv_.notify_all();
  }
  std::exception_ptr error() {
    std::lock_guard lock(mutex_);
    return failure_.error;
  }

 private:
  void set(unsigned slot, Slot s) {
    {
      std::lock_guard lock(mutex_);
      state_[slot] = s;
    }
    cv_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Slot> state_;
  std::vector<std::uint64_t> chunk_;
  const std::uint64_t chunks_;
  std::uint64_t next_ = 0;
  bool stopped_ = false;
  FirstError failure_;
};

// The M staging buffers, freed through the sink on every exit path.
class Buffers {
 public:
  Buffers(StagingSink& sink, unsigned count, std::size_t bytes) : sink_(sink) {
    buffers_.reserve(count);
    try {
      for (unsigned i = 0; i < count; ++i) buffers_.push_back(sink.allocate_buffer(bytes));
    } catch (...) {  // the destructor does not run for a half-built object
      for (std::byte* b : buffers_) sink_.free_buffer(b);
      throw;
    }
  }
  ~Buffers() {
    for (std::byte* b : buffers_) sink_.free_buffer(b);
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  std::byte* operator[](unsigned i) const { return buffers_[i]; }

 private:
  StagingSink& sink_;
  std::vector<std::byte*> buffers_;
};

// Reader threads, stopped and joined on every exit path.
class Readers {
 public:
  explicit Readers(Ring& ring) : ring_(ring) {}
  ~Readers() {
    ring_.stop();  // a no-op after a normal end: nothing is waiting then
    for (auto& t : threads_) t.join();
  }
  template <class F>
  void start(unsigned n, F&& body) {
    for (unsigned i = 0; i < n; ++i) threads_.emplace_back(body);
  }
  void join() {
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 private:
  Ring& ring_;
  std::vector<std::thread> threads_;
};

struct Plan {
  std::size_t chunk_bytes;
  std::uint64_t chunks;
  unsigned buffers, readers;
};

template <class Source>
Plan plan(const Source& source, std::size_t element_size, const StagingOptions& o, bool concurrent) {
  const auto bad = [&](const std::string& what) {
    return Error(ErrorCode::invalid_argument, source.name, "staging", what);
  };
  if (element_size == 0) throw bad("the element size is 0");
  if (source.size % element_size != 0)
    throw bad("expected a payload of whole " + std::to_string(element_size) +
              "-byte elements, but it has " + std::to_string(source.size) + " bytes");
  if (o.buffers == 0 || o.readers == 0) throw bad("the ring needs at least one buffer and one reader");
  if constexpr (std::is_same_v<Source, ChunkSource>) {
    if (!source.fill) throw bad("the source has no fill function");
  } else {
    if (!source.produce) throw bad("the source has no produce function");
  }
  Plan p;
  p.chunk_bytes = std::max(o.chunk_bytes / element_size, std::size_t(1)) * element_size;
  p.chunks = (source.size + p.chunk_bytes - 1) / p.chunk_bytes;
  if (p.chunks < 2 && source.size) p.chunk_bytes = static_cast<std::size_t>(source.size);
  p.buffers = static_cast<unsigned>(std::min<std::uint64_t>(o.buffers, std::max<std::uint64_t>(p.chunks, 1)));
  p.readers = concurrent ? static_cast<unsigned>(std::min<std::uint64_t>(o.readers, p.buffers)) : 1;
  return p;
}

// Nothing to move; the sink may still have an output to finish.
void finish_empty(StagingSink& sink) {
  sink.begin(0, 0);
  sink.attach_thread();
  try {
    sink.finish();
  } catch (...) {
    sink.detach_thread();
    throw;
  }
  sink.detach_thread();
}

}  // namespace

ChunkSource file_chunk_source(const core::RandomAccessInput& file, std::uint64_t payload_offset,
                              std::uint64_t payload_bytes) {
  ChunkSource s;
  s.name = file.path();
  s.base_offset = payload_offset;
  s.size = payload_bytes;
  s.concurrent = true;
  s.fill = [&file, payload_offset](std::uint64_t offset, std::span<std::byte> dst) {
    const std::uint64_t at = payload_offset + offset;
    std::size_t done = 0;
    while (done < dst.size()) {
      const std::size_t got = file.read_at(at + done, dst.subspan(done));
      if (got == 0)
        throw Error(ErrorCode::truncated, file.path(), "data",
                    "expected " + std::to_string(dst.size()) + " bytes, but the file ends " +
                        std::to_string(done) + " bytes in",
                    at);
      done += got;
    }
  };
  return s;
}

void stage(const ChunkSource& source, std::size_t element_size, StagingSink& sink,
           const StagingOptions& options) {
  const Plan p = plan(source, element_size, options, source.concurrent);
  if (p.chunks == 0) return finish_empty(sink);
  std::optional<Buffers> buffers_storage;
  try {
    sink.begin(p.buffers, p.chunk_bytes);
    buffers_storage.emplace(sink, p.buffers, p.chunk_bytes);
  } catch (...) {
    std::rethrow_exception(with_context(std::current_exception(), source.name, source.base_offset, "sink"));
  }
  const Buffers& buffers = *buffers_storage;
  Ring ring(p.buffers, p.chunks);
  const auto chunk_size = [&](std::uint64_t k) {
    return static_cast<std::size_t>(std::min<std::uint64_t>(p.chunk_bytes, source.size - k * p.chunk_bytes));
  };

  const auto reader = [&] {
    std::uint64_t k = 0;
    try {
      sink.attach_thread();
    } catch (...) {
      ring.fail(with_context(std::current_exception(), source.name, source.base_offset, "read"), 0);
      return;
    }
    unsigned slot = 0;
    bool must_release = false;
    try {
      while (ring.claim(&k, &slot, &must_release)) {
        if (must_release) sink.release(slot);
        source.fill(k * p.chunk_bytes, std::span(buffers[slot], chunk_size(k)));
        ring.filled(slot);
      }
    } catch (...) {
      ring.fail(with_context(std::current_exception(), source.name,
                             source.base_offset + k * p.chunk_bytes, "read"),
                k);
    }
    sink.detach_thread();
  };

  {
    Readers readers(ring);
    try {
      readers.start(p.readers, reader);
    } catch (...) {  // std::system_error: a thread could not be started
      ring.fail(with_context(std::current_exception(), source.name, source.base_offset, "read"), 0);
    }
    bool attached = false;
    std::uint64_t k = 0;
    try {
      sink.attach_thread();
      attached = true;
      for (; k < p.chunks && ring.wait_full(k); ++k) {
        const unsigned slot = static_cast<unsigned>(k % p.buffers);
        sink.consume({k, k * p.chunk_bytes, std::span<const std::byte>(buffers[slot], chunk_size(k)), slot});
        ring.consumed(slot);
      }
    } catch (...) {
      ring.fail(with_context(std::current_exception(), source.name,
                             source.base_offset + k * p.chunk_bytes, "sink"),
                k);
    }
    readers.join();
    if (ring.error()) {
      sink.abandon();
      if (attached) sink.detach_thread();
      std::rethrow_exception(ring.error());
    }
    try {
      sink.finish();
    } catch (...) {
      sink.abandon();
      if (attached) sink.detach_thread();
      std::rethrow_exception(with_context(std::current_exception(), source.name, source.base_offset, "sink"));
    }
    if (attached) sink.detach_thread();
  }
}

namespace {

// Thrown by a piece callback into the producer once the pipeline has stopped: it unwinds the
// producer's threads (read_range lets a sink's exception out after joining them) and is
// dropped on the producer thread, the error that stopped the pipeline being recorded already.
struct PushStopped {};

// The ring of a push pipeline. Chunks [0, hi_) have been given their buffer (chunk k uses slot
// k % M) - the window is the last M of them - and the rest have not: bytes for those go to the
// overflow, or their callback waits.
//
// Why this cannot deadlock. A piece callback waits only while every byte missing from the
// window belongs to a callback in progress (its own part beyond the window excepted). Such a
// callback copies whatever of its piece lies in the window before it ever waits, and one that
// waits is woken by each move of the window and copies what the move brought in; so those bytes
// arrive with no further work from the producer. The consumer then completes the window's
// chunks, hands them to the sink, releases the oldest buffer (which waits on the sink's own work
// only: a device copy) and gives it the next chunk, which wakes the waiting callbacks. At any
// other time - some missing byte of the window is still to be produced - a callback never
// waits: it copies what lies beyond the window into the overflow and returns. So no producer
// thread is held while the window needs bytes that are not already in a callback, and whatever
// the producer's threads wait on among themselves (inflate_parallel: accepted chunks queued
// for delivery behind threads that decode; inflate_members and inflate_range: tasks that a
// parallel_for runs one after another when the pool is busy) is never blocked by the pipeline.
//
// Why the overflow is bounded. Let D be the producer's reordering distance: when it starts
// delivering a piece that ends at byte e, every byte before e - D has been delivered or is in a
// callback in progress (let L be the first byte that is neither; L never decreases). Bytes
// enter the overflow only while some byte of the window is missing and in no callback, so
// L < W, the window's end, and the piece ends before L + D < W + D. The window's end only grows
// and overflow bytes are copied out as it passes them, so the overflow holds distinct bytes in
// [W, W + D), plus the rest of at most one piece that straddles W: at most D + one piece,
// whatever the sink's speed (a slow sink makes callbacks wait instead). D is a property of the
// producer: for gz::inflate_parallel, about the output of the chunks it has decoded and not yet
// started to deliver (its in-flight chunks, parallel_inflate.hpp) - its decoding threads either
// finish speculating and take queued chunks, or wait here only while the window is covered;
// for a read_range over [a, b) split into consecutive calls (load.cpp does so for sized members
// and seek indexes), at most b - a. The tests measure D and check the bound.
class PushRing {
 public:
  PushRing(const Plan& p, std::uint64_t size, const Buffers& buffers)
      : p_(p), size_(size), buffers_(buffers), arrived_(p.buffers, 0),
        hi_(std::min<std::uint64_t>(p.buffers, p.chunks)),
        missing_(std::min<std::uint64_t>(size, hi_ * p.chunk_bytes)) {}

  std::uint64_t chunk_size(std::uint64_t k) const {
    return std::min<std::uint64_t>(p_.chunk_bytes, size_ - k * p_.chunk_bytes);
  }

  // The piece callback: copies `data` (payload offset `offset`) into the window, waits, or
  // puts the part beyond the window in the overflow. Throws PushStopped once stopped.
  void deliver(std::uint64_t offset, std::span<const std::byte> data) {
    if (offset > size_ || data.size() > size_ - offset)
      throw Error(ErrorCode::invalid_argument, "", "staging",
                  "the producer delivered bytes past the end of the payload");
    std::unique_lock lock(mutex_);
    Call call{offset, offset + data.size()};
    const CallRegistration registration(calls_, &call);
    while (!data.empty()) {
      if (stopped_) throw PushStopped{};
      const std::uint64_t k = offset / p_.chunk_bytes;
      if (k + p_.buffers < hi_)  // its buffer holds a later chunk now
        throw Error(ErrorCode::invalid_argument, "", "staging",
                    "the producer delivered a byte twice (payload offset " + std::to_string(offset) + ")");
      if (k < hi_) {  // up to the window's end: straight into the buffers
        const std::size_t n = static_cast<std::size_t>(
            std::min<std::uint64_t>(data.size(), hi_ * p_.chunk_bytes - offset));
        lock.unlock();  // the chunks stay ours: incomplete, they cannot leave the window
        copy_in(offset, data.first(n));
        lock.lock();
        count_in(offset, n);
        offset += n;
        call.offset = offset;
        data = data.subspan(n);
        continue;
      }
      if (missing_ == covered()) {
        // The window moves without us: wait until it does, then look again (the chunk it
        // takes in may need bytes that only this thread, or work queued behind it, delivers).
        ++stats_.waits;
        const std::uint64_t hi = hi_;
        window_cv_.wait(lock, [&] { return stopped_ || hi_ != hi; });
        continue;
      }
      to_overflow(lock, call, offset, data);
      return;
    }
  }

  // Consumer: waits until chunk k (in the window) is complete. False when the pipeline stopped,
  // or the producer ended without delivering it (then the error is recorded).
  bool wait_complete(std::uint64_t k) {
    const unsigned s = static_cast<unsigned>(k % p_.buffers);
    std::unique_lock lock(mutex_);
    waiting_for_ = k;
    consumer_cv_.wait(lock, [&] { return stopped_ || arrived_[s] == chunk_size(k) || producer_done_; });
    if (stopped_) return false;
    if (arrived_[s] == chunk_size(k)) return true;
    lock.unlock();
    fail(std::make_exception_ptr(Error(
             ErrorCode::truncated, "", "data",
             "expected " + std::to_string(size_) + " bytes of data, but the stream ended after " +
                 std::to_string(delivered_))),
         k);
    return false;
  }

  // Consumer: gives the next chunk (hi_) the buffer just released, and copies its bytes from
  // the overflow.
  void advance() {
    std::unique_lock lock(mutex_);
    const std::uint64_t k = hi_++;
    const unsigned s = static_cast<unsigned>(k % p_.buffers);
    arrived_[s] = 0;
    missing_ += chunk_size(k);
    std::vector<Part> parts;
    if (auto it = overflow_.find(k); it != overflow_.end()) {
      parts = std::move(it->second);
      overflow_.erase(it);
    }
    // Counted as arrived before they are copied (by this thread, which alone consumes): a
    // chunk of the window lacks bytes only while some are still to be delivered, which the
    // overflow bound relies on.
    for (const Part& part : parts) {
      count_in(part.offset, part.size);
      drop(part);
    }
    window_cv_.notify_all();
    lock.unlock();
    for (const Part& part : parts) copy_in(part.offset, part.bytes());
  }

  void producer_done() {
    {
      std::lock_guard lock(mutex_);
      producer_done_ = true;
    }
    consumer_cv_.notify_all();
  }

  // The chunk the consumer waits for: producer errors are charged to it.
  std::uint64_t waiting_for() {
    std::lock_guard lock(mutex_);
    return waiting_for_;
  }

  // As Ring::fail: the error of the earliest chunk wins; everyone stops.
  void fail(std::exception_ptr error, std::uint64_t k) {
    {
      std::lock_guard lock(mutex_);
      failure_.record(std::move(error), k);
      stopped_ = true;
    }
    consumer_cv_.notify_all();
    window_cv_.notify_all();
  }
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopped_ = true;
    }
    consumer_cv_.notify_all();
    window_cv_.notify_all();
  }
  std::exception_ptr error() {
    std::lock_guard lock(mutex_);
    return failure_.error;
  }
  std::pair<std::exception_ptr, std::uint64_t> error_and_chunk() {
    std::lock_guard lock(mutex_);
    return {failure_.error, failure_.chunk};
  }
  StagingStats stats() {
    std::lock_guard lock(mutex_);
    return stats_;
  }

 private:
  // A copy of the bytes of a piece that lay beyond the window, shared by its parts.
  struct Held {
    std::vector<std::byte> bytes;
    std::size_t parts = 0;  // not yet copied into a buffer
  };
  // The part of a held piece inside one chunk.
  struct Part {
    std::shared_ptr<Held> held;
    std::uint64_t offset;  // payload offset of its first byte
    std::size_t from, size;  // where in held->bytes
    std::span<const std::byte> bytes() const { return {held->bytes.data() + from, size}; }
  };

  // A piece callback in progress: the bytes it has yet to count in, [offset, end).
  struct Call {
    std::uint64_t offset, end;
  };
  // Registers a call for its lifetime (under the lock: constructed and destroyed with it held).
  class CallRegistration {
   public:
    CallRegistration(std::vector<const Call*>& calls, const Call* call) : calls_(calls), call_(call) {
      calls_.push_back(call);
    }
    ~CallRegistration() { calls_.erase(std::find(calls_.begin(), calls_.end(), call_)); }
    CallRegistration(const CallRegistration&) = delete;
    CallRegistration& operator=(const CallRegistration&) = delete;

   private:
    std::vector<const Call*>& calls_;
    const Call* call_;
  };

  // Under the lock: the window's missing bytes that callbacks in progress hold, and so will copy
  // in without waiting on anything (a callback copies what is in the window before it waits).
  std::uint64_t covered() const {
    const std::uint64_t end = std::min(size_, hi_ * p_.chunk_bytes);
    std::uint64_t n = 0;
    for (const Call* c : calls_)
      if (c->offset < end) n += std::min(c->end, end) - c->offset;
    return n;
  }

  // Copies payload bytes [offset, offset + data.size()) into their chunks' buffers, which must
  // be in the window. Runs without the lock: nobody else writes these bytes, and the chunks
  // cannot be consumed before count_in.
  void copy_in(std::uint64_t offset, std::span<const std::byte> data) {
    while (!data.empty()) {
      const std::uint64_t k = offset / p_.chunk_bytes, within = offset - k * p_.chunk_bytes;
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(data.size(), p_.chunk_bytes - within));
      std::memcpy(buffers_[static_cast<unsigned>(k % p_.buffers)] + within, data.data(), n);
      offset += n;
      data = data.subspan(n);
    }
  }

  // Under the lock: `n` bytes at `offset` have been copied into their buffers.
  void count_in(std::uint64_t offset, std::uint64_t n) {
    delivered_ += n;
    missing_ -= n;
    while (n > 0) {
      const std::uint64_t k = offset / p_.chunk_bytes, within = offset - k * p_.chunk_bytes;
      const std::uint64_t part = std::min<std::uint64_t>(n, p_.chunk_bytes - within);
      std::uint64_t& arrived = arrived_[static_cast<unsigned>(k % p_.buffers)];
      arrived += part;
      if (arrived == chunk_size(k) && k == waiting_for_) consumer_cv_.notify_all();
      offset += part;
      n -= part;
    }
  }

  // Under the lock: one part of a held piece has been copied out.
  void drop(const Part& part) {
    if (--part.held->parts == 0) overflow_bytes_ -= part.held->bytes.size();
  }

  // Copies `data` (beyond the window, whose end may move while the lock is released) into the
  // overflow, one part per chunk; parts the window has reached meanwhile (a prefix) go to their
  // buffers. `call` then holds only those.
  void to_overflow(std::unique_lock<std::mutex>& lock, Call& call, std::uint64_t offset,
                   std::span<const std::byte> data) {
    lock.unlock();
    std::shared_ptr<Held> held;
    try {
      held = std::make_shared<Held>();
      held->bytes.assign(data.begin(), data.end());
    } catch (...) {
      lock.lock();  // the caller's registration is undone under the lock
      throw;
    }
    lock.lock();
    if (stopped_) throw PushStopped{};
    std::vector<Part> late;
    for (std::size_t from = 0; from < data.size();) {
      const std::uint64_t at = offset + from, k = at / p_.chunk_bytes;
      const std::size_t n = static_cast<std::size_t>(
          std::min<std::uint64_t>(data.size() - from, (k + 1) * p_.chunk_bytes - at));
      ++held->parts;
      Part part{held, at, from, n};
      if (k < hi_) late.push_back(std::move(part));
      else overflow_[k].push_back(std::move(part));
      from += n;
    }
    call.end = late.empty() ? call.offset : late.back().offset + late.back().size;
    overflow_bytes_ += held->bytes.size();
    ++stats_.overflow_pieces;
    stats_.overflow_peak_bytes = std::max(stats_.overflow_peak_bytes, overflow_bytes_);
    if (late.empty()) return;
    lock.unlock();
    for (const Part& part : late) copy_in(part.offset, part.bytes());
    lock.lock();
    for (const Part& part : late) {
      count_in(part.offset, part.size);
      drop(part);
    }
    call.offset = call.end;
  }

  const Plan& p_;
  const std::uint64_t size_;
  const Buffers& buffers_;
  std::mutex mutex_;
  std::condition_variable consumer_cv_;  // a chunk completed, the producer ended, or stop
  std::condition_variable window_cv_;    // the window moved, or stop
  std::vector<std::uint64_t> arrived_;   // per slot: bytes of its chunk copied in
  std::uint64_t hi_;                     // chunks [0, hi_) have had a buffer
  std::uint64_t missing_;                // bytes of the window's chunks not yet counted in
  std::vector<const Call*> calls_;       // piece callbacks in progress
  std::uint64_t waiting_for_ = 0;
  std::uint64_t delivered_ = 0;          // bytes copied into buffers
  std::map<std::uint64_t, std::vector<Part>> overflow_;  // by chunk
  std::uint64_t overflow_bytes_ = 0;
  StagingStats stats_;
  bool producer_done_ = false;
  bool stopped_ = false;
  FirstError failure_;
};

// The producer thread, stopped and joined on every exit path.
class Producer {
 public:
  explicit Producer(PushRing& ring) : ring_(ring) {}
  ~Producer() { join(); }
  template <class F>
  void start(F&& body) {
    thread_ = std::thread(std::forward<F>(body));
  }
  void join() {
    if (!thread_.joinable()) return;
    ring_.stop();  // a no-op after a normal end: nobody is waiting then
    thread_.join();
  }

 private:
  PushRing& ring_;
  std::thread thread_;
};

}  // namespace

void stage(const PushSource& source, std::size_t element_size, StagingSink& sink,
           const StagingOptions& options) {
  const Plan p = plan(source, element_size, options, false);
  if (p.chunks == 0) return finish_empty(sink);
  std::optional<Buffers> buffers_storage;
  try {
    sink.begin(p.buffers, p.chunk_bytes);
    buffers_storage.emplace(sink, p.buffers, p.chunk_bytes);
  } catch (...) {
    std::rethrow_exception(with_context(std::current_exception(), source.name, source.base_offset, "sink"));
  }
  const Buffers& buffers = *buffers_storage;
  PushRing ring(p, source.size, buffers);
  // A buffer is released one chunk after it was consumed, so that the sink's work on it (a
  // device copy and kernel) overlaps the next chunk's; with one buffer, at once.
  const std::uint64_t lag = p.buffers > 1 ? 1 : 0;
  {
    Producer producer(ring);
    try {
      producer.start([&] {
        try {
          source.produce([&ring](std::uint64_t offset, std::span<const std::byte> data) {
            ring.deliver(offset, data);
          });
          ring.producer_done();
        } catch (const PushStopped&) {
          // stopped by an error recorded elsewhere
        } catch (...) {
          const std::uint64_t k = ring.waiting_for();
          ring.fail(with_context(std::current_exception(), source.name,
                                 source.base_offset + k * p.chunk_bytes, "read"),
                    k);
        }
      });
    } catch (...) {  // std::system_error: the thread could not be started
      ring.fail(with_context(std::current_exception(), source.name, source.base_offset, "read"), 0);
    }
    bool attached = false;
    std::uint64_t k = 0;
    try {
      sink.attach_thread();
      attached = true;
      for (; k < p.chunks && ring.wait_complete(k); ++k) {
        const unsigned slot = static_cast<unsigned>(k % p.buffers);
        sink.consume({k, k * p.chunk_bytes,
                      std::span<const std::byte>(buffers[slot], static_cast<std::size_t>(ring.chunk_size(k))),
                      slot});
        if (k >= lag && k - lag + p.buffers < p.chunks) {
          sink.release(static_cast<unsigned>((k - lag) % p.buffers));
          ring.advance();
        }
      }
    } catch (...) {
      ring.fail(with_context(std::current_exception(), source.name,
                             source.base_offset + k * p.chunk_bytes, "sink"),
                k);
    }
    producer.join();
    if (options.stats) *options.stats = ring.stats();
    if (const auto [error, chunk] = ring.error_and_chunk(); error) {
      sink.abandon();
      if (attached) sink.detach_thread();
      // A truncation found by the consumer is recorded without the file: add it here.
      std::rethrow_exception(with_context(error, source.name, source.base_offset + chunk * p.chunk_bytes, "read"));
    }
    try {
      sink.finish();
    } catch (...) {
      sink.abandon();
      if (attached) sink.detach_thread();
      std::rethrow_exception(with_context(std::current_exception(), source.name, source.base_offset, "sink"));
    }
    if (attached) sink.detach_thread();
  }
}

HostConvertSink::HostConvertSink(const ElementOp& op, std::span<std::byte> dst) : op_(op), dst_(dst) {
  if (const char* why = element_op_problem(op))
    throw Error(ErrorCode::invalid_argument, "", "conversion", why);
}

std::byte* HostConvertSink::allocate_buffer(std::size_t bytes) {
  return static_cast<std::byte*>(::operator new(bytes, kBufferAlignment));
}

void HostConvertSink::free_buffer(std::byte* p) noexcept { ::operator delete(p, kBufferAlignment); }

void HostConvertSink::consume(const StagedChunk& chunk) {
  const std::size_t in_size = element::size_of(op_.source), out_size = element::size_of(op_.dest);
  const std::uint64_t first = chunk.offset / in_size, count = chunk.data.size() / in_size;
  if ((first + count) * out_size > dst_.size())
    throw Error(ErrorCode::invalid_argument, "", "output",
                "expected room for " + std::to_string(first + count) + " elements, but it holds " +
                    std::to_string(dst_.size() / out_size));
  convert_elements(op_, reinterpret_cast<const unsigned char*>(chunk.data.data()),
                   reinterpret_cast<unsigned char*>(dst_.data() + first * out_size), 0, count);
}

}  // namespace voxpipe::cuda
