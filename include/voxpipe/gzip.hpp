// gzip output layouts: how voxpipe writes .nii.gz.
#pragma once

namespace voxpipe {

enum class GzipLayout {
  // Independent members of 1 MiB, each announcing its compressed and uncompressed size in an
  // RFC 1952 extra field ('VP'): any gzip reader reads the file; voxpipe reads it in parallel
  // and at random without an index. The default.
  members,
  // BGZF (SAMv1 section 4.1): 64 KiB blocks with 'BC' sizes and an end marker, as htslib's
  // bgzip writes; voxpipe reads these in parallel too.
  bgzf,
  // One member, byte-identical to what Python's gzip module (and so nibabel) writes at the same
  // level. Read sequentially unless an index is built for it.
  single,
};

}  // namespace voxpipe

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace voxpipe {

// Seek indexes for gzip files that are one member (as nibabel, FSL and dcm2niix write them): the
// places where inflation can resume, so that any part of the file is read by inflating only from
// the nearest one. Stored in the GZIDX format of indexed_gzip and rapidgzip (each tool uses the
// others' indexes), with a trailer that ties the index to the exact file (size, mtime and a
// CRC32 of its last 64 KiB): a changed file is never read through a stale index.
struct GzipIndexOptions {
  // Uncompressed bytes between seek points (indexed_gzip's default); 0: only `wanted` offsets
  // and member starts.
  std::uint64_t spacing = 4u << 20;
  // Uncompressed offsets that should have a point at, or as close as possible before, them
  // (NIfTI volume starts).
  std::vector<std::uint64_t> wanted;
  // Where to write the index: a path; empty: FILE.gz.gzidx next to the file, or the user cache
  // directory ($VOXPIPE_CACHE_DIR, $XDG_CACHE_HOME/voxpipe or ~/.cache/voxpipe) when `to_cache`.
  std::string output;
  bool to_cache = false;
  // true: place every point exactly (the last block boundary at or before each wanted offset,
  // then one per `spacing`): the file is split into spans at member starts or at a parallel
  // inflate's chunk starts, the spans are inflated on `threads` threads, and the points are
  // placed in stream order, giving the same index as one front-to-back pass (which files under
  // 32 MiB compressed, and damaged ones, get). false: the index falls out of a parallel inflate
  // on `threads` threads at almost no cost over the inflate itself, with a point at each chunk
  // start (about every 8 MiB compressed); `wanted` is then ignored.
  bool exact = true;
  // Threads of the build; 0: the default (resolve_threads, voxpipe/threads.hpp).
  unsigned threads = 0;
  // When set, told how far the build is: `done` of `total` (the file size), in compressed
  // bytes. The fast build reports the furthest byte read; the exact build its own measure,
  // which reaches `total` only once the index is complete (a threaded exact build reads the
  // file twice). Called one call at a time from the building threads, `done` never
  // decreasing; an exception it throws stops the build and is rethrown.
  std::function<void(std::uint64_t done, std::uint64_t total)> progress;
};

struct GzipIndexSummary {
  std::string index_path;
  std::uint64_t compressed_size = 0;
  std::uint64_t uncompressed_size = 0;
  std::uint64_t points = 0;
  std::uint64_t index_bytes = 0;  // size of the written index file
};

// Inflates `gz_path` once (checking every member's CRC32 and ISIZE), records seek points and
// writes the index. Throws Error(corrupt / truncated / format) for a bad file and Error(io) when
// the index cannot be written; the index file is written atomically.
GzipIndexSummary build_gzip_index(const std::string& gz_path, const GzipIndexOptions& options = {});

}  // namespace voxpipe
