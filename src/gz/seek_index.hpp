// Seek index for gzip files: where inflation can resume (deflate block starts with the 32 KiB
// of output before them), stored in the GZIDX format of indexed_gzip and rapidgzip, so that any
// byte range of a .nii.gz can be decompressed by inflating only from the nearest point, and in
// parallel between points.
//
// Where an index file lives and how staleness is detected
// -------------------------------------------------------
// An index is only valid for the exact bytes it was built from. GZIDX records the compressed size
// but nothing else about the file, and a re-compressed file often has the same size. So voxpipe
// appends a trailer after the windows of the GZIDX files it writes (little-endian):
//
//   version 1 (read): "VPKEY" | 1 u8 | file size u64 | mtime ns i64 | CRC32 of the file's last
//           64 KiB u32 | CRC32 of every byte of the index file before this field u32
//   version 2 (written): "VPKEY" | 2 u8 | the same key | window count u32 | CRC32 of each window
//           u32... | head length u32 | a copy of the GZIDX header and point table | trailer
//           length u32 | CRC32 of the trailer before this field u32   (index_file.cpp)
//
// Both indexed_gzip (1.10.3, zran_import_index) and rapidgzip (0.16.2, indexed_gzip::readGzipIndex
// in IndexFileFormat.hpp) read the header, the points and the windows and ignore what follows, so
// the trailer keeps the file interoperable (tests/python/test_gzidx_interop.py checks this).
// Version 1's CRC covers the whole index, so it is checked by reading every window. Version 2
// is a table of contents checked on its own (key, points, and each window's CRC32), found from
// the end of the file: an index object is read by ranges (read_gzidx_toc) as its end, then
// only the windows a read decodes from, each checked against its CRC32 before use.
//
// Loading rules:
//  * find_index() (automatic: sidecar, then cache) returns an index only when it has a trailer
//    whose key matches the file now (size, mtime and tail CRC) and whose CRC is right. An index
//    without a trailer (written by indexed_gzip or rapidgzip) is never picked up automatically:
//    its size alone cannot tell a re-compressed file of the same size from the original.
//  * load_index() (the caller names the index file) accepts a trailer-less index when its
//    recorded compressed size equals the file size; one with a trailer must match the key.
//
// Thread-safety: all functions are safe to call concurrently on distinct outputs; a SeekIndex is
// immutable after construction and may be shared by concurrent inflate_range calls.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/file.hpp"
#include "gz/known_window.hpp"
#include "gz/stream.hpp"
#include "voxpipe/gzip.hpp"

namespace voxpipe::gz {

struct SeekIndex {
  std::uint64_t compressed_size = 0;    // of the gzip file
  std::uint64_t uncompressed_size = 0;  // total, members concatenated
  std::uint32_t spacing = 0;            // requested spacing, as recorded in GZIDX
  // Sorted by `uncompressed` (and strictly by `compressed_bit`); the first is at the first
  // deflate block of the file. Every member's first block has a point with an empty window when
  // the index was built by voxpipe or indexed_gzip; rapidgzip omits them, which inflate_range
  // handles (it crosses member boundaries). A window read from GZIDX holds the last
  // min(32 KiB, uncompressed) bytes, which may reach back into the previous member.
  std::vector<SeekPoint> points;
  // The index file (or object) the windows were left in (read_gzidx_file, read_gzidx_toc); null
  // for built indexes.
  std::shared_ptr<const core::RandomAccessInput> window_file;
  // Read from a version-2 trailer: the size of a stored window (32 KiB) and, per point, the
  // CRC32 of its stored window (0 for points without one). window_slot 0: no window checksums
  // (built indexes; version 1, whose CRC was checked over the whole file when read).
  std::uint32_t window_slot = 0;
  std::vector<std::uint32_t> window_crcs;

  // The window of `p` (a point of this index): p.window, or its bytes read from window_file
  // into `scratch`, checked against its CRC32 when the index lists one. Error(io) when the index
  // file has become shorter since it was read; Error(corrupt) naming the index, the point and
  // the window's offset when its bytes do not have their CRC32 (never a wrong window); the
  // errors of window_file's reads (an object that changed, a failed request).
  std::span<const std::uint8_t> window_of(const SeekPoint& p,
                                          std::vector<std::uint8_t>& scratch) const;
  // The bytes of window_file that window_of(p) reads; nullopt when it reads none.
  std::optional<ByteRange> window_range(const SeekPoint& p) const;
};

// The staleness key of a gzip file.
struct IndexKey {
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::uint32_t tail_crc = 0;  // CRC32 of the file's last 64 KiB (or the whole file if smaller)
  bool operator==(const IndexKey&) const = default;
};

// --- GZIDX format (index_file.cpp) ---------------------------------------------------------

// Parses a GZIDX file (versions 0 and 1). `name_for_errors` names the index in messages.
// Validates everything before allocating: magic, version, window size (>= 32 KiB, <= 1 MiB; only
// the last 32 KiB are kept), that the points and windows fit in `bytes`, point order (compressed
// strictly and uncompressed non-decreasingly increasing), bit field < 8, offsets within the
// recorded sizes, and the trailer if any bytes follow the windows (anything there other than a
// well-formed trailer is an error). Points at the end of the stream (nothing can be inflated
// from them; both tools write one) are dropped. Throws Error(format) or Error(truncated).
SeekIndex read_gzidx(std::span<const std::uint8_t> bytes, const std::string& name_for_errors);

// As read_gzidx, also returning the trailer's key (nullopt when the index has no trailer).
SeekIndex read_gzidx(std::span<const std::uint8_t> bytes, const std::string& name_for_errors,
                     std::optional<IndexKey>* key);

// Reads and parses an index file without reading its windows into memory: each point records
// where its window lies, and the index keeps the file open (window_file) to read the ones a
// decode needs. The trailer's CRC32 is still checked over the whole file. Loading a 300-point
// index this way costs a few page faults instead of ~5,000 (two copies of 10 MB), which was
// most of the time to read one volume through it. Error(not_found / io) when it cannot be read.
SeekIndex read_gzidx_file(const std::string& path, std::optional<IndexKey>* key = nullptr);

// Reads the index stored in `input` (an object read by ranges) from its version-2 trailer: the
// last 8 bytes, then the trailer (its table of contents: key, points, window CRC32s), checked by
// its CRC32 and every length against the header it holds; no other byte is read until a window
// is needed (window_of, through `input`, which the index keeps). Memory: the trailer, at most
// 64 MiB whatever the input claims. Error(format) for an index without a version-2 trailer
// (version 1, indexed_gzip's, rapidgzip's: read them whole), Error(corrupt) for a damaged
// trailer, Error(truncated) for one too short; each names the input, the field and the offset.
SeekIndex read_gzidx_toc(std::shared_ptr<const core::RandomAccessInput> input,
                         std::optional<IndexKey>* key = nullptr);

// Encodes GZIDX version 1: a window (zero-padded at the front to 32 KiB) for every point with a
// non-empty window, data flag 0 and no window bytes for points with an empty one (member starts),
// then an end point at (compressed_size, uncompressed_size) without a window, as rapidgzip
// writes, then the trailer (version 2) when `key` is given. Error(invalid_argument) if the
// index breaks the SeekIndex invariants or has more than 2^32 - 1 points, or its trailer would
// exceed 64 MiB (3.7 million points).
std::vector<std::uint8_t> encode_gzidx(const SeekIndex& index,
                                       const std::optional<IndexKey>& key = std::nullopt);

// Writes encode_gzidx(index, key) atomically (temporary file + rename).
void write_gzidx_file(const std::string& path, const SeekIndex& index,
                      const std::optional<IndexKey>& key = std::nullopt);

// --- Building an index (seek_index_build.cpp) --------------------------------------------------

// Builds an index by inflating the whole file once (our decoder, which stops at every deflate
// block as zlib's Z_BLOCK does in zran.c, at about twice zlib's speed): a point at every
// member's first block (empty window); a point at the last block boundary at or before each
// offset in `wanted` (sorted ascending; offsets at or past the end are ignored); otherwise a
// point at the first block boundary at least `spacing` bytes of output after the previous point
// (spacing 0: no such points). Verifies every member's CRC32 and ISIZE. Zero bytes between
// members are skipped, as Python's gzip does; other data there is Error(corrupt). Throws
// Error(corrupt / truncated / format) naming the file and the compressed byte offset.
// Memory: an input buffer, the decoder's buffer (32 KiB and up to 2 MiB of output), an output
// buffer and 32 KiB windows, plus the points. A file our decoder rejects is inflated again with
// zlib (ExactBuildOptions::zlib_reference), whose error is thrown: the one a caller sees.
//
// With options.threads >= 2 the same index (the same points and windows, so the same GZIDX
// bytes) is built in parallel, in one of two ways. Members that announce their sizes ('VP',
// BGZF): spans start at member starts (from the headers), neighbours closer than half a chunk
// sharing a span; the spans are inflated on the threads (zlib, Z_BLOCK) to list every block
// boundary and the CRC32s of their output per member, and in stream order the CRC32s are chained
// against every member's trailer (MemberChecker) and the point rule above runs over the
// boundaries, which makes the points the sequential ones (the rule depends on the last point
// placed, so no span can place its own). A span keeps its output (in buffers recycled from span
// to span) until the spans before it are placed, so that its points' windows are cut from it,
// within a budget; the windows of points in spans past the budget are decoded again (ISA-L, in
// parallel) once the points are known. A file of fewer than four chunks is built sequentially.
// Any other file of two chunks or more: the one-pass build (seek_index_onepass.cpp). Each chunk
// is decoded ahead from a block start found in it (as inflate_parallel does: our decoder, in
// marker mode until the chunk's window is known not to matter, then plain), recording every
// block boundary; in stream order a chunk is accepted when its predecessor ends a block exactly
// where it starts (else it is decoded again from there, with the window known), its markers are
// resolved from the predecessor's last 32 KiB, its CRC32s chained, and its boundaries placed by
// the point rule with their windows cut from its output. One inflate of the data, shared out.
// When a parallel build meets bad data zlib's build runs instead, so a bad file fails with the
// error of the one-thread build (code, field, offset and message). Memory: for sized members the
// budget plus an input and an output buffer per thread; for the one-pass build at most
// 2 x threads chunks in flight, each capped at 16 x chunk_size of output (a chunk that inflates
// to more is decoded from the frontier, streaming), in 4 MiB pieces recycled through the
// process's buffer pool. Cost on 2 cores: see docs/gzip.md.
struct ExactBuildOptions {
  unsigned threads = 1;            // 0 is taken as 1
  std::size_t chunk_size = 0;      // compressed bytes per chunk; 0: inflate_parallel's (8 MiB)
  // Bytes of sized members' span output kept; 0: max(256 MiB, 48 MiB x threads).
  std::uint64_t keep_budget = 0;
  // When set, told how far the build is: `done` of `total` (the file size). The sequential build
  // reports the compressed bytes it has read; the parallel ones the compressed end of what they
  // have placed (the last span or chunk, or block boundary of a chunk decoded at the frontier;
  // the windows decoded again, if any, are not counted). Called one call at a time from the
  // building threads, `done` increasing (also across a fall back to the sequential build), and
  // (total, total) last, only once the index is complete. An exception it throws stops the
  // build and is rethrown.
  std::function<void(std::uint64_t done, std::uint64_t total)> progress;
  // For tests: the one-pass build decodes every chunk ahead before the frontier reaches it (on
  // whichever thread is free, the frontier's own included), so that chunks are accepted however
  // the threads are scheduled, rather than decoded at the frontier when it gets there first.
  bool decode_ahead_first = false;
  // For tests: the build with zlib's inflate front to back (Z_BLOCK), whatever the threads: the
  // reference the other builds must equal byte for byte, and the build that reports bad data.
  bool zlib_reference = false;
  // When set, told how the index was built (for tests and benchmarks).
  struct Stats {
    bool parallel = false;            // false: sequentially
    std::size_t spans = 0;            // decoded in parallel (spans, or chunks and frontier runs)
    std::size_t redecoded_windows = 0;  // windows decoded again (spans past the budget)
    std::size_t accepted = 0;         // one-pass build: chunks decoded ahead and accepted
    bool zlib_fallback = false;       // zlib's build ran after the others met bad data
  }* stats = nullptr;
};
SeekIndex build_seek_index(const core::RandomAccessInput& file, std::uint64_t spacing,
                           std::span<const std::uint64_t> wanted = {},
                           const ExactBuildOptions& options = {});

// --- Using an index (seek_index.cpp) -----------------------------------------------------------

// Delivers the uncompressed bytes [begin, end) of `file` to `sink`. Decoding starts at the last
// point <= begin (raw inflate from the point's bit with its window as the dictionary: the zran.c
// method, with ISA-L, through the parallel engine's known-window run) and crosses member
// boundaries. Integrity: the CRC32s of the runs are chained (crc32_combine), so every member
// the read covers from its first byte to its end has its CRC32 and ISIZE checked, however many
// runs and threads inflated it; a read that ends where a member ends runs on through the
// trailer. When the last point <= begin is not a member's first, decoding starts at the
// member's first point instead if that costs at most 1 MiB and an eighth of the range more (a
// whole image after its header). A member entered at a point inside it cannot be checked (its checksum covers bytes
// before the point), nor can a read that stops before its member's end. With threads != 1 and
// several points inside the range, the spans between consecutive points are decoded in parallel
// with core::parallel_for (threads 0 is taken as 1), grouped into at most 4 x threads tasks of
// similar output size, each inflating through the points inside it; the sink is then called
// concurrently for disjoint ranges. Error(invalid_argument) when the index does not belong to a file of this size
// or the range exceeds index.uncompressed_size; Error(corrupt / truncated) on bad data, naming
// the file and compressed byte offset.
void inflate_range(const core::RandomAccessInput& file, const SeekIndex& index, std::uint64_t begin,
                   std::uint64_t end, unsigned threads, const Sink& sink);

// The index in index.points of the point inflate_range(begin, end) decodes from: the last point
// at or before `begin`, or the first point of its member when that is close enough to check the
// member (above). Error(invalid_argument) naming `path` when no point is at offset 0.
std::size_t start_point(const SeekIndex& index, std::uint64_t begin, std::uint64_t end,
                        const std::string& path);

// The member checks of consecutive inflate_range calls (a range read in pieces cut at seek
// points, as the device path does): a call that starts at the point where the last one ended
// continues its CRC32 chain, so the member is checked as if read in one call.
struct RangeChain {
  std::uint64_t end = UINT64_MAX;  // where the last range ended; UINT64_MAX: no chain
  std::optional<inflate_detail::MemberChecker> checker;
};
void inflate_range(const core::RandomAccessInput& file, const SeekIndex& index, std::uint64_t begin,
                   std::uint64_t end, unsigned threads, const Sink& sink, RangeChain& chain);

// --- Staleness and locations (seek_index.cpp) ---------------------------------------------------

// The key of the file as it is now. Error(not_found / io).
IndexKey index_key(const std::string& gz_path);

// The key of stored bytes that are not a file (an object read by ranges): size and tail CRC,
// mtime_ns 0 (an object has no modification time an index built elsewhere could record).
IndexKey input_key(const core::RandomAccessInput& input);

// gz_path + ".gzidx".
std::string sidecar_path(const std::string& gz_path);

// <dir>/<file name>-<16 hex digits of a 64-bit FNV-1a hash of the absolute, normalised path>
// .gzidx, where <dir> is $VOXPIPE_CACHE_DIR, else $XDG_CACHE_HOME/voxpipe, else
// $HOME/.cache/voxpipe. Does not touch the file system beyond resolving the absolute path.
std::string cache_path(const std::string& gz_path);

// The index from the sidecar, else from the cache, that carries a trailer matching
// index_key(gz_path) and is otherwise valid; nullopt when there is none (missing, stale,
// damaged or trailer-less index files are skipped, never returned). Error(not_found / io) only
// when gz_path itself cannot be read.
std::optional<SeekIndex> find_index(const std::string& gz_path);

// Reads the index file the caller names for gz_path. With a trailer: its key must equal
// index_key(gz_path). Without one: its compressed size must equal the file's size. Otherwise
// Error(invalid_argument) "stale index". Parse errors as read_gzidx.
SeekIndex load_index(const std::string& gz_path, const std::string& index_path);

// load_index for stored bytes that are not a file (an object read by ranges, whose index a
// caller fetched or found in a cache): a trailer's size and tail CRC must equal input_key's (its
// mtime is not compared: the object's own cannot be); without one, the compressed size must
// equal the input's size. Reads the input's last 64 KiB.
SeekIndex load_index(const core::RandomAccessInput& input, const std::string& index_path);

// load_index for an object whose index is read by ranges from another object (`index_input`,
// its sidecar, pinned to its own version): read_gzidx_toc, which must find a key, then the
// checks above. The input's last 64 KiB are read ahead first, so that they arrive while the
// index's table of contents does.
SeekIndex load_index(const core::RandomAccessInput& input,
                     std::shared_ptr<const core::RandomAccessInput> index_input);

// Writes `index` with the key of gz_path as it is now: next to the file (sidecar_path) when
// `sidecar`, else to cache_path (creating the directory). Atomic. Error(io) on failure;
// Error(invalid_argument) when the index's compressed size differs from the file's size.
void save_index(const std::string& gz_path, const SeekIndex& index, bool sidecar);

// --- The public builder's parts (gzip_api.cpp) -------------------------------------------------

// build_gzip_index's pass over any input (voxpipe/gzip.hpp: exact or from a parallel inflate,
// `progress` reported); writes nothing.
SeekIndex build_index(const core::RandomAccessInput& input, const GzipIndexOptions& options);

// The summary build_gzip_index returns for `index` written to `index_path`.
GzipIndexSummary index_summary(const SeekIndex& index, const std::string& index_path);

}  // namespace voxpipe::gz
