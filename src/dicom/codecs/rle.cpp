// DICOM RLE Lossless (PS3.5 Annex G). Our own code: no library in Debian 12's packages decodes
// DICOM's RLE (a 64-byte segment table over PackBits segments), and the format is small enough
// that a decoder of our own is shorter than any glue would be.
//
// What it accepts and refuses follows pydicom 3's own decoder (pydicom/pixels/decoders/rle.py),
// which pydicom falls back to whenever another plugin refuses a frame:
//   - the frame must hold the 64-byte header; the segment count (at most 15) must equal
//     SamplesPerPixel x BitsAllocated / 8; only that many offsets are read;
//   - segment i is the bytes [offset i, offset i+1) (the last one runs to the end of the frame),
//     cut to the frame like a Python slice: an offset past the end, or one not greater than the
//     one before, gives an empty segment; offsets are not required to be >= 64;
//   - a segment must decode to at least Rows x Columns bytes; bytes beyond that (non-conformant
//     padding, or damage) are ignored with a warning in the outcome, as pydicom warns "The
//     decoded RLE segment contains non-conformant padding"; a literal run cut short by the end
//     of the segment contributes the bytes that are there, a repeat run without its byte nothing.
// Segments come most significant byte first, one per byte of each sample, plane by plane; they
// are written straight into colour-by-pixel, host-byte-order elements.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/bytes.hpp"
#include "dicom/codecs/codec.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::dicom {
namespace {

[[noreturn]] void fail(const FrameSpec& spec, ErrorCode code, const std::string& detail) {
  throw Error(code, std::string(spec.name), "frame " + std::to_string(spec.frame), detail,
              spec.offset);
}

// Decodes one PackBits segment into its first `needed` bytes at dst, dst + stride, ...;
// returns how many bytes the whole segment decodes to (pydicom's length of the decoded segment:
// fewer than `needed` when it runs out, more when it holds more than the frame). Every
// iteration consumes at least one input byte, so the loop ends.
std::uint64_t decode_segment(const std::uint8_t* seg, std::size_t len, std::uint8_t* dst,
                             std::size_t stride, std::size_t needed) {
  std::size_t pos = 0;
  std::uint64_t total = 0;
  while (pos < len) {
    const unsigned header = seg[pos++];
    if (header == 128) continue;  // no operation
    const bool repeat = header > 128;
    // A repeat run without its byte decodes to nothing; a literal run to the bytes that are there.
    std::size_t count = repeat ? (pos < len ? 257 - header : 0)
                               : std::min<std::size_t>(header + 1, len - pos);
    const std::size_t room = total < needed ? needed - static_cast<std::size_t>(total) : 0;
    const std::size_t write = std::min(count, room);
    if (write != 0) {
      std::uint8_t* p = dst + static_cast<std::size_t>(total) * stride;
      const std::uint8_t* from = seg + pos;
      if (repeat && stride == 1) {
        std::memset(p, *from, write);
      } else if (repeat) {
        for (std::size_t i = 0; i < write; ++i, p += stride) *p = *from;
      } else if (stride == 1) {
        std::memcpy(p, from, write);
      } else {
        for (std::size_t i = 0; i < write; ++i, p += stride) *p = from[i];
      }
    }
    pos += repeat ? (pos < len ? 1 : 0) : header + 1;
    total += count;
  }
  return total;
}

}  // namespace

FrameOutcome decode_rle_frame(std::span<const std::uint8_t> src, const FrameSpec& spec,
                              std::span<std::uint8_t> out) {
  if (spec.bits_allocated != 8 && spec.bits_allocated != 16 && spec.bits_allocated != 32)
    fail(spec, ErrorCode::unsupported,
         "expected BitsAllocated 8, 16 or 32 for RLE Lossless, but found " +
             std::to_string(spec.bits_allocated));
  if (spec.samples != 1 && spec.samples != 3)
    fail(spec, ErrorCode::format,
         "expected SamplesPerPixel 1 or 3, but found " + std::to_string(spec.samples));
  const std::size_t bytes_per_sample = spec.bits_allocated / 8;
  const std::size_t pixels = std::size_t{spec.rows} * spec.columns;
  const std::size_t pixel_stride = spec.samples * bytes_per_sample;
  if (spec.rows != 0 && pixels / spec.rows != spec.columns)
    fail(spec, ErrorCode::limit, "Rows x Columns overflows");
  if (pixels > SIZE_MAX / pixel_stride || out.size() != pixels * pixel_stride)
    fail(spec, ErrorCode::invalid_argument,
         "expected an output buffer of Rows x Columns x SamplesPerPixel x BitsAllocated / 8 "
         "bytes, but found " + std::to_string(out.size()));

  if (src.size() < 64)
    fail(spec, ErrorCode::corrupt,
         "expected the 64-byte RLE header, but the frame has " + std::to_string(src.size()) +
             " bytes");
  const std::uint64_t segments = core::load_le(src.data(), 4);
  if (segments > 15)
    fail(spec, ErrorCode::corrupt,
         "expected at most 15 RLE segments, but the header says " + std::to_string(segments));
  const std::size_t expected_segments = spec.samples * bytes_per_sample;
  if (segments != expected_segments)
    fail(spec, ErrorCode::corrupt,
         "expected " + std::to_string(expected_segments) + " RLE segments, but the header says " +
             std::to_string(segments));

  FrameOutcome outcome{std::string(spec.photometric), false, {}};
  std::size_t bounds[16];
  for (std::size_t i = 0; i < segments; ++i) {
    const std::uint64_t offset = core::load_le(src.data() + 4 + 4 * i, 4);
    bounds[i] = offset < src.size() ? static_cast<std::size_t>(offset) : src.size();
  }
  bounds[segments] = src.size();

  for (std::size_t i = 0; i < segments; ++i) {
    const std::size_t sample = i / bytes_per_sample;
    // Segment i carries the byte of significance bytes_per_sample - 1 - (i % bytes_per_sample).
    const std::size_t significance = bytes_per_sample - 1 - i % bytes_per_sample;
    const std::size_t byte_in_element = std::endian::native == std::endian::little
                                            ? significance
                                            : bytes_per_sample - 1 - significance;
    const std::size_t begin = bounds[i];
    const std::size_t end = bounds[i + 1] > begin ? bounds[i + 1] : begin;
    if (pixels == 0) continue;
    const std::uint64_t produced =
        decode_segment(src.data() + begin, end - begin,
                       out.data() + sample * bytes_per_sample + byte_in_element, pixel_stride,
                       pixels);
    if (produced < pixels)
      fail(spec, ErrorCode::corrupt,
           "expected RLE segment " + std::to_string(i) + " to decode to " +
               std::to_string(pixels) + " bytes, but it gives " + std::to_string(produced));
    if (produced > pixels)
      outcome.warnings.push_back("RLE segment " + std::to_string(i) + " decodes to " +
                                 std::to_string(produced) + " bytes, but the frame holds " +
                                 std::to_string(pixels) +
                                 " (non-conformant padding or damage): the rest is ignored");
  }
  return outcome;
}

}  // namespace voxpipe::dicom
