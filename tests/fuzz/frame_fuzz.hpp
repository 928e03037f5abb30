// Shared by the fuzz targets of the frame decoders (fuzz_dicom_rle, fuzz_dicom_jpeg_lossless,
// fuzz_dicom_jpeg, fuzz_dicom_jpegls, fuzz_dicom_j2k): the first 3 bytes choose a small frame (rows and columns
// 1..32, 1 or 3 samples, 8/16/32 bits allocated, signedness, a photometric interpretation from
// the target's list), the rest is the encoded frame. The decoder either throws voxpipe::Error or
// fills the whole output (two decodes into differently pre-filled buffers must agree, so no byte
// is left unwritten) with an outcome the target accepts, and refuses an output of the wrong size
// (as invalid_argument, or as unsupported when it refuses the stream before looking at the output).
// Damage: a decode that succeeds reports no damage (only RLE's pydicom-style overrun warnings may
// come back), and the target checks it against its reference decoder (the library called
// directly, or a plain reimplementation): the reference must accept the frame, without a warning
// of damage, and give the same samples, so that a frame the reference flags is never returned as
// data. With FrameSpec::recover_corrupt the decoder may return what it recovers, but only with a
// warning when the default decode refused the frame, and the same frame when it did not.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "dicom/codecs/codec.hpp"
#include "voxpipe/error.hpp"

namespace vpfuzz {

using FrameDecoder = voxpipe::dicom::FrameOutcome (*)(std::span<const std::uint8_t>,
                                                       const voxpipe::dicom::FrameSpec&,
                                                       std::span<std::uint8_t>);

template <typename CheckOutcome>
int fuzz_frame(const std::uint8_t* data, std::size_t size, FrameDecoder decode,
               std::span<const char* const> photometrics, CheckOutcome check_outcome) {
  using namespace voxpipe;
  if (size < 3) return 0;
  dicom::FrameSpec spec;
  spec.name = "fuzz.dcm";
  spec.rows = 1 + data[0] % 32;
  spec.columns = 1 + data[1] % 32;
  spec.samples = data[2] & 1 ? 3 : 1;
  spec.bits_allocated = 8u << ((data[2] >> 1) % 3);
  spec.bits_stored = (data[2] >> 6) & 1 ? spec.bits_allocated - 4 : spec.bits_allocated;
  spec.is_signed = (data[2] >> 3) & 1;
  spec.photometric = photometrics[((data[2] >> 4) & 3) % photometrics.size()];
  const std::span<const std::uint8_t> src(data + 3, size - 3);
  const std::size_t n =
      std::size_t{spec.rows} * spec.columns * spec.samples * spec.bits_allocated / 8;
  std::vector<std::uint8_t> a(n, 0x00), b(n, 0xFF);
  bool decoded = false;
  dicom::FrameOutcome outcome;
  try {
    outcome = decode(src, spec, a);
    decoded = true;
  } catch (const Error&) {
  }
  if (decoded) {
    check_outcome(spec, outcome, src, std::span<const std::uint8_t>(a));
    decode(src, spec, b);  // the same input decodes again, to the same values
    if (a != b) std::abort();
  }
  dicom::FrameSpec recover = spec;
  recover.recover_corrupt = true;
  std::vector<std::uint8_t> c(n, 0x55);
  try {
    const dicom::FrameOutcome recovered = decode(src, recover, c);
    if (decoded && (c != a || recovered.warnings != outcome.warnings)) std::abort();
    if (!decoded && recovered.warnings.empty()) std::abort();  // refused only for damage
  } catch (const Error&) {
    if (decoded) std::abort();
  }
  std::vector<std::uint8_t> wrong(n + 1);
  try {
    decode(src, spec, wrong);
    std::abort();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::invalid_argument && e.code() != ErrorCode::unsupported) std::abort();
  }
  return 0;
}

// Sample i of a decoded frame whose samples are `bits` (8, 16 or 32) wide, native byte order.
inline std::uint64_t value_at(std::span<const std::uint8_t> out, std::size_t i,
                              std::uint32_t bits) {
  if (bits == 8) return out[i];
  if (bits == 16) {
    std::uint16_t w;
    std::memcpy(&w, out.data() + 2 * i, 2);
    return w;
  }
  std::uint32_t w;
  std::memcpy(&w, out.data() + 4 * i, 4);
  return w;
}

}  // namespace vpfuzz
