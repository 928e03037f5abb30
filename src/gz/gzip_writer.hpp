// Single-member gzip output, byte-compatible with what Python's gzip module (and so nibabel)
// writes: header 1f 8b 08 00 00000000 XFL ff (no name, mtime 0, OS 255), raw deflate from zlib
// at the given level, then CRC32 and ISIZE.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/file.hpp"

namespace voxpipe::gz {

class GzipWriter {
 public:
  // `level` 0..9 (zlib). Throws Error(invalid_argument) outside that range.
  GzipWriter(core::AtomicOutputFile& out, int level);
  ~GzipWriter();
  GzipWriter(const GzipWriter&) = delete;
  GzipWriter& operator=(const GzipWriter&) = delete;

  void write(std::span<const std::byte> bytes);
  // Flushes the deflate stream and writes the trailer; the file is not committed.
  void finish();

 private:
  void pump(int flush);

  core::AtomicOutputFile& out_;
  struct Stream;
  Stream* stream_;
  std::vector<std::byte> buffer_;
  std::uint32_t crc_ = 0;
  std::uint64_t size_ = 0;
};

}  // namespace voxpipe::gz
