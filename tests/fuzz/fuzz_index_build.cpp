// The exact seek index build (gz::build_seek_index), on one thread (our decoder, one run front to
// back) and on two with the smallest chunks (the one-pass build, so that inputs of a few KiB span
// many chunks; chunks decoded ahead first, or left to the scheduling), against zlib's build
// front to back (ExactBuildOptions::zlib_reference, Z_BLOCK as zran.c): the same index (points,
// windows, sizes), or all three fail with the same voxpipe::Error (code, field, offset, message).
// A file zlib indexes is built by the others without falling back to zlib's build (they met no
// bad data that was not there).
//
// Input (index_build_input.hpp): a mode byte and 4 parameter bytes, then a body: the body as a
// gzip file as it is, or as a program (marker_decoder_input.hpp's) for data that zlib compresses
// into 1-3 gzip members (level, strategy, memLevel, window bits, flushes and parameter changes,
// zero padding), then perhaps damaged (a bit flipped, cut short): most such runs are valid.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/file.hpp"
#include "fuzz_support.hpp"
#include "gz/seek_index.hpp"
#include "gzip_reference.hpp"
#include "index_build_input.hpp"
#include "voxpipe/error.hpp"

namespace {

namespace gz = voxpipe::gz;

// Output an input may inflate to (deflate's 1032:1 at most 4 MiB for -max_len=4096).
constexpr std::size_t kMaxOutput = std::size_t{4} << 20;

struct Outcome {
  std::optional<gz::SeekIndex> index;
  std::optional<voxpipe::Error> error;
  bool zlib_fallback = false;
};

Outcome build(const std::string& path, std::uint64_t spacing,
              const std::vector<std::uint64_t>& wanted, gz::ExactBuildOptions options) {
  Outcome o;
  gz::ExactBuildOptions::Stats stats;
  options.stats = &stats;
  try {
    const voxpipe::core::InputFile file(path);
    o.index = gz::build_seek_index(file, spacing, wanted, options);
  } catch (const voxpipe::Error& e) {
    o.error = e;
  }
  o.zlib_fallback = stats.zlib_fallback;
  return o;
}

bool same_index(const gz::SeekIndex& a, const gz::SeekIndex& b) {
  if (a.compressed_size != b.compressed_size || a.uncompressed_size != b.uncompressed_size ||
      a.spacing != b.spacing || a.points.size() != b.points.size())
    return false;
  for (std::size_t i = 0; i < a.points.size(); ++i) {
    const gz::SeekPoint& p = a.points[i];
    const gz::SeekPoint& q = b.points[i];
    if (p.compressed_bit != q.compressed_bit || p.uncompressed != q.uncompressed ||
        p.window != q.window)
      return false;
  }
  return true;
}

bool same_error(const voxpipe::Error& a, const voxpipe::Error& b) {
  return a.code() == b.code() && a.field() == b.field() && a.offset() == b.offset() &&
         std::string(a.what()) == b.what();
}

void expect_same(const Outcome& ref, const Outcome& got) {
  if (ref.index.has_value() != got.index.has_value()) std::abort();
  if (ref.index) {
    if (!same_index(*ref.index, *got.index)) std::abort();
    if (got.zlib_fallback) std::abort();  // our decoder or the one-pass build refused good data
  } else if (!same_error(*ref.error, *got.error)) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace ib = vpfuzz::index_build;
  const ib::Input in = ib::split(data, size);
  const std::vector<std::uint8_t> gzdata = ib::gzip_file(in);
  if (gzdata.empty()) return 0;
  // Outputs past the cap only cost time: the builds keep windows, not the output.
  const vpfuzz::GunzipResult inflated =
      vpfuzz::zlib_gunzip(gzdata.data(), gzdata.size(), kMaxOutput);
  if (inflated.out.size() > kMaxOutput) return 0;
  const std::string path = vpfuzz::scratch_file("in.gz");
  vpfuzz::write_bytes(path, gzdata.data(), gzdata.size());
  const std::uint64_t spacing = ib::spacing(in);
  const std::vector<std::uint64_t> wanted = ib::wanted(in, inflated.out.size());

  gz::ExactBuildOptions options;
  options.zlib_reference = true;
  const Outcome ref = build(path, spacing, wanted, options);
  if (ref.index.has_value() != inflated.ok) std::abort();  // the reference is zlib's gunzip
  options.zlib_reference = false;
  options.threads = 1;
  expect_same(ref, build(path, spacing, wanted, options));
  options.threads = 2;
  options.chunk_size = 4096;  // the smallest the one-pass build takes
  options.decode_ahead_first = ib::decode_ahead_first(in);
  expect_same(ref, build(path, spacing, wanted, options));
  return 0;
}
