// Replaced by the real decoder in the next commit of this series.
#include "voxpipe/error.hpp"
#include "dicom/codecs/codec.hpp"

namespace voxpipe::dicom {

FrameOutcome decode_jpeg_lossless_frame(std::span<const std::uint8_t>, const FrameSpec& spec,
                              std::span<std::uint8_t>) {
  throw Error(ErrorCode::unsupported, std::string(spec.name), "frame " + std::to_string(spec.frame),
              "this decoder is not built yet", spec.offset);
}

}  // namespace voxpipe::dicom
