// Types shared by the gzip engines (sequential, member-parallel, index-based, speculative
// parallel): how decompressed bytes reach their consumer, and where inflation can resume.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/file.hpp"

namespace voxpipe::gz {

// Receives decompressed bytes. `offset` is the position of data[0] in the uncompressed stream
// of the whole file (members concatenated). Engines call it from pool threads, concurrently,
// for disjoint ranges and in any order; within one decode call every requested byte is
// delivered exactly once. `data` is valid only during the call. An exception thrown by the
// sink stops the decode and is rethrown to the caller.
using Sink = core::ByteSink;

// Where inflation can resume: the first bit of a deflate block, with the output that precedes
// it. Bits are numbered LSB-first, as DEFLATE reads them: bit b is bit (b % 8) of byte b / 8.
struct SeekPoint {
  std::uint64_t compressed_bit = 0;  // position of the block's first header bit in the file
  std::uint64_t uncompressed = 0;    // offset in the uncompressed stream of the block's output
  // The min(32 KiB, bytes since the member's start) bytes of output before `uncompressed`;
  // empty at the first block of a member. An index read from a file leaves the windows there
  // until a decode needs one (window empty, window_length > 0: see SeekIndex::window_of).
  std::vector<std::uint8_t> window;
  std::uint64_t window_offset = 0;  // in the index file, when left there
  std::uint32_t window_length = 0;  // 0: in `window` (or none)

  bool has_window() const noexcept { return !window.empty() || window_length != 0; }
};

// The default window a deflate stream may refer back into.
inline constexpr std::size_t kWindowSize = 32768;

}  // namespace voxpipe::gz
