// The known-window half of the parallel engine: gzip member framing (header, trailer, padding)
// and a run that inflates from a block start with a known window until it ends a block exactly
// at one of the chunk start candidates, following members to the end of the file (and one that
// also reports every block boundary, for the seek index's one-pass build), and the chunks' start
// candidates. Internal to inflate_parallel and the seek index; the functions throw
// voxpipe::Error naming the file and byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "core/file.hpp"
#include "gz/block_finder.hpp"
#include "gz/deflate_decoder.hpp"

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
  // A deflate block begins at bit `bit`, inside the run (neither its first block nor where it
  // stops), every byte before it written: told by run_blocks only, for each block that is not
  // after its member's final one (each member's first block included, after member_start).
  virtual void block_start(std::uint64_t /*bit*/) {}
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
std::uint64_t read_gzip_header(const core::RandomAccessInput& file, std::uint64_t offset,
                               bool first);

// A member's final block ended at bit `end_bit`: reads and reports the trailer, skips zero
// padding, parses the next member's header. Returns the next member's first block bit, or
// nullopt at the end of the file.
std::optional<std::uint64_t> finish_member(const core::RandomAccessInput& file,
                                           std::uint64_t end_bit, RunOutput& out);

// Advances `chunk` past candidates that end before `bit`; true when chunk's candidate covers
// `bit` (a run that ends a block at `bit` has reached chunk's start).
bool lands_on(const TargetFn& target, std::size_t& chunk, std::size_t chunk_count,
              std::uint64_t bit);

// A run's member ended its final block at bit `end_bit`, and chunk `chunk` is the next whose
// start the run may reach: reads the trailer (finish_member), then returns where the run ends
// (the end of the file, or chunk's start when the next member begins there, `chunk` advanced
// as lands_on does), or nullopt with `bit` set to the next member's first block, where the run
// goes on with an empty window.
std::optional<RunEnd> end_member(const core::RandomAccessInput& file, std::uint64_t end_bit,
                                 RunOutput& out, const TargetFn& target, std::size_t& chunk,
                                 std::size_t chunk_count, std::uint64_t& bit);

// Inflates from block start `bit` with `window` (the <= 32 KiB before it in its member) until a
// non-final block ends exactly at the candidate of some chunk >= `chunk`, or the file ends, or
// out.done() (then RunEnd{chunk_count, 0}: where the run stopped is no block boundary).
RunEnd run_known_window(const core::RandomAccessInput& file, std::uint64_t bit,
                        std::span<const std::uint8_t> window, std::size_t chunk,
                        std::size_t chunk_count, const TargetFn& target, RunOutput& out);

// As run_known_window, but with our own decoder whatever the build (ISA-L does not stop at block
// boundaries), telling out.block_start() of every block that begins inside the run. `reader` and
// `dec` (over `reader`, on `file`) are the caller's, kept across runs so that their buffers stay
// warm; the run starts `dec` itself.
RunEnd run_blocks(const core::RandomAccessInput& file, BitReader& reader,
                  DeflateDecoder<std::uint8_t>& dec, std::uint64_t bit,
                  std::span<const std::uint8_t> window, std::size_t chunk, std::size_t chunk_count,
                  const TargetFn& target, RunOutput& out);

// The bytes of `file` for a BitReader, and the size of its buffer (as the runs read: smaller for
// stored bytes that cost a request per read).
ByteFetch file_fetch(const core::RandomAccessInput& file);
std::size_t reader_buffer_bytes(const core::RandomAccessInput& file);

// The start candidate of chunk `chunk` (of `chunk_size` compressed bytes) of `file`: the first
// block start find_block_start finds in the chunk's first MiB, or nullopt. The compressed bytes
// are read into `scratch`, at least chunk_search_bytes(chunk_size) long (a recycled buffer:
// the parallel engines search every chunk).
std::optional<BlockCandidate> find_chunk_start(const core::RandomAccessInput& file,
                                               std::size_t chunk, std::size_t chunk_size,
                                               std::span<std::uint8_t> scratch);
std::size_t chunk_search_bytes(std::size_t chunk_size);

// CRC32 (gzip's), continued from `crc`.
std::uint32_t crc32_update(std::uint32_t crc, const std::uint8_t* data, std::size_t n);

// A stretch of output inflated in one go, between member boundaries: its CRC32 and length, and,
// when a member ended right after it, that member's trailer. Engines that inflate a member in
// several pieces (chunks, spans between seek points) record segments per piece; chaining them
// in stream order (MemberChecker) proves every member that was inflated from its first byte to
// its trailer, whichever thread inflated each piece.
struct Segment {
  std::uint32_t crc = 0;
  std::uint64_t length = 0;
  bool member_end = false;
  std::uint32_t want_crc = 0;
  std::uint32_t want_isize = 0;
  std::uint64_t trailer_byte = 0;
};

// Chains segments in stream order and checks each member whose whole output it saw against its
// trailer: Error(corrupt) on a CRC32 or ISIZE mismatch. A member entered in its middle (a read
// from a seek point inside it) cannot be checked: its checksum covers bytes nobody inflated.
class MemberChecker {
 public:
  // `at_member_start`: the first segment begins at a member's first byte.
  MemberChecker(const std::string& path, bool at_member_start)
      : path_(&path), known_(at_member_start) {}
  // The next segments continue the stream from where the last one ended; `at_member_start`
  // says whether they begin a member (a piece that starts at a member-start seek point).
  void add(std::span<const Segment> segments, bool at_member_start);

 private:
  const std::string* path_;
  bool known_;  // crc_ and size_ cover the current member from its first byte
  std::uint32_t crc_ = 0;
  std::uint64_t size_ = 0;
};

}  // namespace voxpipe::gz::inflate_detail
