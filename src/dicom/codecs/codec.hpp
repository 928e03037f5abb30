// The contract between the pixel layer (src/dicom/pixels.cpp) and the frame decoders of
// encapsulated transfer syntaxes. Each decoder turns the encoded bytes of one frame into the
// values pydicom 3's pixel_array has for that frame (with its default options), before the
// pixel layer's last two steps, which are the same for every codec:
//   1. pydicom's correct_unused_bits (a shift left and back by BitsAllocated - BitsStored in the
//      output's integer type), unless the decoder says it applied its own sign correction;
//   2. YBR_FULL / YBR_FULL_422 -> RGB (pydicom's convert_color_space), when the photometric
//      interpretation the decoder reports is one of those.
// Decoders are re-entrant (frames are decoded in parallel on the pool), allocate nothing the
// frame's size does not justify, and never read or write outside `src` and `out`.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace voxpipe::dicom {

// What the dataset says one frame is.
struct FrameSpec {
  std::string_view name;            // the file's path, for errors
  std::uint64_t frame = 0;          // frame index, for errors ("frame 3")
  std::uint64_t offset = 0;         // file offset of the frame's first fragment, for errors
  std::uint32_t rows = 0, columns = 0;
  std::uint32_t samples = 1;        // SamplesPerPixel: 1 or 3 (4 is refused before decoding)
  std::uint32_t bits_allocated = 8; // 8, 16 or 32: the output's element size is bits_allocated / 8
  std::uint32_t bits_stored = 8;
  bool is_signed = false;           // PixelRepresentation 1: the output type is signed
  std::uint32_t planar_configuration = 0;  // as stored in the dataset
  std::string_view photometric;     // (0028,0004) as stored, e.g. "MONOCHROME2", "YBR_FULL_422"
  // Damage the decoder detects but decodes past (libjpeg's "Corrupt JPEG data" warnings,
  // OpenJPEG's warnings of a damaged codestream, bytes skipped before a JPEG marker): false, an
  // Error(corrupt); true, the frame is decoded as far as the decoder can and the decoder's
  // message is added to FrameOutcome::warnings.
  bool recover_corrupt = false;
};

struct FrameOutcome {
  // The photometric interpretation of what the decoder wrote: the dataset's, or what the
  // codestream says instead where pydicom follows the codestream (JPEG component ids "RGB",
  // JFIF / Adobe markers; JPEG 2000 YBR_ICT / YBR_RCT decoded to "RGB").
  std::string photometric;
  // true: the decoder applied pydicom's sign correction for its syntax (JPEG-LS with
  // PixelRepresentation 1, JPEG 2000 MONOCHROME), so the pixel layer must not apply
  // correct_unused_bits.
  bool sign_corrected = false;
  // What the caller should pass on as warnings, each naming what was found: damage decoded past
  // (only with FrameSpec::recover_corrupt), and what pydicom warns about without refusing the
  // frame (an RLE segment that decodes to more bytes than the frame holds).
  std::vector<std::string> warnings;
};

// Each function decodes `src`, the concatenated fragments of one frame, into `out`, which holds
// exactly rows * columns * samples values of bits_allocated / 8 bytes: host byte order,
// colour-by-pixel (sample fastest, then column, then row) whatever the stored planar
// configuration, each value as pydicom's pixel_array has it in an array of that integer type
// (signed when is_signed). Errors (voxpipe::Error) name spec.name, the field "frame N" and
// spec.offset:
//   Error(corrupt)     the stream does not decode (bad markers, Huffman codes, segment offsets),
//                      or the decoder reports damage it could decode past (unless
//                      spec.recover_corrupt: then a warning in the outcome);
//   Error(format)      it decodes to something the dataset contradicts (size, components);
//   Error(unsupported) a valid stream this build does not decode (e.g. 12-bit lossy JPEG).

// RLE Lossless (PS3.5 Annex G): own decoder, there is no packaged library for DICOM's RLE.
FrameOutcome decode_rle_frame(std::span<const std::uint8_t> src, const FrameSpec& spec,
                              std::span<std::uint8_t> out);
// JPEG Lossless (process 14, SOF3, any predictor and point transform, 2-16 bits): own decoder;
// the packaged libjpeg-turbo (2.1) has no lossless mode.
FrameOutcome decode_jpeg_lossless_frame(std::span<const std::uint8_t> src, const FrameSpec& spec,
                                        std::span<std::uint8_t> out);
// JPEG Baseline and Extended with 8-bit samples (libjpeg-turbo).
FrameOutcome decode_jpeg_frame(std::span<const std::uint8_t> src, const FrameSpec& spec,
                               std::span<std::uint8_t> out);
// JPEG-LS lossless and near-lossless (CharLS).
FrameOutcome decode_jpegls_frame(std::span<const std::uint8_t> src, const FrameSpec& spec,
                                 std::span<std::uint8_t> out);
// JPEG 2000 Part 1 and High-Throughput JPEG 2000 (OpenJPEG).
// Whether the library of each optional decoder was found at build time (CMakeLists.txt sets
// VOXPIPE_HAVE_<NAME> on that decoder's source only, so the answer is defined there).
extern const bool kJpegLibraryBuilt;    // jpeg.cpp: libjpeg-turbo
extern const bool kJpeglsLibraryBuilt;  // jpegls.cpp: CharLS
extern const bool kJ2kLibraryBuilt;     // j2k.cpp: OpenJPEG

FrameOutcome decode_j2k_frame(std::span<const std::uint8_t> src, const FrameSpec& spec,
                              std::span<std::uint8_t> out);

}  // namespace voxpipe::dicom
