// JPEG 2000 Part 1 (1.2.840.10008.1.2.4.90 / .91) and High-Throughput JPEG 2000 (.201 / .202 /
// .203) frames through OpenJPEG (2.5 decodes both), raw codestreams or JP2 files, with the values
// pydicom 3 gives:
// - its plugins write each sample into an integer of 8, 16 or 32 bits by the codestream's
//   precision P (of the dataset's signedness), which NumPy casts by value into the BitsAllocated
//   array;
// - for MONOCHROME1/2 it applies its JPEG 2000 sign correction: where the codestream's
//   signedness differs from PixelRepresentation, a shift left and back by BitsAllocated - P;
// - YBR_ICT / YBR_RCT come out RGB (OpenJPEG applies the inverse component transform).
// P and the signedness are pydicom's reading of the SIZ segment (get_j2k_parameters).
#if VOXPIPE_HAVE_OPENJPEG
#include <openjpeg.h>
#endif

#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "dicom/codecs/codec.hpp"
#include "dicom/codecs/codec_support.hpp"

namespace voxpipe::dicom {

const bool kJ2kLibraryBuilt = VOXPIPE_HAVE_OPENJPEG;

#if VOXPIPE_HAVE_OPENJPEG

namespace {

using codec_support::fail;

struct SizInfo {
  std::size_t codestream = 0;  // offset of SOC
  std::uint32_t width = 0, height = 0, components = 0;
  std::uint32_t precision = 0;
  bool is_signed = false;
};

std::uint32_t be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         p[3];
}

bool is_jp2(std::span<const std::uint8_t> src) {
  static constexpr std::uint8_t signature[12] = {0, 0, 0, 0x0C, 'j', 'P', ' ', ' ',
                                                 0x0D, 0x0A, 0x87, 0x0A};
  return src.size() >= 12 && std::memcmp(src.data(), signature, 12) == 0;
}

// SOC and SIZ of the codestream (inside the jp2c box of a JP2 file, as pydicom looks for it),
// read before OpenJPEG sees the stream so that the sizes are checked before it allocates.
bool read_siz(std::span<const std::uint8_t> src, SizInfo& siz) {
  const std::size_t n = src.size();
  std::size_t offset = 0;
  if (is_jp2(src)) {
    offset = 12;
    bool found = false;
    while (offset + 8 <= n) {
      const std::uint32_t length = be32(src.data() + offset);
      if (std::memcmp(src.data() + offset + 4, "jp2c", 4) == 0) {
        offset += 8;
        found = true;
        break;
      }
      if (length < 8) return false;  // pydicom would loop for ever on 0; OpenJPEG refuses both
      offset += length;
    }
    if (!found) return false;
  }
  if (offset + 43 > n) return false;
  const std::uint8_t* p = src.data() + offset;
  if (p[0] != 0xFF || p[1] != 0x4F || p[2] != 0xFF || p[3] != 0x51) return false;
  const std::uint32_t xsiz = be32(p + 8), ysiz = be32(p + 12), x0 = be32(p + 16),
                      y0 = be32(p + 20);
  if (x0 >= xsiz || y0 >= ysiz) return false;
  siz.codestream = offset;
  siz.width = xsiz - x0;
  siz.height = ysiz - y0;
  siz.components = (std::uint32_t{p[40]} << 8) | p[41];
  siz.precision = (p[42] & 0x7F) + 1u;
  siz.is_signed = (p[42] & 0x80) != 0;
  return true;
}

struct MemoryStream {
  std::span<const std::uint8_t> data;
  std::size_t pos = 0;
};

OPJ_SIZE_T stream_read(void* buffer, OPJ_SIZE_T bytes, void* user) {
  auto* m = static_cast<MemoryStream*>(user);
  if (m->pos >= m->data.size()) return static_cast<OPJ_SIZE_T>(-1);
  const std::size_t count = std::min<std::size_t>(bytes, m->data.size() - m->pos);
  std::memcpy(buffer, m->data.data() + m->pos, count);
  m->pos += count;
  return count;
}

OPJ_OFF_T stream_skip(OPJ_OFF_T bytes, void* user) {
  auto* m = static_cast<MemoryStream*>(user);
  if (bytes < 0) {
    const auto back = static_cast<std::size_t>(-bytes);
    if (back > m->pos) return -1;
    m->pos -= back;
    return bytes;
  }
  // OpenJPEG skips past the end to find out the stream has ended: clamp, as a file would.
  const std::size_t left = m->data.size() - std::min(m->pos, m->data.size());
  const std::size_t count = std::min<std::size_t>(static_cast<std::size_t>(bytes), left);
  m->pos += count;
  return static_cast<OPJ_OFF_T>(count);
}

OPJ_BOOL stream_seek(OPJ_OFF_T to, void* user) {
  auto* m = static_cast<MemoryStream*>(user);
  if (to < 0 || static_cast<std::uint64_t>(to) > m->data.size()) return OPJ_FALSE;
  m->pos = static_cast<std::size_t>(to);
  return OPJ_TRUE;
}

// OpenJPEG reports through callbacks: keep the first error for the exception, drop the rest.
void on_error(const char* msg, void* user) {
  auto* text = static_cast<std::string*>(user);
  if (text->empty() && msg != nullptr) {
    *text = msg;
    while (!text->empty() && (text->back() == '\n' || text->back() == ' ')) text->pop_back();
  }
}
void on_quiet(const char*, void*) {}

// OpenJPEG reports damage it decodes past as warnings, among warnings about valid but unusual
// codestreams (e.g. "Non conformant codestream TPsot==TNsot", which pydicom's own test files
// give, or JP2 boxes it ignores). Its messages are all there is to tell them apart: these are
// the ones that say the data are damaged (malformed HT code-blocks, a stream that ends early,
// lengths that disagree with the stream, missing SOP/EPH markers, bad termination).
bool warns_of_damage(std::string_view msg) {
  static constexpr std::string_view kDamage[] = {
      "Malformed", "malformed", "Corrupt",      "corrupt",      "Stream too short",
      "inconsistent", "truncat", "Expected SOP", "Expected EPH", "PTERM",
      "too long",     "giving up", "Incomplete", "incomplete"};
  for (std::string_view d : kDamage)
    if (msg.find(d) != std::string_view::npos) return true;
  return false;
}

// The damage warnings, in order (the first kept in full, the rest counted).
struct Warnings {
  std::string first;
  unsigned count = 0;
};
void on_warning(const char* msg, void* user) {
  // A message OpenJPEG shows once per process cannot decide about a frame: later decodes of the
  // same damage would pass.
  if (msg == nullptr || !warns_of_damage(msg) ||
      std::string_view(msg).find("will not be displayed again") != std::string_view::npos)
    return;
  auto* w = static_cast<Warnings*>(user);
  if (w->count++ == 0) {
    w->first = msg;
    while (!w->first.empty() && (w->first.back() == '\n' || w->first.back() == ' '))
      w->first.pop_back();
  }
}

struct CodecDeleter {
  void operator()(opj_codec_t* c) const noexcept { opj_destroy_codec(c); }
};
struct StreamDeleter {
  void operator()(opj_stream_t* s) const noexcept { opj_stream_destroy(s); }
};
struct ImageDeleter {
  void operator()(opj_image_t* i) const noexcept { opj_image_destroy(i); }
};

}  // namespace

FrameOutcome decode_j2k_frame(std::span<const std::uint8_t> src, const FrameSpec& spec,
                              std::span<std::uint8_t> out) {
  const std::uint64_t count = codec_support::checked_sample_count(spec, out);
  SizInfo siz;
  if (!read_siz(src, siz)) {
    fail(spec, ErrorCode::corrupt,
         "expected a JPEG 2000 codestream (SOC then SIZ) or a JP2 file with one, but found " +
             std::to_string(src.size()) + " bytes without");
  }
  if (siz.width != spec.columns || siz.height != spec.rows || siz.components != spec.samples) {
    fail(spec, ErrorCode::format,
         "expected a JPEG 2000 frame of " + std::to_string(spec.rows) + " x " +
             std::to_string(spec.columns) + " x " + std::to_string(spec.samples) +
             " (Rows x Columns x SamplesPerPixel), but the codestream has " +
             std::to_string(siz.height) + " x " + std::to_string(siz.width) + " x " +
             std::to_string(siz.components));
  }
  if (siz.precision > spec.bits_allocated) {
    fail(spec, ErrorCode::format,
         "expected a JPEG 2000 precision of at most " + std::to_string(spec.bits_allocated) +
             " (BitsAllocated), but the codestream has " + std::to_string(siz.precision));
  }

  std::string message;
  MemoryStream memory{src, 0};
  std::unique_ptr<opj_codec_t, CodecDeleter> codec(
      opj_create_decompress(is_jp2(src) ? OPJ_CODEC_JP2 : OPJ_CODEC_J2K));
  std::unique_ptr<opj_stream_t, StreamDeleter> stream(opj_stream_create(64 * 1024, OPJ_TRUE));
  if (!codec || !stream) fail(spec, ErrorCode::limit, "JPEG 2000: cannot create a decoder");
  opj_set_error_handler(codec.get(), on_error, &message);
  Warnings warnings;
  opj_set_warning_handler(codec.get(), on_warning, &warnings);
  opj_set_info_handler(codec.get(), on_quiet, nullptr);
  opj_stream_set_user_data(stream.get(), &memory, nullptr);
  opj_stream_set_user_data_length(stream.get(), src.size());
  opj_stream_set_read_function(stream.get(), stream_read);
  opj_stream_set_skip_function(stream.get(), stream_skip);
  opj_stream_set_seek_function(stream.get(), stream_seek);

  auto library_error = [&](const char* step) {
    fail(spec, ErrorCode::corrupt,
         std::string("JPEG 2000 ") + step + ": " +
             (message.empty() ? std::string("OpenJPEG failed") : message));
  };
  opj_dparameters_t parameters;
  opj_set_default_decoder_parameters(&parameters);
  if (!opj_setup_decoder(codec.get(), &parameters)) library_error("setup");
  opj_image_t* raw_image = nullptr;
  if (!opj_read_header(stream.get(), codec.get(), &raw_image)) {
    opj_image_destroy(raw_image);
    library_error("header");
  }
  std::unique_ptr<opj_image_t, ImageDeleter> image(raw_image);

  // What OpenJPEG will decode to, against the dataset (a JP2 header can add or map components).
  auto check_components = [&](bool decoded) {
    if (image->numcomps != spec.samples) {
      fail(spec, ErrorCode::format,
           "expected " + std::to_string(spec.samples) +
               " JPEG 2000 components (SamplesPerPixel), but OpenJPEG gives " +
               std::to_string(image->numcomps));
    }
    for (std::uint32_t c = 0; c < image->numcomps; ++c) {
      const opj_image_comp_t& comp = image->comps[c];
      if (comp.w != spec.columns || comp.h != spec.rows || comp.dx != 1 || comp.dy != 1 ||
          comp.prec != image->comps[0].prec || comp.sgnd != image->comps[0].sgnd ||
          comp.prec < 1 || comp.prec > spec.bits_allocated) {
        fail(spec, ErrorCode::format,
             "expected JPEG 2000 component " + std::to_string(c) + " of " +
                 std::to_string(spec.rows) + " x " + std::to_string(spec.columns) +
                 " samples like the others, but found " + std::to_string(comp.h) + " x " +
                 std::to_string(comp.w) + " (subsampling " + std::to_string(comp.dy) + " x " +
                 std::to_string(comp.dx) + ", precision " + std::to_string(comp.prec) + ")");
      }
      if (decoded && comp.data == nullptr) library_error("decode");
    }
  };
  check_components(false);
  if (!opj_decode(codec.get(), stream.get(), image.get())) library_error("decode");
  if (!opj_end_decompress(codec.get(), stream.get())) library_error("end of codestream");
  check_components(true);
  FrameOutcome outcome;
  if (warnings.count != 0) {
    std::string warning = "JPEG 2000: " + warnings.first;
    if (warnings.count > 1)
      warning += " (and " + std::to_string(warnings.count - 1) + " more OpenJPEG warnings)";
    codec_support::damaged(spec, outcome, std::move(warning));
  }

  const std::string_view pi = spec.photometric;
  const bool monochrome = pi == "MONOCHROME1" || pi == "MONOCHROME2";
  outcome.photometric = (pi == "YBR_ICT" || pi == "YBR_RCT") ? "RGB" : std::string(pi);
  outcome.sign_corrected = monochrome;

  const std::uint32_t precision = siz.precision;
  const std::uint32_t width_bits = precision <= 8 ? 8 : precision <= 16 ? 16 : 32;
  const std::uint32_t shift =
      monochrome && siz.is_signed != spec.is_signed ? spec.bits_allocated - precision : 0;
  const std::uint64_t pixels = count / spec.samples;
  for (std::uint32_t c = 0; c < spec.samples; ++c) {
    const OPJ_INT32* data = image->comps[c].data;
    for (std::uint64_t i = 0; i < pixels; ++i) {
      std::int64_t value = codec_support::as_width(data[i], width_bits, spec.is_signed);
      if (shift != 0) {
        value = codec_support::shift_round_trip(value, spec.bits_allocated, shift, spec.is_signed);
      }
      codec_support::store_sample(out, i * spec.samples + c, value, spec.bits_allocated);
    }
  }
  return outcome;
}

#else  // VOXPIPE_HAVE_OPENJPEG

FrameOutcome decode_j2k_frame(std::span<const std::uint8_t>, const FrameSpec& spec,
                              std::span<std::uint8_t>) {
  codec_support::fail_not_built(
      spec, "JPEG 2000 (transfer syntaxes 1.2.840.10008.1.2.4.90 / .91 / .201 / .202 / .203)",
      "OpenJPEG", "libopenjp2-7-dev");
}

#endif  // VOXPIPE_HAVE_OPENJPEG

}  // namespace voxpipe::dicom
