// Helpers shared by the library-backed frame decoders (jpeg.cpp, jpegls.cpp, j2k.cpp): errors in
// the contract's form, the output size check, storing a value by value into the output's integer
// type, and pydicom's reading of JPEG / JPEG-LS markers (utils._get_jpg_parameters) with the
// photometric interpretation it derives from them (DecodeRunner._conform_jpg_colorspace).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "dicom/codecs/codec.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::dicom::codec_support {

[[noreturn]] inline void fail(const FrameSpec& spec, ErrorCode code, std::string detail) {
  throw Error(code, std::string(spec.name), "frame " + std::to_string(spec.frame),
              std::move(detail), spec.offset);
}

// Damage a decoder found and could decode past: Error(corrupt) naming the frame, or with
// spec.recover_corrupt a warning in `outcome` (the decoder then carries on).
inline void damaged(const FrameSpec& spec, FrameOutcome& outcome, std::string detail) {
  if (!spec.recover_corrupt)
    fail(spec, ErrorCode::corrupt,
         std::move(detail) + " (on_corrupt='warn' decodes past it, with a warning)");
  outcome.warnings.push_back(std::move(detail));
}

// A frame whose decoder library was left out of this build (CMakeLists.txt: VOXPIPE_WITH_<NAME>,
// AUTO when the library is not found): Error(unsupported) naming the transfer syntaxes, the
// library and the Debian package that brings it back on a rebuild.
[[noreturn]] inline void fail_not_built(const FrameSpec& spec, const char* syntaxes,
                                        const char* library, const char* debian_package) {
  fail(spec, ErrorCode::unsupported,
       std::string(syntaxes) + ": voxpipe was built without " + library + " (Debian: " +
           debian_package + ")");
}

// Samples in the frame (rows * columns * samples), checked against `out`: the caller's contract.
std::uint64_t checked_sample_count(const FrameSpec& spec, std::span<const std::uint8_t> out);

// Stores `value` at sample `index` of `out` as the output's integer type (bits_allocated,
// is_signed), with C++'s modular conversion: what NumPy's assignment does for in-range values and
// its wrap-around for the rest.
inline void store_sample(std::span<std::uint8_t> out, std::uint64_t index, std::int64_t value,
                         std::uint32_t bits_allocated) {
  switch (bits_allocated) {
    case 8: {
      const auto v = static_cast<std::uint8_t>(value);
      out[index] = v;
      break;
    }
    case 16: {
      const auto v = static_cast<std::uint16_t>(value);
      std::memcpy(out.data() + index * 2, &v, 2);
      break;
    }
    default: {
      const auto v = static_cast<std::uint32_t>(value);
      std::memcpy(out.data() + index * 4, &v, 4);
      break;
    }
  }
}

// The value a bit pattern `raw` of `bits` (8, 16 or 32) has in an integer of that width,
// signed or not.
inline std::int64_t as_width(std::int64_t raw, std::uint32_t bits, bool is_signed) {
  switch (bits) {
    case 8:
      return is_signed ? std::int64_t{static_cast<std::int8_t>(raw)}
                       : std::int64_t{static_cast<std::uint8_t>(raw)};
    case 16:
      return is_signed ? std::int64_t{static_cast<std::int16_t>(raw)}
                       : std::int64_t{static_cast<std::uint16_t>(raw)};
    default:
      return is_signed ? std::int64_t{static_cast<std::int32_t>(raw)}
                       : std::int64_t{static_cast<std::uint32_t>(raw)};
  }
}

// NumPy's left_shift then right_shift by `shift` in an integer of `bits`, signed or not:
// the low bits - shift bits, sign-extended when signed.
inline std::int64_t shift_round_trip(std::int64_t value, std::uint32_t bits, std::uint32_t shift,
                                     bool is_signed) {
  if (shift == 0 || shift >= bits) return as_width(value, bits, is_signed);
  const std::uint32_t keep = bits - shift;
  const std::uint64_t mask = (std::uint64_t{1} << keep) - 1;
  const std::uint64_t low = static_cast<std::uint64_t>(value) & mask;
  if (is_signed && (low >> (keep - 1)) != 0) return static_cast<std::int64_t>(low | ~mask);
  return static_cast<std::int64_t>(low);
}

// What pydicom's _get_jpg_parameters reads from the markers before the first SOF (and the SOF):
// empty (parsed false) where pydicom's parse fails.
struct JpegMarkerInfo {
  bool parsed = false;
  std::uint8_t sof = 0;  // the SOFn marker's second byte: 0xC0 Baseline, 0xC1 Extended, 0xF7 JPEG-LS
  std::uint32_t precision = 0;
  std::uint32_t height = 0, width = 0, components = 0;
  std::array<std::uint8_t, 3> first_ids{};  // the first three component ids (what the RGB test reads)
  bool jfif = false;  // an APPn marker whose (last) payload starts with "JFIF"
};
JpegMarkerInfo read_jpeg_markers(std::span<const std::uint8_t> src);

// The photometric interpretation pydicom decodes with after _conform_jpg_colorspace:
// "RGB" for component ids RGB/rgb, YBR_FULL_422 (baseline) / YBR_FULL (others) for a JFIF
// marker where the dataset's has no "YBR", else the dataset's.
std::string conform_jpeg_photometric(const JpegMarkerInfo& info, const FrameSpec& spec,
                                     bool baseline);

}  // namespace voxpipe::dicom::codec_support
