// decode_j2k_frame (OpenJPEG) over arbitrary frames, codestreams or JP2, through
// vpfuzz::fuzz_frame: an Error or the whole output; sign-corrected exactly for MONOCHROME;
// YBR_RCT / YBR_ICT reported as RGB, anything else as the dataset's.
#include <string_view>

#include "frame_fuzz.hpp"

namespace {
constexpr const char* kPhotometric[] = {"MONOCHROME2", "RGB", "YBR_RCT", "MONOCHROME1"};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return vpfuzz::fuzz_frame(
      data, size, voxpipe::dicom::decode_j2k_frame, kPhotometric,
      [](const voxpipe::dicom::FrameSpec& spec, const voxpipe::dicom::FrameOutcome& outcome) {
        const std::string_view pi = spec.photometric;
        const bool monochrome = pi == "MONOCHROME1" || pi == "MONOCHROME2";
        if (outcome.sign_corrected != monochrome) std::abort();
        if (outcome.photometric != (pi == "YBR_RCT" ? "RGB" : pi)) std::abort();
      });
}
