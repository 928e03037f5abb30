// Parallel decompression of any gzip file, without an index: the compressed file is cut into
// chunks, a block start is searched for in each chunk, and chunks are decoded speculatively on
// all threads (after rapidgzip: Knespel & Brunst, HPDC'23). A chunk decoded before the bytes that
// precede it are known writes 16-bit symbols in which "markers" stand for its unknown 32 KiB
// window, until its own output has pushed every marker out of the window; from there it
// continues with ISA-L (or our decoder without ISA-L). In file order, each chunk is accepted once
// its predecessor is seen to end a block exactly where the chunk starts; its markers are then
// replaced from the predecessor's last 32 KiB, and its bytes delivered. A false block start, or a
// chunk that outgrows its memory cap, is decoded sequentially from the known position instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/file.hpp"
#include "gz/stream.hpp"

namespace voxpipe::gz {

// Where a parallel inflate's time went, by kind of chunk (for benchmarks: bench/chunk_cost.cpp).
// Seconds are wall-clock time on the thread that did the work, summed over threads. A chunk's
// cost per byte of output is comparable across kinds: both kinds include delivering the bytes
// (the sink's time, CRC32), a speculative one in finalize_seconds, a known one in known_seconds.
struct ParallelInflateStats {
  // Speculative chunks whose output was delivered.
  std::uint64_t speculative_chunks = 0;
  std::uint64_t speculative_bytes = 0;  // their output
  std::uint64_t marker_bytes = 0;       // of which decoded in marker mode (16-bit symbols)
  double marker_seconds = 0;            // decoding those (block search excluded)
  double speculate_seconds = 0;         // the whole speculative decode (marker mode, then ISA-L)
  double finalize_seconds = 0;          // markers replaced, bytes delivered to the sink, CRC32
  // Every speculative decode, including those of no use (a false block start, a chunk over its
  // cap, one the frontier passed before it was done).
  std::uint64_t speculated_chunks = 0;
  double speculated_seconds = 0;
  // Output the resolver decoded itself, with the known window, sink included: `known_runs`
  // runs that crossed `known_chunks` chunk starts (a run ends where a chunk it can join begins).
  std::uint64_t known_runs = 0;
  std::uint64_t known_chunks = 0;
  std::uint64_t known_bytes = 0;
  double known_seconds = 0;
  // Memory: speculative decoders (each with its buffer of 16-bit symbols) and output pieces
  // made afresh and handed out again within the call, and the bytes of decoder buffers given
  // back to the kernel where a chunk used much less of its buffer than an earlier one.
  std::uint64_t decoders_made = 0;
  std::uint64_t decoders_reused = 0;
  std::uint64_t pieces_made = 0;
  std::uint64_t pieces_reused = 0;
  std::uint64_t trimmed_bytes = 0;
};

struct ParallelInflateOptions {
  unsigned threads = 1;  // as resolved by the public call (voxpipe/threads.hpp); 0 is taken as 1
  // Compressed bytes per chunk. 8 MiB, measured at 2 threads against single-thread ISA-L
  // (2 cores): bold_4d.nii.gz (171 MB, gzip -6) 1 MiB 0.82x, 2 MiB 0.95x, 4 MiB 1.25-1.35x,
  // 8 MiB 1.38-1.44x, 16 MiB 1.48x; its zlib level-1 copy 4 MiB 1.09x, 8 MiB 1.31x, 16 MiB
  // 1.47x; t1_3d.nii.gz (12 MB) 4 MiB 1.18x, 8 MiB 1.10x. Every speculative chunk decodes in
  // marker mode until its window is clean (often for most of the chunk on fMRI data), so larger
  // chunks win until too few remain to share out. Measured when marker mode was ~3x slower than
  // ISA-L. Again with today's decoder (1.25-1.35x ISA-L's time, bench/decoder_cost.cpp), as a
  // 2-thread read's wall time and a speculative chunk's cost per byte against a known one
  // (bench/chunk_cost.cpp, medians of 3): gzip -6 4 MiB 0.366 s 1.26x, 8 MiB 0.353 s 1.16x,
  // 16 MiB 0.344 s 1.16x; level 1 4 MiB 0.427 s 1.51x, 8 MiB 0.404 s 1.32x, 16 MiB 0.390 s
  // 1.25x. 16 MiB would buy 3% for 23-54 MB more peak memory (level 1: 61 MB -> 116 MB in all).
  std::size_t chunk_size = 8 << 20;
  // Delivery may stop once every byte < stop_after was delivered and more output follows it.
  // Every member inflated to its end is checked: a read whose stop_after is where a member ends
  // (a whole image) runs on through that member's trailer and what follows it. Only the member
  // left unfinished by a stop goes unchecked.
  std::uint64_t stop_after = UINT64_MAX;
  // Decompressed size limit: Error(limit) beyond it.
  std::uint64_t max_output = UINT64_MAX;
  // When set: filled, sorted by `uncompressed`, with a point at each chunk start and at every
  // member start.
  std::vector<SeekPoint>* seek_points = nullptr;
  // Desired uncompressed spacing of seek points. Best effort: points are placed where chunks
  // start, so the spacing follows chunk_size times the compression ratio.
  std::uint64_t seek_spacing = 4 << 20;
  // When set: filled when the call returns (its figures replace what it held). Null: no clock
  // is read.
  ParallelInflateStats* stats = nullptr;
};

// Decompresses the gzip file (all members; zero padding after the last member is accepted, as
// GzipByteSource does) and delivers every byte to `sink`, from pool threads, concurrently, for
// disjoint ranges, each byte once. Returns the uncompressed size (with stop_after: the bytes
// delivered, at least min(stop_after, size)).
// Throws voxpipe::Error: format (no gzip magic at the start), corrupt (bad deflate data, CRC32 or
// ISIZE mismatch, data after a member that is neither padding nor a member), truncated (the file
// ends inside a member), limit (more than max_output bytes); an exception from the sink is
// rethrown. Bytes may have reached the sink before an error is thrown.
// Memory: at most 2 x threads chunks in flight, each capped at 16 x chunk_size of output (a
// chunk that inflates to more, such as a mask, is decoded sequentially instead), plus 32 KiB
// windows and I/O buffers; never proportional to the file size. The chunks' buffers are
// recycled from chunk to chunk within the call (fresh memory costs a page fault per page) and
// freed as the work left shrinks, so that the call ends holding none of them.
std::uint64_t inflate_parallel(const core::RandomAccessInput& file, const Sink& sink,
                               const ParallelInflateOptions& options);

}  // namespace voxpipe::gz
