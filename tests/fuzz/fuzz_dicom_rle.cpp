// decode_rle_frame (own decoder) over arbitrary frames, through vpfuzz::fuzz_frame: an Error or
// the whole output; the photometric is always the dataset's, with no sign correction.
#include "frame_fuzz.hpp"

namespace {
constexpr const char* kPhotometric[] = {"MONOCHROME2", "RGB", "YBR_FULL", "YBR_FULL_422"};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return vpfuzz::fuzz_frame(
      data, size, voxpipe::dicom::decode_rle_frame, kPhotometric,
      [](const voxpipe::dicom::FrameSpec& spec, const voxpipe::dicom::FrameOutcome& outcome) {
        if (outcome.photometric != spec.photometric || outcome.sign_corrected) std::abort();
      });
}
