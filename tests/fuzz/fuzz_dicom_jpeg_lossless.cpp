// decode_jpeg_lossless_frame over arbitrary frames: the first 3 bytes choose a small frame (rows
// and columns 1..32, 1 or 3 samples, 8/16/32 bits), the rest is the JPEG stream. It either throws
// voxpipe::Error or fills the whole output (two decodes into differently pre-filled buffers must
// agree, so no byte is left unwritten), and refuses an output buffer of the wrong size.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "dicom/codecs/codec.hpp"
#include "voxpipe/error.hpp"

namespace {

using namespace voxpipe;
using namespace voxpipe::dicom;

constexpr const char* kPhotometric[] = {"MONOCHROME2", "RGB", "YBR_FULL", "YBR_FULL_422"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  FrameSpec spec;
  spec.name = "fuzz.dcm";
  spec.rows = 1 + data[0] % 32;
  spec.columns = 1 + data[1] % 32;
  spec.samples = data[2] & 1 ? 3 : 1;
  spec.bits_allocated = 8u << ((data[2] >> 1) % 3);
  spec.bits_stored = spec.bits_allocated;
  spec.is_signed = (data[2] >> 3) & 1;
  spec.photometric = kPhotometric[(data[2] >> 4) & 3];
  const std::span<const std::uint8_t> src(data + 3, size - 3);
  const std::size_t n =
      std::size_t{spec.rows} * spec.columns * spec.samples * spec.bits_allocated / 8;
  std::vector<std::uint8_t> a(n, 0x00), b(n, 0xFF);
  bool decoded = false;
  try {
    const FrameOutcome outcome = decode_jpeg_lossless_frame(src, spec, a);
    // The photometric is the dataset's, or what the codestream says (component ids, JFIF).
    if ((outcome.photometric != spec.photometric && outcome.photometric != "RGB" &&
         outcome.photometric != "YBR_FULL") ||
        outcome.sign_corrected)
      std::abort();
    decoded = true;
  } catch (const Error&) {
  }
  if (decoded) {
    decode_jpeg_lossless_frame(src, spec, b);  // the same input decodes again
    if (a != b) std::abort();
  }
  std::vector<std::uint8_t> wrong(n + 1);
  try {
    decode_jpeg_lossless_frame(src, spec, wrong);
    std::abort();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::invalid_argument && e.code() != ErrorCode::unsupported) std::abort();
  }
  return 0;
}
