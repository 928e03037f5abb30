// decode_rle_frame (own decoder) over arbitrary frames, through vpfuzz::fuzz_frame: an Error or
// the whole output; the photometric is always the dataset's, with no sign correction. A frame
// that decodes is checked against a plain PackBits reference written here from PS3.5 Annex G
// and pydicom's rle.py: every segment decoded whole into a vector, at least Rows x Columns bytes
// each (else the frame must have been refused), the samples assembled most significant byte
// first, and one warning for each segment that decodes to more than the frame holds.
#include <bit>
#include <cstring>

#include "frame_fuzz.hpp"

namespace {

constexpr const char* kPhotometric[] = {"MONOCHROME2", "RGB", "YBR_FULL", "YBR_FULL_422"};

std::uint32_t le32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
         std::uint32_t{p[3]} << 24;
}

// pydicom's _rle_decode_segment: literal runs give the bytes that are there, a repeat run
// without its byte gives nothing, 128 is a no-operation.
std::vector<std::uint8_t> packbits(std::span<const std::uint8_t> seg) {
  std::vector<std::uint8_t> out;
  std::size_t pos = 0;
  while (pos < seg.size()) {
    const unsigned header = seg[pos++];
    if (header < 128) {
      for (unsigned i = 0; i <= header && pos < seg.size(); ++i) out.push_back(seg[pos++]);
    } else if (header > 128) {
      if (pos < seg.size()) out.insert(out.end(), 257 - header, seg[pos++]);
    }
  }
  return out;
}

void check_against_reference(const voxpipe::dicom::FrameSpec& spec,
                             const voxpipe::dicom::FrameOutcome& outcome,
                             std::span<const std::uint8_t> src, std::span<const std::uint8_t> out) {
  const std::size_t bytes = spec.bits_allocated / 8;
  const std::size_t pixels = std::size_t{spec.rows} * spec.columns;
  const std::size_t segments = spec.samples * bytes;
  if (src.size() < 64 || le32(src.data()) != segments) std::abort();
  std::size_t bounds[16];
  for (std::size_t i = 0; i < segments; ++i)
    bounds[i] = std::min<std::size_t>(le32(src.data() + 4 + 4 * i), src.size());
  bounds[segments] = src.size();
  std::size_t longer = 0;
  for (std::size_t i = 0; i < segments; ++i) {
    const std::size_t begin = bounds[i], end = std::max(bounds[i + 1], begin);
    const std::vector<std::uint8_t> decoded = packbits(src.subspan(begin, end - begin));
    if (decoded.size() < pixels) std::abort();  // pydicom raises: must not be data
    if (decoded.size() > pixels) ++longer;
    const std::size_t sample = i / bytes, significance = bytes - 1 - i % bytes;
    const std::size_t in_element =
        std::endian::native == std::endian::little ? significance : bytes - 1 - significance;
    for (std::size_t p = 0; p < pixels; ++p)
      if (out[(p * spec.samples + sample) * bytes + in_element] != decoded[p]) std::abort();
  }
  if (outcome.warnings.size() != longer) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return vpfuzz::fuzz_frame(
      data, size, voxpipe::dicom::decode_rle_frame, kPhotometric,
      [](const voxpipe::dicom::FrameSpec& spec, const voxpipe::dicom::FrameOutcome& outcome,
         std::span<const std::uint8_t> src, std::span<const std::uint8_t> out) {
        if (outcome.photometric != spec.photometric || outcome.sign_corrected) std::abort();
        check_against_reference(spec, outcome, src, out);
      });
}
