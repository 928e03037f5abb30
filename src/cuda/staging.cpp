#include "cuda/staging.hpp"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <new>
#include <optional>
#include <thread>
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

  // Records the error of chunk k and stops everyone. Of several errors the one of the
  // earliest chunk is kept, so that the error reported does not depend on thread timing
  // (a short file fails the chunk that crosses its end, not whichever read came later).
  void fail(std::exception_ptr error, std::uint64_t k) {
    {
      std::lock_guard lock(mutex_);
      if (!error_ || k < error_chunk_) {
        error_ = std::move(error);
        error_chunk_ = k;
      }
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
    return error_;
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
  std::exception_ptr error_;
  std::uint64_t error_chunk_ = 0;
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

Plan plan(const ChunkSource& source, std::size_t element_size, const StagingOptions& o) {
  const auto bad = [&](const std::string& what) {
    return Error(ErrorCode::invalid_argument, source.name, "staging", what);
  };
  if (element_size == 0) throw bad("the element size is 0");
  if (source.size % element_size != 0)
    throw bad("expected a payload of whole " + std::to_string(element_size) +
              "-byte elements, but it has " + std::to_string(source.size) + " bytes");
  if (o.buffers == 0 || o.readers == 0) throw bad("the ring needs at least one buffer and one reader");
  if (!source.fill) throw bad("the source has no fill function");
  Plan p;
  p.chunk_bytes = std::max(o.chunk_bytes / element_size, std::size_t(1)) * element_size;
  p.chunks = (source.size + p.chunk_bytes - 1) / p.chunk_bytes;
  if (p.chunks < 2 && source.size) p.chunk_bytes = static_cast<std::size_t>(source.size);
  p.buffers = static_cast<unsigned>(std::min<std::uint64_t>(o.buffers, std::max<std::uint64_t>(p.chunks, 1)));
  p.readers = source.concurrent ? static_cast<unsigned>(std::min<std::uint64_t>(o.readers, p.buffers)) : 1;
  return p;
}

}  // namespace

ChunkSource file_chunk_source(const core::InputFile& file, std::uint64_t payload_offset,
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
  const Plan p = plan(source, element_size, options);
  if (p.chunks == 0) {  // nothing to move; the sink may still have an output to finish
    sink.begin(0, 0);
    sink.attach_thread();
    try {
      sink.finish();
    } catch (...) {
      sink.detach_thread();
      throw;
    }
    sink.detach_thread();
    return;
  }
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
