// The known-window half of the parallel engine: gzip member framing (header, trailer, padding)
// and a run that inflates from a block start with a known window until it ends a block exactly
// at one of the chunk start candidates, following members to the end of the file.
// Internal to inflate_parallel; the functions throw voxpipe::Error naming the file and byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>

#include "core/file.hpp"
#include "gz/block_finder.hpp"

namespace voxpipe::gz::inflate_detail {

// Receives a run's output in stream order.
class RunOutput {
 public:
  virtual ~RunOutput() = default;
  // Where the next bytes go (never empty).
  virtual std::span<std::uint8_t> space() = 0;
  // n bytes were written to the start of the last space().
  virtual void commit(std::size_t n) = 0;
  // Copies through space()/commit(); overridden where bytes can be consumed in place.
  virtual void write(std::span<const std::uint8_t> bytes);
  // The member ended here; its trailer (at byte trailer_byte) holds crc and isize.
  virtual void member_end(std::uint32_t crc, std::uint32_t isize, std::uint64_t trailer_byte) = 0;
  // A new member's first block begins at bit `bit`; output after this has an empty window.
  virtual void member_start(std::uint64_t bit) = 0;
  // True once the output wants nothing more: the run then returns (inflate_range's runs stop
  // at the end of their range).
  virtual bool done() const { return false; }
};

// The start candidate of chunk j (nullopt when the chunk has none). May run the block finder.
using TargetFn = std::function<std::optional<BlockCandidate>(std::size_t chunk)>;

// Where a run stopped: at the start of chunk `chunk`, bit `bit`; chunk == chunk_count means the
// end of the file.
struct RunEnd {
  std::size_t chunk = 0;
  std::uint64_t bit = 0;
};

// Parses the gzip header at `offset`; returns the offset of the first deflate byte. Throws
// format (first member) or corrupt (later ones) on a bad magic or method, truncated when the
// file ends inside it.
std::uint64_t read_gzip_header(const core::InputFile& file, std::uint64_t offset, bool first);

// A member's final block ended at bit `end_bit`: reads and reports the trailer, skips zero
// padding, parses the next member's header. Returns the next member's first block bit, or
// nullopt at the end of the file.
std::optional<std::uint64_t> finish_member(const core::InputFile& file, std::uint64_t end_bit,
                                           RunOutput& out);

// Advances `chunk` past candidates that end before `bit`; true when chunk's candidate covers
// `bit` (a run that ends a block at `bit` has reached chunk's start).
bool lands_on(const TargetFn& target, std::size_t& chunk, std::size_t chunk_count,
              std::uint64_t bit);

// Inflates from block start `bit` with `window` (the <= 32 KiB before it in its member) until a
// non-final block ends exactly at the candidate of some chunk >= `chunk`, or the file ends, or
// out.done() (then RunEnd{chunk_count, 0}: where the run stopped is no block boundary).
RunEnd run_known_window(const core::InputFile& file, std::uint64_t bit,
                        std::span<const std::uint8_t> window, std::size_t chunk,
                        std::size_t chunk_count, const TargetFn& target, RunOutput& out);

// CRC32 (gzip's), continued from `crc`.
std::uint32_t crc32_update(std::uint32_t crc, const std::uint8_t* data, std::size_t n);

}  // namespace voxpipe::gz::inflate_detail
