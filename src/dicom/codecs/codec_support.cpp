#include "dicom/codecs/codec_support.hpp"

#include <array>

namespace voxpipe::dicom::codec_support {

std::uint64_t checked_sample_count(const FrameSpec& spec, std::span<const std::uint8_t> out) {
  if (spec.bits_allocated != 8 && spec.bits_allocated != 16 && spec.bits_allocated != 32) {
    fail(spec, ErrorCode::unsupported,
         "expected BitsAllocated 8, 16 or 32, but found " + std::to_string(spec.bits_allocated));
  }
  if (spec.samples != 1 && spec.samples != 3) {
    fail(spec, ErrorCode::unsupported,
         "expected SamplesPerPixel 1 or 3, but found " + std::to_string(spec.samples));
  }
  // rows and columns are 16-bit in DICOM but 32-bit here: 2^32 * 2^32 * 3 * 4 overflows, so
  // check in two steps.
  const std::uint64_t pixels = std::uint64_t{spec.rows} * spec.columns;
  const std::uint64_t bytes_per_pixel = std::uint64_t{spec.samples} * (spec.bits_allocated / 8);
  if (pixels > (std::uint64_t{1} << 48) || pixels * bytes_per_pixel != out.size()) {
    throw Error(ErrorCode::invalid_argument, std::string(spec.name),
                "frame " + std::to_string(spec.frame),
                "expected an output of " + std::to_string(spec.rows) + " x " +
                    std::to_string(spec.columns) + " x " + std::to_string(bytes_per_pixel) +
                    " bytes, but received " + std::to_string(out.size()),
                spec.offset);
  }
  return pixels * spec.samples;
}

namespace {

bool is_sof(std::uint8_t a, std::uint8_t b) {
  if (a != 0xFF) return false;
  switch (b) {
    case 0xC0: case 0xC1: case 0xC2: case 0xC3: case 0xC5: case 0xC6: case 0xC7:
    case 0xC9: case 0xCA: case 0xCB: case 0xCD: case 0xCE: case 0xCF: case 0xF7:
      return true;
    default:
      return false;
  }
}

}  // namespace

JpegMarkerInfo read_jpeg_markers(std::span<const std::uint8_t> src) {
  // Mirrors pydicom's parse step by step, including where it gives up (an IndexError or a
  // short struct.unpack there returns {}), so that the same streams get the same answers.
  JpegMarkerInfo info;
  const std::size_t n = src.size();
  if (n < 2 || src[0] != 0xFF || src[1] != 0xD8) return {};
  auto u16 = [&](std::size_t at, std::uint32_t& v) {
    if (at + 2 > n) return false;
    v = (std::uint32_t{src[at]} << 8) | src[at + 1];
    return true;
  };
  std::size_t offset = 2;
  std::array<bool, 16> app_is_jfif{};
  while (!(offset + 2 <= n && is_sof(src[offset], src[offset + 1]))) {
    std::uint32_t length = 0;
    if (!u16(offset + 2, length)) return {};
    if (offset + 2 <= n && src[offset] == 0xFF && (src[offset + 1] & 0xF0) == 0xE0) {
      const std::size_t begin = offset + 4, end = offset + 2 + length;
      // Python's slice clamps: the payload is src[begin:end] within the stream.
      const std::size_t stop = end < n ? end : n;
      app_is_jfif[src[offset + 1] & 0x0F] =
          begin + 4 <= stop && std::memcmp(src.data() + begin, "JFIF", 4) == 0;
    }
    offset += std::size_t{length} + 2;
  }
  const bool jpegls = src[offset + 1] == 0xF7;
  info.sof = src[offset + 1];
  offset += 2;
  if (offset + 7 >= n) return {};
  info.precision = src[offset + 2];
  if (!u16(offset + 3, info.height) || !u16(offset + 5, info.width)) return {};
  info.components = src[offset + 7];
  offset += 8;
  for (std::uint32_t i = 0; i < info.components; ++i) {
    if (offset >= n) return {};
    if (i < 3) info.first_ids[i] = src[offset];
    offset += 3;
  }
  if (jpegls) {
    while (!(offset + 2 <= n && src[offset] == 0xFF && src[offset + 1] == 0xDA)) {
      std::uint32_t length = 0;
      if (!u16(offset + 2, length)) return {};
      offset += std::size_t{length} + 2;
    }
    if (offset + 4 >= n) return {};
    offset += 5 + std::size_t{src[offset + 4]} * 2;
    if (offset + 1 >= n) return {};
  }
  for (bool j : app_is_jfif) info.jfif = info.jfif || j;
  info.parsed = true;
  return info;
}

std::string conform_jpeg_photometric(const JpegMarkerInfo& info, const FrameSpec& spec,
                                     bool baseline) {
  std::string pi(spec.photometric);
  if (spec.samples != 3 || !info.parsed) return pi;
  const auto& id = info.first_ids;
  const bool rgb_ids = info.components == 3 && ((id[0] == 'R' && id[1] == 'G' && id[2] == 'B') ||
                                                (id[0] == 'r' && id[1] == 'g' && id[2] == 'b'));
  if (rgb_ids) return "RGB";
  if (info.jfif && pi.find("YBR") == std::string::npos) {
    return baseline ? "YBR_FULL_422" : "YBR_FULL";
  }
  return pi;
}

}  // namespace voxpipe::dicom::codec_support
