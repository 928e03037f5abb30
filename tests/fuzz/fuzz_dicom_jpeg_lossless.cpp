// decode_jpeg_lossless_frame (own decoder) over arbitrary frames, through vpfuzz::fuzz_frame:
// an Error or the whole output; the photometric is the dataset's or what the codestream says
// (component ids "RGB", JFIF: YBR_FULL), with no sign correction, and no warnings (there is no
// in-process reference: libjpeg-turbo 2.1 has no lossless mode).
#include "frame_fuzz.hpp"

namespace {
constexpr const char* kPhotometric[] = {"MONOCHROME2", "RGB", "YBR_FULL", "YBR_FULL_422"};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return vpfuzz::fuzz_frame(
      data, size, voxpipe::dicom::decode_jpeg_lossless_frame, kPhotometric,
      [](const voxpipe::dicom::FrameSpec& spec, const voxpipe::dicom::FrameOutcome& outcome,
         std::span<const std::uint8_t>, std::span<const std::uint8_t>) {
        if ((outcome.photometric != spec.photometric && outcome.photometric != "RGB" &&
             outcome.photometric != "YBR_FULL") ||
            outcome.sign_corrected || !outcome.warnings.empty())
          std::abort();
      });
}
