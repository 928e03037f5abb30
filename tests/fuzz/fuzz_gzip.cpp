// GzipByteSource over arbitrary bytes: reads either succeed or throw voxpipe::Error, and every
// way of reading the stream (all at once, in small pieces, skipping, restarting) gives the same
// bytes. Differential against zlib (with Python gzip's rules: members one after another, zero
// padding after a member, anything else an error): a whole read succeeds exactly when zlib's
// does, with zlib's bytes; reading exactly the bytes zlib produced before it failed, then one
// more, fails too (the trailer and what follows it are checked even when the data fill the
// request, and an error met past the request is kept for the next read).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fuzz_support.hpp"
#include "gzip_reference.hpp"
#include "gz/gzip_reader.hpp"
#include "voxpipe/error.hpp"

namespace {
// Deflate expands at most ~1032:1, so with -max_len 4096 this is rarely reached. The buffer is
// allocated once: touching fresh pages on every input would dominate the run time.
constexpr std::size_t kMaxOutput = std::size_t{4} << 20;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = vpfuzz::scratch_file("in.gz");
  vpfuzz::write_bytes(path, data, size);
  static std::vector<std::byte> whole(kMaxOutput);
  const vpfuzz::GunzipResult ref = vpfuzz::zlib_gunzip(data, size, kMaxOutput);
  const bool ref_fits = ref.out.size() < kMaxOutput;
  if (!ref.ok && ref.framing_error && ref_fits && !ref.out.empty()) {
    // Exactly the bytes zlib got before it failed: that read fails (damage after the member's
    // data), or the next one does (damage inside the data, met by the look-ahead byte).
    try {
      voxpipe::gz::GzipByteSource src(path);
      std::vector<std::byte> exact(ref.out.size());
      src.read_at(0, exact);
      std::byte next;
      src.read_at(exact.size(), std::span(&next, 1));
      std::abort();
    } catch (const voxpipe::Error&) {
    }
  }
  std::size_t n = 0;
  try {
    voxpipe::gz::GzipByteSource src(path);
    n = src.read_at(0, whole);
    if (n > whole.size()) std::abort();
    if (src.compressed_consumed() > size) std::abort();
  } catch (const voxpipe::Error&) {
    if (ref.ok && ref_fits) std::abort();  // zlib reads it, we do not
    return 0;
  }
  if (n < kMaxOutput && ref_fits &&
      (!ref.ok || n != ref.out.size() || (n && std::memcmp(whole.data(), ref.out.data(), n) != 0)))
    std::abort();
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
