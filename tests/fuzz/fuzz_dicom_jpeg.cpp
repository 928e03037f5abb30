// decode_jpeg_frame (libjpeg-turbo) over arbitrary frames, through vpfuzz::fuzz_frame: an Error
// or the whole output; the photometric is the dataset's, RGB or YBR_FULL(_422) for 3 samples;
// no sign correction. A frame with 8-bit samples that decodes is decoded again through
// libjpeg-turbo's TurboJPEG API (tjDecompress2, EOI appended so that a missing one is not its
// warning): it must succeed with no warning but an unknown JFIF revision or Adobe transform
// (metadata decode_jpeg_frame does not use), and give the same samples: grey as they are, colour
// as stored when libjpeg takes the components as RGB, else after libjpeg's own YCbCr -> RGB
// (decode_jpeg_frame returns the components unconverted, as GDCM does). 12-bit frames (own
// decoder) have no in-process reference: TurboJPEG 2.1 has no 12-bit mode.
#include <bit>
#include <csetjmp>
#include <cstdio>  // jpeglib.h needs size_t and FILE first
#include <cstring>
#include <string_view>

#include <jpeglib.h>
#include <turbojpeg.h>

#include "dicom/codecs/codec_support.hpp"
#include "frame_fuzz.hpp"

namespace {

constexpr const char* kPhotometric[] = {"MONOCHROME2", "RGB", "YBR_FULL", "YBR_FULL_422"};

struct HeaderError {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
};

// libjpeg's guess of the stored colour space (what TurboJPEG converts from), or JCS_UNKNOWN.
J_COLOR_SPACE stored_colour_space(std::span<const std::uint8_t> src) {
  jpeg_decompress_struct cinfo;
  std::memset(&cinfo, 0, sizeof cinfo);
  HeaderError err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = [](j_common_ptr c) {
    std::longjmp(reinterpret_cast<HeaderError*>(c->err)->jump, 1);
  };
  err.pub.emit_message = [](j_common_ptr, int) {};
  J_COLOR_SPACE space = JCS_UNKNOWN;
  if (setjmp(err.jump) == 0) {
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, src.data(), static_cast<unsigned long>(src.size()));
    jpeg_read_header(&cinfo, TRUE);
    space = cinfo.jpeg_color_space;
  }
  jpeg_destroy_decompress(&cinfo);
  return space;
}

// libjpeg-turbo's ycc_rgb_convert (jdcolor.c): 16-bit fixed point, rounded, clamped.
void ycc_to_rgb(int y, int cb, int cr, std::uint8_t rgb[3]) {
  constexpr int kScale = 16;
  constexpr long kHalf = 1L << (kScale - 1);
  const auto fix = [](double x) { return static_cast<long>(x * (1L << kScale) + 0.5); };
  const long x_cb = cb - 128, x_cr = cr - 128;
  const int r = y + static_cast<int>((fix(1.40200) * x_cr + kHalf) >> kScale);
  const int b = y + static_cast<int>((fix(1.77200) * x_cb + kHalf) >> kScale);
  const long g_offset = -fix(0.34414) * x_cb + kHalf - fix(0.71414) * x_cr;
  const int g = y + static_cast<int>(g_offset >> kScale);
  const auto clamp = [](int v) { return static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v); };
  rgb[0] = clamp(r), rgb[1] = clamp(g), rgb[2] = clamp(b);
}

// Sample i of `out` as the 8-bit value decode_jpeg_frame started from (it widens by value).
std::uint8_t sample8(std::span<const std::uint8_t> out, std::size_t i, std::uint32_t bits) {
  return out[i * (bits / 8) + (std::endian::native == std::endian::little ? 0 : bits / 8 - 1)];
}

void check_against_turbojpeg(const voxpipe::dicom::FrameSpec& spec,
                             std::span<const std::uint8_t> src, std::span<const std::uint8_t> out) {
  const auto info = voxpipe::dicom::codec_support::read_jpeg_markers(src);
  if (info.parsed && info.precision == 12) return;
  std::vector<std::uint8_t> stream(src.begin(), src.end());
  stream.insert(stream.end(), {0xFF, 0xD9});
  const J_COLOR_SPACE space = spec.samples == 3 ? stored_colour_space(stream) : JCS_GRAYSCALE;
  const std::size_t pixels = std::size_t{spec.rows} * spec.columns;
  std::vector<std::uint8_t> ref(pixels * spec.samples);
  tjhandle tj = tjInitDecompress();
  if (tj == nullptr) std::abort();
  const int format = spec.samples == 3 ? TJPF_RGB : TJPF_GRAY;
  const int rc = tjDecompress2(tj, stream.data(), static_cast<unsigned long>(stream.size()),
                               ref.data(), static_cast<int>(spec.columns), 0,
                               static_cast<int>(spec.rows), format, 0);
  if (rc != 0) {
    const std::string_view message = tjGetErrorStr2(tj);
    const bool benign = tjGetErrorCode(tj) == TJERR_WARNING &&
                        (message.starts_with("Warning: unknown JFIF revision") ||
                         message.starts_with("Unknown Adobe color transform"));
    if (!benign) std::abort();  // the reference flags the frame: it must not be data
  }
  tjDestroy(tj);
  for (std::size_t p = 0; p < pixels; ++p) {
    std::uint8_t mine[3];
    for (std::uint32_t c = 0; c < spec.samples; ++c)
      mine[c] = sample8(out, p * spec.samples + c, spec.bits_allocated);
    if (spec.samples == 3) {
      if (space == JCS_YCbCr) {
        const std::uint8_t ycc[3] = {mine[0], mine[1], mine[2]};
        ycc_to_rgb(ycc[0], ycc[1], ycc[2], mine);
      } else if (space != JCS_RGB) {
        return;  // a colour space TurboJPEG converts otherwise: no byte comparison
      }
    }
    if (std::memcmp(mine, ref.data() + p * spec.samples, spec.samples) != 0) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return vpfuzz::fuzz_frame(
      data, size, voxpipe::dicom::decode_jpeg_frame, kPhotometric,
      [](const voxpipe::dicom::FrameSpec& spec, const voxpipe::dicom::FrameOutcome& outcome,
         std::span<const std::uint8_t> src, std::span<const std::uint8_t> out) {
        if (outcome.sign_corrected || !outcome.warnings.empty()) std::abort();
        if (spec.samples == 1 && outcome.photometric != spec.photometric) std::abort();
        if (spec.samples == 3 && outcome.photometric != "RGB" &&
            outcome.photometric != "YBR_FULL" && outcome.photometric != "YBR_FULL_422") {
          std::abort();
        }
        check_against_turbojpeg(spec, src, out);
      });
}
