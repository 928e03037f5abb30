// decode_jpeg_frame (libjpeg-turbo) over arbitrary frames, through vpfuzz::fuzz_frame: an Error
// or the whole output; the photometric is the dataset's, RGB or YBR_FULL(_422) for 3 samples;
// no sign correction.
#include <string_view>

#include "frame_fuzz.hpp"

namespace {
constexpr const char* kPhotometric[] = {"MONOCHROME2", "RGB", "YBR_FULL", "YBR_FULL_422"};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return vpfuzz::fuzz_frame(
      data, size, voxpipe::dicom::decode_jpeg_frame, kPhotometric,
      [](const voxpipe::dicom::FrameSpec& spec, const voxpipe::dicom::FrameOutcome& outcome) {
        if (outcome.sign_corrected) std::abort();
        if (spec.samples == 1 && outcome.photometric != spec.photometric) std::abort();
        if (spec.samples == 3 && outcome.photometric != "RGB" &&
            outcome.photometric != "YBR_FULL" && outcome.photometric != "YBR_FULL_422") {
          std::abort();
        }
      });
}
