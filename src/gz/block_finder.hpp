// Finds where a deflate block may start inside compressed data whose earlier bits are unknown:
// the speculative entry points of the parallel engine. A candidate is a bit position where a
// non-final dynamic-Huffman block header is valid (type 10, HLIT <= 29, HDIST <= 29, a complete
// precode, valid code lengths, literal/length and distance codes zlib accepts, an end-of-block
// code) or where a non-final stored block is plausible (header bits 000, zero padding,
// LEN == ~NLEN), and from which a trial decode (marker mode, unknown window) succeeds for three
// blocks or 64 KiB of output. Fixed-Huffman blocks are not searched for: their headers are three
// bits, so almost every position would qualify.
//
// A candidate can still be false: the engine accepts it only once the preceding data, decoded
// from a known position, ends a block exactly there.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace voxpipe::gz {

struct BlockCandidate {
  // A stored block's header can begin at several bits (its padding is zero, and so may be the
  // bits before it): any block ending in [first_bit, last_bit] is followed by this block. For a
  // dynamic block first_bit == last_bit.
  std::uint64_t first_bit = 0;
  std::uint64_t last_bit = 0;
  bool stored = false;
};

// Searches header positions in [from_bit, to_bit) of `data` (data[0] is byte `first_byte` of
// the stream; give some bytes beyond to_bit so the trial decode can run) and returns the first
// candidate, or nullopt. Pure function of its arguments; thread-safe.
std::optional<BlockCandidate> find_block_start(std::span<const std::uint8_t> data,
                                               std::uint64_t first_byte, std::uint64_t from_bit,
                                               std::uint64_t to_bit);

}  // namespace voxpipe::gz
