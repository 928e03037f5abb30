// The staging pipeline: the default way voxel bytes reach the GPU (research/gpu.md 6.2). Reader
// threads fill a ring of M fixed-size staging buffers with consecutive chunks of a payload
// (pread through core::InputFile, or a producer callback such as an inflater), while the
// calling thread hands filled buffers, in order, to a sink; a buffer is refilled only after the
// sink says it is done with it. The sink decides what "done" means: the host sink converts on
// the CPU and is done at once; the device sink (device_sink.hpp) starts an asynchronous copy and
// conversion kernel and is done when the CUDA event recorded after them has completed.
//
// Memory: M buffers of chunk_bytes (plus what the sink holds), whatever the payload size; a push
// source (PushSource below) adds an overflow bounded by how far ahead its producer delivers.
// Internal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "core/file.hpp"
#include "cuda/convert_element.hpp"
#include "cuda/cufile.hpp"

namespace voxpipe::cuda {

// What a push pipeline measured (stage(PushSource) fills it when StagingOptions::stats is set).
struct StagingStats {
  std::uint64_t overflow_peak_bytes = 0;  // the most bytes held in the overflow at once
  std::uint64_t overflow_pieces = 0;      // pieces (or their tails) that went to the overflow
  std::uint64_t waits = 0;                // piece callbacks that waited for the window to move
  // Set by load_nifti_to_device: the path the bytes took ("pread", "cufile", "gzip push",
  // "gzip chunks"), and for uncompressed data why cuFile was or was not used.
  std::string route{};
  std::string cufile_reason{};
};

struct StagingOptions {
  // Bytes per staging buffer, rounded down to whole elements (at least one element).
  std::size_t chunk_bytes = std::size_t(8) << 20;
  unsigned buffers = 8;  // M, the ring size (>= 1)
  unsigned readers = 4;  // reader threads (>= 1; 1 for a source that is not concurrent)
  // Threads a push source's producer decodes on (load.cpp passes it to ByteSource::read_range),
  // as the public call resolved them (read_nifti_data_to_device: resolve_threads); 0 is taken
  // as 1. stage() itself does not use it.
  unsigned decode_threads = 0;
  StagingStats* stats = nullptr;  // when set, a push pipeline writes its measurements here
  // For load_nifti_to_device's uncompressed data: whether to read through cuFile (unset:
  // $VOXPIPE_CUFILE), and which cuFile (null: the process's, process_cufile). stage() does not
  // use them.
  std::optional<CufilePolicy> cufile_policy{};
  const CufileDriver* cufile = nullptr;
};

// Where the payload bytes come from. Offsets passed to `fill` are relative to the payload.
struct ChunkSource {
  std::string name;               // names the file in errors
  std::uint64_t base_offset = 0;  // offset of payload byte 0 in the file, for error messages
  std::uint64_t size = 0;         // payload bytes
  // True when `fill` may run on several threads at once (for disjoint ranges). A sequential
  // producer (a decompressor) sets false: it is then called from one thread, offsets ascending.
  bool concurrent = true;
  // Fills all of `dst` with payload bytes [offset, offset + dst.size()), or throws.
  std::function<void(std::uint64_t offset, std::span<std::byte> dst)> fill;
};

// A producer that pushes the payload instead of filling chunks on request: ByteSource::read_range
// (a parallel inflater) delivers pieces from pool threads, concurrently, in any order.
struct PushSource {
  std::string name;               // names the file in errors
  std::uint64_t base_offset = 0;  // offset of payload byte 0 in the file, for error messages
  std::uint64_t size = 0;         // payload bytes
  // Delivers every payload byte [0, size) to `deliver` exactly once, in pieces of any size, from
  // any threads, concurrently for disjoint ranges, in any order (the ByteSink contract, offsets
  // relative to the payload), and returns once all are delivered. Returning with bytes missing
  // means the data ended early: Error(truncated). `deliver` may block (back-pressure) and may
  // throw to stop the producer; the producer must then stop and let the exception out, after
  // its own threads have finished (read_range does both).
  std::function<void(const core::ByteSink& deliver)> produce;
};

// pread of bytes [payload_offset, payload_offset + payload_bytes) of `file` (or the same read from
// other stored bytes), which must outlive the source. A file that ends early gives
// Error(truncated) naming the file and the offset.
ChunkSource file_chunk_source(const core::RandomAccessInput& file, std::uint64_t payload_offset,
                              std::uint64_t payload_bytes);

// One filled buffer handed to the sink.
struct StagedChunk {
  std::uint64_t index = 0;   // 0, 1, 2, ... in payload order
  std::uint64_t offset = 0;  // payload offset of data[0]; a multiple of the element size
  std::span<const std::byte> data;
  unsigned slot = 0;         // the ring buffer holding it, in [0, M)
};

// The consumer end of the pipeline. stage() calls, in this order: begin; allocate_buffer (M
// times); then concurrently attach_thread/detach_thread on each reader thread, release on reader
// threads, and consume on the calling thread (a push source: consume and release both on the
// calling thread, no reader threads); then, still on the calling thread, finish, or abandon
// after an error; then free_buffer (M times). The calling thread's consume and finish
// or abandon run inside its own attach_thread/detach_thread pair (an empty payload: begin, then
// finish inside that pair, nothing else).
class StagingSink {
 public:
  virtual ~StagingSink() = default;
  // Sets up per-slot resources for `slots` buffers of up to `chunk_bytes`.
  virtual void begin(unsigned slots, std::size_t chunk_bytes) = 0;
  // Staging memory: pinned host memory for a device sink, aligned host memory otherwise.
  virtual std::byte* allocate_buffer(std::size_t bytes) = 0;
  virtual void free_buffer(std::byte* p) noexcept = 0;
  // Per-thread setup (a device sink makes its context current) and its undoing.
  virtual void attach_thread() {}
  virtual void detach_thread() noexcept {}
  // Consumes a chunk, in index order. The bytes stay valid until release(chunk.slot) returns,
  // so the sink may read them asynchronously.
  virtual void consume(const StagedChunk& chunk) = 0;
  // Blocks until the work consume() started on `slot` no longer reads its buffer.
  virtual void release(unsigned slot) = 0;
  // Blocks until all work is complete (the output is ready); throws on failure.
  virtual void finish() = 0;
  // After an error: waits for any work in flight to stop touching the buffers; never throws.
  virtual void abandon() noexcept = 0;
};

// Streams `source` through `sink`. Chunks are cut at multiples of `element_size` (whole
// elements, hence whole byte-swap units); source.size must be a multiple of it. Returns when
// the sink has finished. On any failure (the source throws or ends early, the sink throws) the
// pipeline stops, every thread is joined, the sink is abandoned and the buffers freed, and the
// first error is rethrown as voxpipe::Error naming source.name and the file offset of the chunk
// (std::bad_alloc stays std::bad_alloc). Throws Error(invalid_argument) for bad options.
void stage(const ChunkSource& source, std::size_t element_size, StagingSink& sink,
           const StagingOptions& options = {});

// The same for a push source: source.produce runs on a thread of its own while the calling
// thread hands chunks to the sink (and releases them). Each piece is copied into the ring
// buffer(s) of the chunk(s) it falls in; a chunk goes to the sink, in index order, once all its
// bytes have arrived, and a buffer takes its next chunk after sink.release. A piece for a chunk
// beyond the ring's window (whose buffer still holds an earlier chunk) waits only while every
// byte the window lacks is already in a piece being delivered, so the window moves without any
// further producer work; otherwise its bytes go to an overflow that the calling thread copies
// into buffers as they come free, and the callback returns. No producer thread is thus held
// while the window needs work the producer has not done yet, whatever its threads wait on
// among themselves: no deadlock. The overflow holds at most the producer's reordering distance
// D (when it starts a piece ending at e, all bytes before e - D are delivered or being
// delivered) plus one piece, however slow the sink (staging.cpp gives both arguments).
// options.decode_threads is not used here (it is the producer's). Errors as stage() above, the
// offset being that of the first incomplete chunk; a producer that returns with bytes missing
// gives Error(truncated).
void stage(const PushSource& source, std::size_t element_size, StagingSink& sink,
           const StagingOptions& options = {});

// A sink converting on the CPU with the shared element function: chunk elements go to their
// place in `dst`, which holds (source.size / element size) elements of op.dest. Used where the
// output is host memory, and in CI to test the pipeline without a GPU.
class HostConvertSink final : public StagingSink {
 public:
  // `op` must pass element_op_problem; `dst` must outlive the sink.
  HostConvertSink(const ElementOp& op, std::span<std::byte> dst);
  void begin(unsigned, std::size_t) override {}
  std::byte* allocate_buffer(std::size_t bytes) override;
  void free_buffer(std::byte* p) noexcept override;
  void consume(const StagedChunk& chunk) override;
  void release(unsigned) override {}
  void finish() override {}
  void abandon() noexcept override {}

 private:
  ElementOp op_;
  std::span<std::byte> dst_;
};

}  // namespace voxpipe::cuda
