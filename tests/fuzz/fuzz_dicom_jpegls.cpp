// decode_jpegls_frame (CharLS) over arbitrary frames, through vpfuzz::fuzz_frame: an Error or
// the whole output; sign-corrected exactly for PixelRepresentation 1; the photometric is the
// dataset's, RGB or YBR_FULL (pydicom's marker rules) for 3 samples. A frame that decodes is
// decoded again with CharLS's C API directly: it must succeed, and each of our samples must hold
// CharLS's sample in its low P bits (P the codestream's precision; widening and pydicom's sign
// correction keep them), planes interleaved for interleave mode none.
#include <charls/charls.h>

#include <cstring>
#include <string_view>

#include "frame_fuzz.hpp"

namespace {

constexpr const char* kPhotometric[] = {"MONOCHROME2", "RGB", "YBR_FULL", "MONOCHROME1"};

constexpr charls_jpegls_errc kOk{};

void check_against_charls(const voxpipe::dicom::FrameSpec& spec,
                          std::span<const std::uint8_t> src, std::span<const std::uint8_t> out) {
  charls_jpegls_decoder* decoder = charls_jpegls_decoder_create();
  if (decoder == nullptr) std::abort();
  charls_frame_info frame{};
  charls_interleave_mode mode{};
  std::size_t size = 0;
  if (charls_jpegls_decoder_set_source_buffer(decoder, src.data(), src.size()) != kOk ||
      charls_jpegls_decoder_read_header(decoder) != kOk ||
      charls_jpegls_decoder_get_frame_info(decoder, &frame) != kOk ||
      charls_jpegls_decoder_get_interleave_mode(decoder, &mode) != kOk ||
      charls_jpegls_decoder_get_destination_size(decoder, 0, &size) != kOk)
    std::abort();
  std::vector<std::uint8_t> ref(size);
  if (charls_jpegls_decoder_decode_to_buffer(decoder, ref.data(), ref.size(), 0) != kOk)
    std::abort();  // CharLS refuses the frame: it must not be data
  charls_jpegls_decoder_destroy(decoder);
  const std::uint32_t bits = static_cast<std::uint32_t>(frame.bits_per_sample);
  const std::uint64_t mask = (std::uint64_t{1} << bits) - 1;
  const std::size_t pixels = std::size_t{spec.rows} * spec.columns;
  const bool planar = spec.samples == 3 && mode == charls_interleave_mode{};
  for (std::size_t i = 0; i < pixels * spec.samples; ++i) {
    const std::size_t from = planar ? (i % spec.samples) * pixels + i / spec.samples : i;
    std::uint64_t expected = ref[from];
    if (bits > 8) {
      std::uint16_t w;
      std::memcpy(&w, ref.data() + 2 * from, 2);
      expected = w;
    }
    if ((vpfuzz::value_at(out, i, spec.bits_allocated) & mask) != (expected & mask)) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return vpfuzz::fuzz_frame(
      data, size, voxpipe::dicom::decode_jpegls_frame, kPhotometric,
      [](const voxpipe::dicom::FrameSpec& spec, const voxpipe::dicom::FrameOutcome& outcome,
         std::span<const std::uint8_t> src, std::span<const std::uint8_t> out) {
        if (outcome.sign_corrected != spec.is_signed || !outcome.warnings.empty()) std::abort();
        if (outcome.photometric != spec.photometric && outcome.photometric != "RGB" &&
            outcome.photometric != "YBR_FULL") {
          std::abort();
        }
        check_against_charls(spec, src, out);
      });
}
