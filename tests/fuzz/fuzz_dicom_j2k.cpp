// decode_j2k_frame (OpenJPEG) over arbitrary frames, codestreams or JP2, through
// vpfuzz::fuzz_frame: an Error or the whole output; sign-corrected exactly for MONOCHROME;
// YBR_RCT / YBR_ICT reported as RGB, anything else as the dataset's. A frame that decodes is
// decoded again with OpenJPEG directly (from memory, default parameters): it must succeed, and
// each of our samples must hold OpenJPEG's sample in its low P bits (P the component precision;
// widening and pydicom's sign correction keep them).
#include <openjpeg.h>

#include <cstring>
#include <string_view>

#include "frame_fuzz.hpp"

namespace {

constexpr const char* kPhotometric[] = {"MONOCHROME2", "RGB", "YBR_RCT", "MONOCHROME1"};

struct Memory {
  std::span<const std::uint8_t> data;
  std::size_t pos = 0;
};

void check_against_openjpeg(const voxpipe::dicom::FrameSpec& spec,
                            std::span<const std::uint8_t> src, std::span<const std::uint8_t> out) {
  static constexpr std::uint8_t kJp2[12] = {0,    0,    0,    0x0C, 'j',  'P',
                                            ' ',  ' ',  0x0D, 0x0A, 0x87, 0x0A};
  const bool jp2 = src.size() >= 12 && std::memcmp(src.data(), kJp2, 12) == 0;
  Memory memory{src, 0};
  opj_codec_t* codec = opj_create_decompress(jp2 ? OPJ_CODEC_JP2 : OPJ_CODEC_J2K);
  opj_stream_t* stream = opj_stream_create(64 * 1024, OPJ_TRUE);
  opj_set_error_handler(codec, [](const char*, void*) {}, nullptr);
  opj_set_warning_handler(codec, [](const char*, void*) {}, nullptr);
  opj_set_info_handler(codec, [](const char*, void*) {}, nullptr);
  opj_stream_set_user_data(stream, &memory, nullptr);
  opj_stream_set_user_data_length(stream, src.size());
  opj_stream_set_read_function(stream, [](void* buffer, OPJ_SIZE_T bytes,
                                          void* user) -> OPJ_SIZE_T {
    auto* m = static_cast<Memory*>(user);
    if (m->pos >= m->data.size()) return static_cast<OPJ_SIZE_T>(-1);
    const std::size_t n = std::min<std::size_t>(bytes, m->data.size() - m->pos);
    std::memcpy(buffer, m->data.data() + m->pos, n);
    m->pos += n;
    return n;
  });
  opj_stream_set_skip_function(stream, [](OPJ_OFF_T bytes, void* user) -> OPJ_OFF_T {
    auto* m = static_cast<Memory*>(user);
    if (bytes < 0) {
      if (static_cast<std::size_t>(-bytes) > m->pos) return -1;
      m->pos -= static_cast<std::size_t>(-bytes);
      return bytes;
    }
    const std::size_t left = m->data.size() - std::min(m->pos, m->data.size());
    const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(bytes), left);
    m->pos += n;
    return static_cast<OPJ_OFF_T>(n);
  });
  opj_stream_set_seek_function(stream, [](OPJ_OFF_T to, void* user) -> OPJ_BOOL {
    auto* m = static_cast<Memory*>(user);
    if (to < 0 || static_cast<std::uint64_t>(to) > m->data.size()) return OPJ_FALSE;
    m->pos = static_cast<std::size_t>(to);
    return OPJ_TRUE;
  });
  opj_dparameters_t parameters;
  opj_set_default_decoder_parameters(&parameters);
  opj_image_t* image = nullptr;
  const bool ok = opj_setup_decoder(codec, &parameters) &&
                  opj_read_header(stream, codec, &image) && opj_decode(codec, stream, image) &&
                  opj_end_decompress(codec, stream);
  if (!ok) std::abort();  // OpenJPEG refuses the frame: it must not be data
  const std::size_t pixels = std::size_t{spec.rows} * spec.columns;
  for (std::uint32_t c = 0; c < spec.samples; ++c) {
    const opj_image_comp_t& comp = image->comps[c];
    const std::uint64_t mask = comp.prec >= 64 ? ~0ull : (std::uint64_t{1} << comp.prec) - 1;
    for (std::size_t p = 0; p < pixels; ++p) {
      const auto expected = static_cast<std::uint64_t>(static_cast<std::int64_t>(comp.data[p]));
      if ((vpfuzz::value_at(out, p * spec.samples + c, spec.bits_allocated) & mask) != (expected & mask))
        std::abort();
    }
  }
  opj_image_destroy(image);
  opj_stream_destroy(stream);
  opj_destroy_codec(codec);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return vpfuzz::fuzz_frame(
      data, size, voxpipe::dicom::decode_j2k_frame, kPhotometric,
      [](const voxpipe::dicom::FrameSpec& spec, const voxpipe::dicom::FrameOutcome& outcome,
         std::span<const std::uint8_t> src, std::span<const std::uint8_t> out) {
        const std::string_view pi = spec.photometric;
        const bool monochrome = pi == "MONOCHROME1" || pi == "MONOCHROME2";
        if (outcome.sign_corrected != monochrome || !outcome.warnings.empty()) std::abort();
        if (outcome.photometric != (pi == "YBR_RCT" ? "RGB" : pi)) std::abort();
        check_against_openjpeg(spec, src, out);
      });
}
