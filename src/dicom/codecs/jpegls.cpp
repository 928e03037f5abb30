// JPEG-LS lossless and near-lossless frames (1.2.840.10008.1.2.4.80 / .81) through CharLS's C
// API, with the values pydicom 3 gives:
// - its plugins decode samples of precision P <= 8 into bytes and P <= 16 into 16-bit words of
//   the dataset's signedness, which NumPy then casts by value into the BitsAllocated array;
// - with PixelRepresentation 1 it applies its JPEG-LS sign correction (JPEG-LS has no signed
//   samples): a shift left and back by BitsAllocated - P, P from the SOF55 segment;
// - three components come out colour-by-pixel whatever the interleave mode.
#if VOXPIPE_HAVE_CHARLS
#include <charls/charls.h>
#endif

#include <cstring>
#include <memory>
#include <vector>

#include "dicom/codecs/codec.hpp"
#include "dicom/codecs/codec_support.hpp"

namespace voxpipe::dicom {

const bool kJpeglsLibraryBuilt = VOXPIPE_HAVE_CHARLS;

#if VOXPIPE_HAVE_CHARLS

namespace {

using codec_support::fail;

struct DecoderDeleter {
  void operator()(charls_jpegls_decoder* d) const noexcept { charls_jpegls_decoder_destroy(d); }
};

// CharLS 2.4 stops at once when a scan's data runs into a marker too early, but not when it runs
// into the end of the buffer: there its count of valid bits goes negative and it reads zero bits
// about 2^32 times (seconds per frame) before failing (upstream issue 334, not in Debian's
// 2.4.1). So a stream whose last marker is not EOI is decoded from a copy that ends with one;
// streams from any encoder end with EOI and are passed as they are. A stream that decodes only
// with the added EOI is still refused, as CharLS refuses it.
bool last_marker_is_eoi(std::span<const std::uint8_t> src) {
  for (std::size_t i = src.size(); i-- > 0;) {
    if (src[i] != 0xFF) continue;
    if (i + 1 == src.size()) return true;  // a trailing 0xFF is a marker to CharLS
    if (src[i + 1] & 0x80) return src[i + 1] == 0xD9;
  }
  return false;
}

// CharLS 2.4 sizes the destination from the first scan's interleave mode but takes each later
// scan's mode as it comes: a 3-component frame whose first scan is one component (mode none)
// and whose second scan holds all three (mode line or sample) makes it write three planes'
// worth into one plane's place, past the end of the destination (GHSA-mqrg-gfc8-73ff and
// relatives, fixed upstream after 2.4.1). So the scans are checked first: every scan CharLS
// decodes must have the first scan's mode, with one component per scan in mode none and all of
// them otherwise. The walk over the entropy-coded data only looks for markers (0xFF followed
// by a byte with its high bit set, other than RSTn), as CharLS's reader does.
void check_scan_structure(std::span<const std::uint8_t> src, const FrameSpec& spec,
                          std::uint32_t components) {
  const std::size_t n = src.size();
  std::size_t at = 2;  // after SOI (CharLS has checked it in read_header)
  int first_mode = -1;
  std::uint32_t scans = 0, wanted = 1;
  while (scans < wanted) {
    while (at < n && src[at] != 0xFF) ++at;  // between segments: CharLS would refuse the bytes
    while (at < n && src[at] == 0xFF) ++at;  // fill bytes
    if (at >= n) return;                     // CharLS reports the missing scan itself
    const std::uint8_t marker = src[at++];
    if (marker == 0xD8 || marker == 0xD9) return;
    if (at + 2 > n) return;
    const std::size_t length = (std::size_t{src[at]} << 8) | src[at + 1];
    if (length < 2 || at + length > n) return;
    const std::uint8_t* body = src.data() + at + 2;
    const std::size_t body_size = length - 2;
    at += length;
    if (marker != 0xDA) continue;
    if (body_size < 1 || body_size < 1 + 2 * std::size_t{body[0]} + 3)
      fail(spec, ErrorCode::corrupt, "JPEG-LS: a start-of-scan segment is too short");
    const std::uint32_t in_scan = body[0];
    const int mode = body[1 + 2 * in_scan + 1];
    if (first_mode < 0) {
      first_mode = mode;
      wanted = mode == 0 ? components : 1;
    }
    if (mode != first_mode || in_scan != (mode == 0 ? 1u : components))
      fail(spec, ErrorCode::unsupported,
           "JPEG-LS: scan " + std::to_string(scans + 1) + " has " + std::to_string(in_scan) +
               " component(s) in interleave mode " + std::to_string(mode) + ", but the first scan "
               "has interleave mode " + std::to_string(first_mode) + " for a frame of " +
               std::to_string(components) + " component(s)");
    ++scans;
    // Skip the scan's entropy-coded data, up to the next marker that is not a restart marker.
    while (at + 1 < n && !(src[at] == 0xFF && (src[at + 1] & 0x80) &&
                           !(src[at + 1] >= 0xD0 && src[at + 1] <= 0xD7)))
      ++at;
  }
}

void check(const FrameSpec& spec, charls_jpegls_errc errc, const char* step) {
  if (errc == charls_jpegls_errc{}) return;
  fail(spec, ErrorCode::corrupt,
       std::string("JPEG-LS ") + step + ": " + charls_get_error_message(errc));
}

}  // namespace

FrameOutcome decode_jpegls_frame(std::span<const std::uint8_t> src, const FrameSpec& spec,
                                 std::span<std::uint8_t> out) {
  const std::uint64_t count = codec_support::checked_sample_count(spec, out);
  const codec_support::JpegMarkerInfo info = codec_support::read_jpeg_markers(src);

  std::vector<std::uint8_t> terminated;
  if (!last_marker_is_eoi(src)) {
    terminated.reserve(src.size() + 2);
    terminated.assign(src.begin(), src.end());
    terminated.push_back(0xFF);
    terminated.push_back(0xD9);
    src = terminated;
  }

  std::unique_ptr<charls_jpegls_decoder, DecoderDeleter> decoder(charls_jpegls_decoder_create());
  if (!decoder) fail(spec, ErrorCode::limit, "JPEG-LS: cannot create a decoder (out of memory)");
  check(spec, charls_jpegls_decoder_set_source_buffer(decoder.get(), src.data(), src.size()),
        "source");
  check(spec, charls_jpegls_decoder_read_header(decoder.get()), "header");
  charls_frame_info frame{};
  check(spec, charls_jpegls_decoder_get_frame_info(decoder.get(), &frame), "frame info");
  charls_interleave_mode mode{};
  check(spec, charls_jpegls_decoder_get_interleave_mode(decoder.get(), &mode), "interleave mode");

  if (frame.width != spec.columns || frame.height != spec.rows ||
      static_cast<std::uint32_t>(frame.component_count) != spec.samples) {
    fail(spec, ErrorCode::format,
         "expected a JPEG-LS frame of " + std::to_string(spec.rows) + " x " +
             std::to_string(spec.columns) + " x " + std::to_string(spec.samples) +
             " (Rows x Columns x SamplesPerPixel), but the codestream has " +
             std::to_string(frame.height) + " x " + std::to_string(frame.width) + " x " +
             std::to_string(frame.component_count));
  }
  const auto bits = static_cast<std::uint32_t>(frame.bits_per_sample);
  // pydicom takes P from its own reading of SOF55, BitsStored where that fails; both agree with
  // CharLS's on every stream CharLS decodes.
  const std::uint32_t precision = info.parsed ? info.precision : spec.bits_stored;
  if (bits < 2 || bits > 16 || bits > spec.bits_allocated || precision != bits) {
    fail(spec, ErrorCode::format,
         "expected a JPEG-LS sample precision of at most " + std::to_string(spec.bits_allocated) +
             " (BitsAllocated), but the codestream has " + std::to_string(bits));
  }
  const std::uint32_t width_bits = bits <= 8 ? 8 : 16;  // what CharLS writes per sample
  const std::uint64_t size = count * (width_bits / 8);
  std::size_t library_size = 0;
  check(spec, charls_jpegls_decoder_get_destination_size(decoder.get(), 0, &library_size),
        "destination size");
  if (library_size != size) {
    fail(spec, ErrorCode::format,
         "expected a decoded JPEG-LS frame of " + std::to_string(size) +
             " bytes, but CharLS needs " + std::to_string(library_size));
  }

  check_scan_structure(src, spec, static_cast<std::uint32_t>(frame.component_count));

  const bool planar = spec.samples == 3 && mode == charls_interleave_mode{};  // mode none
  const bool direct = !planar && width_bits == spec.bits_allocated && !spec.is_signed;
  std::vector<std::uint8_t> buffer;
  std::uint8_t* dest = out.data();
  if (!direct) {
    buffer.resize(size);
    dest = buffer.data();
  }
  check(spec, charls_jpegls_decoder_decode_to_buffer(decoder.get(), dest, size, 0), "decode");
  if (!terminated.empty()) fail(spec, ErrorCode::corrupt, "JPEG-LS: the frame has no EOI marker");

  FrameOutcome outcome;
  outcome.photometric = codec_support::conform_jpeg_photometric(info, spec, false);
  outcome.sign_corrected = spec.is_signed;
  if (direct) return outcome;

  const std::uint64_t pixels = count / spec.samples;
  const std::uint32_t shift = spec.bits_allocated - precision;
  for (std::uint64_t i = 0; i < count; ++i) {
    // Colour-by-pixel index i reads plane (i % samples) at pixel (i / samples) when planar.
    const std::uint64_t from = planar ? (i % spec.samples) * pixels + i / spec.samples : i;
    std::int64_t raw;
    if (width_bits == 8) {
      raw = buffer[from];
    } else {
      std::uint16_t v;
      std::memcpy(&v, buffer.data() + from * 2, 2);
      raw = v;
    }
    std::int64_t value = codec_support::as_width(raw, width_bits, spec.is_signed);
    if (spec.is_signed) {
      value = codec_support::shift_round_trip(value, spec.bits_allocated, shift, true);
    }
    codec_support::store_sample(out, i, value, spec.bits_allocated);
  }
  return outcome;
}

#else  // VOXPIPE_HAVE_CHARLS

FrameOutcome decode_jpegls_frame(std::span<const std::uint8_t>, const FrameSpec& spec,
                                 std::span<std::uint8_t>) {
  codec_support::fail_not_built(spec, "JPEG-LS (transfer syntaxes 1.2.840.10008.1.2.4.80 / .81)",
                                "CharLS", "libcharls-dev");
}

#endif  // VOXPIPE_HAVE_CHARLS

}  // namespace voxpipe::dicom
