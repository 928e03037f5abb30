// 12-bit lossy JPEG (JPEG Extended, process 4: sequential DCT, Huffman coding, 12-bit samples),
// the frames decode_jpeg_frame hands over when the SOF says 12-bit precision. Same contract as
// the decoders of codec.hpp: `src` is one frame's concatenated fragments, `out` holds exactly
// rows * columns * samples values of bits_allocated / 8 bytes; errors name spec.name, "frame N"
// and spec.offset (corrupt: the stream does not decode; format: it contradicts the dataset;
// unsupported: progressive, arithmetic, lossless or hierarchical, 3 components, a DNL height).
#pragma once

#include <cstdint>
#include <span>

#include "dicom/codecs/codec.hpp"

namespace voxpipe::dicom {

FrameOutcome decode_jpeg12_frame(std::span<const std::uint8_t> src, const FrameSpec& spec,
                                 std::span<std::uint8_t> out);

}  // namespace voxpipe::dicom
