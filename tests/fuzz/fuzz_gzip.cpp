// GzipByteSource over arbitrary bytes: reads either succeed or throw voxpipe::Error, and every
// way of reading the stream (all at once, in small pieces, skipping, restarting) gives the same
// bytes.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fuzz_support.hpp"
#include "gz/gzip_reader.hpp"
#include "voxpipe/error.hpp"

namespace {
// Deflate expands at most ~1032:1, so with -max_len 4096 this is rarely reached. The buffer is
// allocated once: touching fresh pages on every input would dominate the run time.
constexpr std::size_t kMaxOutput = std::size_t{4} << 20;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = vpfuzz::scratch_file("in.gz");
  vpfuzz::write_bytes(path, data, size);
  static std::vector<std::byte> whole(kMaxOutput);
  std::size_t n = 0;
  try {
    voxpipe::gz::GzipByteSource src(path);
    n = src.read_at(0, whole);
    if (n > whole.size()) std::abort();
    if (src.compressed_consumed() > size) std::abort();
  } catch (const voxpipe::Error&) {
    return 0;
  }
  // Reading again in pieces, through a fresh source, must give the same bytes.
  try {
    voxpipe::gz::GzipByteSource src(path);
    std::vector<std::byte> piece(4093);
    for (std::size_t at = 0; at < n;) {
      const std::size_t want = std::min(piece.size(), n - at);
      const std::size_t got = src.read_at(at, std::span(piece.data(), want));
      if (got != want || std::memcmp(piece.data(), whole.data() + at, got) != 0) std::abort();
      at += got;
    }
    // Skip forward, then go backwards (restart).
    if (n > 2) {
      std::byte b;
      if (src.read_at(n - 1, std::span(&b, 1)) != 1 || b != whole[n - 1]) std::abort();
      if (src.read_at(n / 2, std::span(&b, 1)) != 1 || b != whole[n / 2]) std::abort();
    }
  } catch (const voxpipe::Error&) {
    // The first pass stopped at kMaxOutput and may not have seen a later error; a first pass
    // that reached the end cannot be followed by an error over the same bytes.
    if (n < kMaxOutput) std::abort();
  }
  return 0;
}
