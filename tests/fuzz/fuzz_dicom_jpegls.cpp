// decode_jpegls_frame (CharLS) over arbitrary frames, through vpfuzz::fuzz_frame: an Error or
// the whole output; sign-corrected exactly for PixelRepresentation 1; the photometric is the
// dataset's, RGB or YBR_FULL (pydicom's marker rules) for 3 samples.
#include <string_view>

#include "frame_fuzz.hpp"

namespace {
constexpr const char* kPhotometric[] = {"MONOCHROME2", "RGB", "YBR_FULL", "MONOCHROME1"};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return vpfuzz::fuzz_frame(
      data, size, voxpipe::dicom::decode_jpegls_frame, kPhotometric,
      [](const voxpipe::dicom::FrameSpec& spec, const voxpipe::dicom::FrameOutcome& outcome) {
        if (outcome.sign_corrected != spec.is_signed) std::abort();
        if (outcome.photometric != spec.photometric && outcome.photometric != "RGB" &&
            outcome.photometric != "YBR_FULL") {
          std::abort();
        }
      });
}
