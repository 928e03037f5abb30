// The pixel layer: the Image Pixel module checked as pydicom 3 checks it, frames located (native
// by offset, encapsulated by pydicom's frame rules), decoded (natively here, encapsulated through
// src/dicom/codecs/), corrected and colour-converted as pydicom's pixel_array does, and the
// modality transform of pydicom's apply_modality_lut. Frames are decoded in parallel.
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/checked.hpp"
#include "core/file.hpp"
#include "core/thread_pool.hpp"
#include "dicom/codecs/codec.hpp"
#include "dicom/modality.hpp"
#include "dicom/reader.hpp"
#include "voxpipe/dicom.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/threads.hpp"

static_assert(std::endian::native == std::endian::little,
              "the pixel layer writes host byte order assuming a little-endian host");

namespace voxpipe {
namespace {

using dicom::apply_modality;
using dicom::Modality;

constexpr DicomTag kSamplesPerPixel = 0x00280002, kPhotometric = 0x00280004,
                   kPlanarConfiguration = 0x00280006, kNumberOfFrames = 0x00280008,
                   kRows = 0x00280010, kColumns = 0x00280011, kBitsAllocated = 0x00280100,
                   kBitsStored = 0x00280101, kHighBit = 0x00280102,
                   kPixelRepresentation = 0x00280103, kRescaleIntercept = 0x00281052,
                   kRescaleSlope = 0x00281053, kModalityLutSequence = 0x00283000,
                   kLutDescriptor = 0x00283002, kLutData = 0x00283006, kPixelData = 0x7FE00010,
                   kFloatPixelData = 0x7FE00008;

// Decoded frames may be at most this many times the encoded bytes (beyond kLimitFloor): RLE
// expands at most 64 times, lossless JPEG-LS and JPEG 2000 of flat images far more, but not a
// thousand frames of 65535 x 65535 from a few bytes.
constexpr std::uint64_t kMaxExpansion = 4096;
constexpr std::uint64_t kLimitFloor = std::uint64_t{256} << 20;

std::string field_name(DicomTag tag) {
  std::string s = dicom_tag_name(tag);
  if (const char* kw = dicom_tag_keyword(tag)) s += std::string(" ") + kw;
  return s;
}

std::string frame_field(std::uint64_t frame) { return "frame " + std::to_string(frame); }

// The file's bytes: the caller's span, or the file at file.path (pread, thread-safe), checked
// to be the file that was parsed (DicomFile::identity) when it is opened and after each read:
// the offsets and pixel module the parse found describe that version of it only.
class Source {
 public:
  Source(const DicomFile& f, std::span<const std::uint8_t> bytes)
      : name_(f.path), bytes_(bytes), identity_(f.identity) {
    if (!bytes.empty()) return;
    file_.emplace(f.path);
    if (identity_) file_->check_unchanged(*identity_, false);
  }
  std::uint64_t size() const { return file_ ? file_->size() : bytes_.size(); }
  const std::string& name() const { return name_; }
  // Exactly dst.size() bytes at `offset`, else Error(truncated) naming `field`.
  void read(std::uint64_t offset, std::span<std::uint8_t> dst, const std::string& field) const {
    if (offset > size() || dst.size() > size() - offset)
      throw Error(ErrorCode::truncated, name_, field,
                  "needs " + std::to_string(dst.size()) + " bytes, the file ends first", offset);
    if (!file_) {
      if (!dst.empty()) std::memcpy(dst.data(), bytes_.data() + offset, dst.size());
      return;
    }
    const std::size_t got = file_->read_at(offset, std::as_writable_bytes(dst));
    // Rewritten while it was read: what was read may be partly the new file.
    if (identity_) file_->check_unchanged(*identity_, false);
    if (got != dst.size())
      throw Error(ErrorCode::truncated, name_, field, "the file ends inside the data", offset);
  }
  // Inflated bytes [begin, begin + dst.size()) of a deflated dataset stream, which starts at
  // file offset `stream_offset`.
  void read_inflated(std::uint64_t stream_offset, std::uint64_t begin,
                     std::span<std::uint8_t> dst, const std::string& field) const {
    std::optional<dicom::MemoryBackend> memory;
    std::optional<dicom::FileBackend> disk;
    dicom::Backend* backend;
    if (file_) backend = &disk.emplace(*file_);
    else backend = &memory.emplace(bytes_);
    dicom::Reader raw(*backend, 0);
    if (raw.skip(stream_offset) != stream_offset)
      throw Error(ErrorCode::truncated, name_, field, "the file ends before the dataset",
                  stream_offset);
    dicom::InflateBackend inflater(raw, name_, stream_offset, begin + dst.size());
    const bool whole =
        inflater.discard(begin) == begin && inflater.pull(dst.data(), dst.size()) == dst.size();
    if (file_ && identity_) file_->check_unchanged(*identity_, false);
    if (!whole)
      throw Error(ErrorCode::truncated, name_, field,
                  "the deflated dataset ends before the pixel data", begin);
  }

 private:
  std::string name_;
  std::span<const std::uint8_t> bytes_;
  std::optional<FileIdentity> identity_;
  std::optional<core::InputFile> file_;
};

bool is_known_photometric(const std::string& p) {
  static const char* const kNames[] = {
      "MONOCHROME1", "MONOCHROME2", "PALETTE COLOR", "RGB", "HSV", "ARGB", "CMYK", "YBR_FULL",
      "YBR_FULL_422", "YBR_PARTIAL_422", "YBR_PARTIAL_420", "YBR_ICT", "YBR_RCT", "XYB"};
  for (const char* n : kNames)
    if (p == n) return true;
  return false;
}

bool is_ybr_full(std::string_view p) { return p == "YBR_FULL" || p == "YBR_FULL_422"; }

// Element size of the stored values (0 for bit-packed data).
std::uint32_t stored_size(const DicomPixelInfo& info) { return info.bits_allocated / 8; }

// Bytes of one native frame as stored, pydicom's frame_length(unit="bytes"): bit-packed frames
// are not padded (fractional), YBR_FULL_422 keeps two thirds.
double native_frame_length(const DicomPixelInfo& info) {
  const double pixels = double(info.rows) * info.columns * info.samples_per_pixel;
  if (info.bits_allocated == 1) return pixels / 8;
  double length = pixels * (info.bits_allocated / 8);
  if (info.photometric == "YBR_FULL_422") length = std::floor(length / 3) * 2;
  return length;
}

// ---- per-frame value processing (pydicom's order: reshape, bit correction, colour) ----------

// Colour-by-plane (samples, rows, columns) to colour-by-pixel, through `scratch`.
void unplanarize(std::uint8_t* frame, std::size_t pixels, std::size_t samples, std::size_t size,
                 std::vector<std::uint8_t>& scratch) {
  scratch.assign(frame, frame + pixels * samples * size);
  for (std::size_t s = 0; s < samples; ++s) {
    const std::uint8_t* plane = scratch.data() + s * pixels * size;
    for (std::size_t p = 0; p < pixels; ++p)
      std::memcpy(frame + (p * samples + s) * size, plane + p * size, size);
  }
}

template <typename T>
void shift_correct(T* v, std::size_t n, unsigned shift) {
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<T>(static_cast<T>(v[i] << shift) >> shift);
}

// pydicom's correct_unused_bits: a shift left and back by BitsAllocated - BitsStored in the
// output's integer type (arithmetic for signed types, so the value is sign-extended).
void correct_unused_bits(std::uint8_t* frame, std::size_t n, const DicomPixelInfo& info) {
  const unsigned shift = info.bits_allocated - info.bits_stored;
  switch (info.dtype) {
    case DType::u8: shift_correct(frame, n, shift); break;
    case DType::i8: shift_correct(reinterpret_cast<std::int8_t*>(frame), n, shift); break;
    case DType::u16: shift_correct(reinterpret_cast<std::uint16_t*>(frame), n, shift); break;
    case DType::i16: shift_correct(reinterpret_cast<std::int16_t*>(frame), n, shift); break;
    case DType::u32: shift_correct(reinterpret_cast<std::uint32_t*>(frame), n, shift); break;
    case DType::i32: shift_correct(reinterpret_cast<std::int32_t*>(frame), n, shift); break;
    case DType::u64: shift_correct(reinterpret_cast<std::uint64_t*>(frame), n, shift); break;
    case DType::i64: shift_correct(reinterpret_cast<std::int64_t*>(frame), n, shift); break;
    default: break;
  }
}

// pydicom's _convert_YBR_FULL_to_RGB on 8-bit data: float32 arithmetic, the same matrix, then
// floor(x + 0.5) clipped to [0, 255]. The zero terms of the matrix are exact and left out.
void ybr_full_to_rgb(std::uint8_t* px, std::size_t pixels) {
  const float cr_r = 1.402f;
  const float cb_g = static_cast<float>(-0.114 * 1.772 / 0.587);
  const float cr_g = static_cast<float>(-0.299 * 1.402 / 0.587);
  const float cb_b = 1.772f;
  const auto clip = [](float x) {
    x = std::floor(x + 0.5f);
    return static_cast<std::uint8_t>(x < 0 ? 0 : x > 255 ? 255 : x);
  };
  for (std::size_t i = 0; i < pixels; ++i, px += 3) {
    const float y = px[0], cb = float(px[1]) - 128.0f, cr = float(px[2]) - 128.0f;
    // numpy's matmul sums over the inner dimension in order: y*1 + cb*m[1] + cr*m[2].
    const float r = (y + cb * 0.0f) + cr * cr_r;
    const float g = (y + cb * cb_g) + cr * cr_g;
    const float b = (y + cb * cb_b) + cr * 0.0f;
    px[0] = clip(r);
    px[1] = clip(g);
    px[2] = clip(b);
  }
}

// The steps after a frame's values are in place: bit correction and colour conversion.
void finish_frame(std::uint8_t* frame, const DicomPixelInfo& info, std::string_view photometric,
                  bool sign_corrected, const DicomDecodeOptions& options, const std::string& name,
                  std::uint64_t index, std::uint64_t offset) {
  const std::size_t values = std::size_t(info.rows) * info.columns * info.samples_per_pixel;
  // pydicom corrects unused bits for every syntax but JPEG-LS and JPEG 2000, whose decoders
  // apply their own sign correction (or none) instead.
  if (!sign_corrected && info.codec != DicomCodec::jpeg_ls && info.codec != DicomCodec::jpeg2000 &&
      info.tag == kPixelData && info.bits_allocated > info.bits_stored && info.bits_allocated > 1)
    correct_unused_bits(frame, values, info);
  if (options.as_rgb && info.samples_per_pixel == 3 && is_ybr_full(photometric)) {
    if (info.dtype != DType::u8)
      throw Error(ErrorCode::unsupported, name, frame_field(index),
                  "YBR_FULL to RGB conversion needs 8-bit unsigned data (as in pydicom); "
                  "decode with as_rgb = false",
                  offset);
    ybr_full_to_rgb(frame, std::size_t(info.rows) * info.columns);
  }
}

// A native frame's stored bytes to pixel_array values. `stored` holds the bytes from `skip_bits`
// (bit-packed) or from the frame's first byte.
void native_to_values(const std::uint8_t* stored, std::size_t stored_length,
                      unsigned skip_bits, const DicomPixelInfo& info, bool big_endian,
                      std::uint8_t* frame, std::vector<std::uint8_t>& scratch) {
  const std::size_t pixels = std::size_t(info.rows) * info.columns;
  const std::size_t values = pixels * info.samples_per_pixel;
  if (info.bits_allocated == 1) {
    for (std::size_t i = 0; i < values; ++i) {
      const std::size_t bit = i + skip_bits;
      frame[i] = (stored[bit >> 3] >> (bit & 7)) & 1;
    }
    return;
  }
  const std::size_t size = stored_size(info);
  if (info.photometric == "YBR_FULL_422") {
    // PS3.3 C.7.6.3.1.2: Y1 Y2 Cb Cr -> Y1 Cb Cr Y2 Cb Cr (pydicom's expansion).
    const std::size_t groups = stored_length / (4 * size);
    for (std::size_t g = 0; g < groups && (g + 1) * 6 * size <= values * size; ++g) {
      const std::uint8_t* in = stored + g * 4 * size;
      std::uint8_t* o = frame + g * 6 * size;
      std::memcpy(o, in, size);
      std::memcpy(o + size, in + 2 * size, size);
      std::memcpy(o + 2 * size, in + 3 * size, size);
      std::memcpy(o + 3 * size, in + size, size);
      std::memcpy(o + 4 * size, in + 2 * size, size);
      std::memcpy(o + 5 * size, in + 3 * size, size);
    }
  } else if (stored != frame) {
    std::memcpy(frame, stored, values * size);
  }
  if (big_endian && size > 1) {
    for (std::size_t i = 0; i < values; ++i) std::reverse(frame + i * size, frame + (i + 1) * size);
  }
  if (info.samples_per_pixel > 1 && info.planar_configuration == 1)
    unplanarize(frame, pixels, info.samples_per_pixel, size, scratch);
}

// ---- the modality transform (pydicom's apply_modality_lut) ----------------------------------

Modality read_modality(const DicomFile& file, const Source& source) {
  Modality m;
  const DicomDataset& ds = file.dataset;
  const std::string& name = file.path;
  const auto& items = ds.items(kModalityLutSequence);
  if (!items.empty()) {
    const DicomDataset& item = items.front();
    const DicomElement* desc = item.find(kLutDescriptor);
    const auto d = item.integers(kLutDescriptor);
    if (!desc || d.size() < 3)
      throw Error(ErrorCode::format, name, field_name(kLutDescriptor),
                  "the Modality LUT needs a LUT Descriptor of 3 values",
                  desc ? std::optional<std::uint64_t>(desc->value_offset) : std::nullopt);
    // The first value is always unsigned (PS3.3 C.11.1.1.1), 0 meaning 65536.
    const std::uint64_t entries = d[0] == 0 ? 65536 : static_cast<std::uint16_t>(d[0]);
    m.first_map = d[1];
    const DicomElement* data = item.find(kLutData);
    if (!data)
      throw Error(ErrorCode::format, name, field_name(kLutData), "the Modality LUT has no data");
    std::vector<std::uint8_t> raw;
    if (data->value_read) {
      raw = data->value;
    } else {
      if (file.offsets_in_inflated_stream)
        source.read_inflated(file.dataset_offset, data->value_offset,
                             (raw.resize(data->length), raw), field_name(kLutData));
      else
        source.read(data->value_offset, (raw.resize(data->length), raw), field_name(kLutData));
    }
    if (raw.size() / 2 < entries)
      throw Error(ErrorCode::format, name, field_name(kLutData),
                  "holds " + std::to_string(raw.size() / 2) + " entries, the descriptor says " +
                      std::to_string(entries),
                  data->value_offset);
    m.lut.resize(entries);
    for (std::size_t i = 0; i < entries; ++i)
      m.lut[i] = ds.big_endian() ? std::uint16_t(raw[2 * i] << 8 | raw[2 * i + 1])
                                 : std::uint16_t(raw[2 * i] | raw[2 * i + 1] << 8);
    m.kind = Modality::Kind::lut;
  } else if (ds.contains(kRescaleSlope) && ds.contains(kRescaleIntercept)) {
    const auto slope = ds.number(kRescaleSlope), intercept = ds.number(kRescaleIntercept);
    if (!slope || !intercept)
      throw Error(ErrorCode::format, name, field_name(!slope ? kRescaleSlope : kRescaleIntercept),
                  "is empty");
    m.kind = Modality::Kind::rescale;
    m.slope = *slope;
    m.intercept = *intercept;
  }
  return m;
}

// Writes one decoded frame (`values`, in info.dtype) to its place in the output.
void emit_frame(const std::uint8_t* values, std::uint8_t* dst, const DicomPixelInfo& info,
                const DicomDecodeOptions& options, const Modality& modality) {
  const std::size_t n = std::size_t(info.rows) * info.columns * info.samples_per_pixel;
  if (!options.modality) {
    if (values != dst) std::memcpy(dst, values, info.frame_bytes);
  } else {
    apply_modality(values, info.dtype, dst, *options.modality, n, modality);
  }
}

// ---- encapsulated frames -------------------------------------------------------------------

// The start-of-frame marker of a JPEG stream (0xC0..0xCF but DHT, JPG, DAC), or 0.
int jpeg_sof(std::span<const std::uint8_t> s) {
  std::size_t i = 2;  // after SOI
  while (i + 4 <= s.size()) {
    if (s[i] != 0xFF) return 0;
    const int marker = s[i + 1];
    if (marker == 0xFF) { ++i; continue; }
    if (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC)
      return marker;
    if (marker == 0xD8 || (marker >= 0xD0 && marker <= 0xD7) || marker == 0x01) { i += 2; continue; }
    i += 2 + (std::size_t(s[i + 2]) << 8 | s[i + 3]);
  }
  return 0;
}

dicom::FrameOutcome decode_encapsulated(DicomCodec codec, std::span<const std::uint8_t> src,
                                        const dicom::FrameSpec& spec,
                                        std::span<std::uint8_t> out) {
  switch (codec) {
    case DicomCodec::rle: return dicom::decode_rle_frame(src, spec, out);
    case DicomCodec::jpeg:
    case DicomCodec::jpeg_lossless:
      // The stream's own process decides (files are seen labelled with the wrong JPEG syntax).
      if (jpeg_sof(src) == 0xC3) return dicom::decode_jpeg_lossless_frame(src, spec, out);
      if (codec == DicomCodec::jpeg_lossless && jpeg_sof(src) == 0)
        return dicom::decode_jpeg_lossless_frame(src, spec, out);
      return dicom::decode_jpeg_frame(src, spec, out);
    case DicomCodec::jpeg_ls: return dicom::decode_jpegls_frame(src, spec, out);
    case DicomCodec::jpeg2000: return dicom::decode_j2k_frame(src, spec, out);
    default:
      throw Error(ErrorCode::unsupported, std::string(spec.name), frame_field(spec.frame),
                  std::string("no decoder for ") + dicom_codec_name(codec), spec.offset);
  }
}

// Raw deflate of one frame (Deflated Image Frame Compression) into exactly dst.size() bytes.
void inflate_frame(std::span<const std::uint8_t> src, std::span<std::uint8_t> dst,
                   const std::string& name, std::uint64_t index, std::uint64_t offset) {
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK)
    throw Error(ErrorCode::io, name, frame_field(index), "zlib could not start", offset);
  z.next_in = const_cast<Bytef*>(src.data());
  z.avail_in = static_cast<uInt>(src.size());
  z.next_out = dst.data();
  z.avail_out = static_cast<uInt>(dst.size());
  const int rc = inflate(&z, Z_FINISH);
  const std::size_t produced = dst.size() - z.avail_out;
  inflateEnd(&z);
  if (rc != Z_STREAM_END && !(rc == Z_BUF_ERROR && produced == dst.size()))
    throw Error(ErrorCode::corrupt, name, frame_field(index),
                rc == Z_BUF_ERROR || rc == Z_OK ? "the deflated frame ends early"
                                                : "the deflated frame does not inflate",
                offset);
  if (produced != dst.size())
    throw Error(ErrorCode::format, name, frame_field(index),
                "inflates to " + std::to_string(produced) + " bytes, the frame needs " +
                    std::to_string(dst.size()),
                offset);
}

}  // namespace

const char* dicom_codec_name(DicomCodec codec) noexcept {
  switch (codec) {
    case DicomCodec::native: return "native";
    case DicomCodec::deflated_native: return "deflated dataset";
    case DicomCodec::deflated_frames: return "deflated image frames";
    case DicomCodec::rle: return "RLE Lossless";
    case DicomCodec::jpeg: return "JPEG";
    case DicomCodec::jpeg_lossless: return "JPEG Lossless";
    case DicomCodec::jpeg_ls: return "JPEG-LS";
    case DicomCodec::jpeg2000: return "JPEG 2000";
    case DicomCodec::unsupported: return "unsupported";
  }
  return "unsupported";
}

bool dicom_codec_built(DicomCodec codec, const char** library) noexcept {
  const char* lib = "";
  bool built = true;
  switch (codec) {
    case DicomCodec::jpeg: lib = "libjpeg-turbo"; built = dicom::kJpegLibraryBuilt; break;
    case DicomCodec::jpeg_ls: lib = "CharLS"; built = dicom::kJpeglsLibraryBuilt; break;
    case DicomCodec::jpeg2000: lib = "OpenJPEG"; built = dicom::kJ2kLibraryBuilt; break;
    case DicomCodec::unsupported: built = false; break;
    default: break;
  }
  if (library) *library = lib;
  return built;
}

DicomCodec dicom_codec_of(std::string_view uid) noexcept {
  if (uid.empty() || uid == "1.2.840.10008.1.2" || uid == "1.2.840.10008.1.2.1" ||
      uid == "1.2.840.10008.1.2.2")
    return DicomCodec::native;
  if (uid == "1.2.840.10008.1.2.1.99") return DicomCodec::deflated_native;
  if (uid == "1.2.840.10008.1.2.8.1") return DicomCodec::deflated_frames;
  if (uid == "1.2.840.10008.1.2.5") return DicomCodec::rle;
  if (uid == "1.2.840.10008.1.2.4.50" || uid == "1.2.840.10008.1.2.4.51") return DicomCodec::jpeg;
  if (uid == "1.2.840.10008.1.2.4.57" || uid == "1.2.840.10008.1.2.4.70")
    return DicomCodec::jpeg_lossless;
  if (uid == "1.2.840.10008.1.2.4.80" || uid == "1.2.840.10008.1.2.4.81") return DicomCodec::jpeg_ls;
  if (uid == "1.2.840.10008.1.2.4.90" || uid == "1.2.840.10008.1.2.4.91" ||
      uid == "1.2.840.10008.1.2.4.201" || uid == "1.2.840.10008.1.2.4.202" ||
      uid == "1.2.840.10008.1.2.4.203")
    return DicomCodec::jpeg2000;
  return DicomCodec::unsupported;
}

std::vector<std::vector<DicomFragment>> dicom_frame_fragments(const DicomFile& file,
                                                              std::uint64_t number_of_frames,
                                                              std::span<const std::uint8_t> bytes) {
  const std::string& name = file.path;
  if (!file.pixel_data || !file.pixel_data->encapsulated)
    throw Error(ErrorCode::invalid_argument, name, "(7FE0,0010) PixelData",
                "the pixel data is not encapsulated");
  const DicomPixelData& px = *file.pixel_data;
  const std::string field = "(7FE0,0010) PixelData";
  const std::uint64_t end = px.offset + px.length;
  std::vector<std::vector<DicomFragment>> frames;

  // 1. The Extended Offset Table: one fragment per frame, offsets from the first item after the
  //    Basic Offset Table (pydicom ignores a table whose two parts differ in length).
  if (!px.extended_offsets.empty() && px.extended_offsets.size() == px.extended_lengths.size()) {
    const std::uint64_t start = px.offset + 8 + 4 * std::uint64_t(px.basic_offset_table.size());
    for (std::size_t i = 0; i < px.extended_offsets.size(); ++i) {
      const auto at = core::checked_add(start, px.extended_offsets[i]);
      const auto data = at ? core::checked_add(*at, 8) : std::nullopt;
      const auto stop = data ? core::checked_add(*data, px.extended_lengths[i]) : std::nullopt;
      if (!stop || *stop > end)
        throw Error(ErrorCode::format, name, "(7FE0,0001) ExtendedOffsetTable",
                    "frame " + std::to_string(i) + " lies outside the pixel data", px.offset);
      frames.push_back({DicomFragment{*data, px.extended_lengths[i]}});
    }
    return frames;
  }
  const auto& fragments = px.fragments;
  if (fragments.empty())
    throw Error(ErrorCode::format, name, field, "the encapsulated pixel data has no fragments",
                px.offset);
  // 2. The Basic Offset Table: fragments accumulate until the next frame's offset (pydicom's
  //    generate_fragmented_frames).
  const auto& bot = px.basic_offset_table;
  if (!bot.empty()) {
    std::vector<DicomFragment> frame;
    std::size_t index = 0;
    std::uint64_t position = 0;
    const std::size_t final_index = bot.size() - 1;
    for (const DicomFragment& f : fragments) {
      if (index == final_index || position < bot[index + 1]) {
        frame.push_back(f);
      } else {
        frames.push_back(std::move(frame));
        ++index;
        frame = {f};
      }
      position += f.length + 8;
    }
    frames.push_back(std::move(frame));
    return frames;
  }
  // 3. No table.
  if (fragments.size() == 1 || number_of_frames == 1) {
    frames.push_back(fragments);
    return frames;
  }
  if (fragments.size() == number_of_frames) {
    for (const DicomFragment& f : fragments) frames.push_back({f});
    return frames;
  }
  if (fragments.size() < number_of_frames)
    throw Error(ErrorCode::format, name, field,
                std::to_string(fragments.size()) + " fragments cannot hold " +
                    std::to_string(number_of_frames) + " frames (no offset table)",
                px.offset);
  // More fragments than frames: a frame ends with the fragment whose last 10 bytes hold a JPEG
  // end-of-image marker (FF D9).
  Source source(file, bytes);
  std::vector<DicomFragment> frame;
  for (const DicomFragment& f : fragments) {
    frame.push_back(f);
    const std::uint64_t tail = std::min<std::uint64_t>(10, f.length);
    std::uint8_t last[10];
    source.read(f.offset + f.length - tail, std::span(last, tail), field);
    bool eoi = false;
    for (std::uint64_t i = 0; i + 1 < tail; ++i) eoi |= last[i] == 0xFF && last[i + 1] == 0xD9;
    if (eoi) {
      frames.push_back(std::move(frame));
      frame.clear();
    }
  }
  if (!frame.empty()) frames.push_back(std::move(frame));
  if (frames.size() < number_of_frames)
    throw Error(ErrorCode::format, name, field,
                "found " + std::to_string(frames.size()) + " frames by their JPEG end markers, " +
                    "the dataset says " + std::to_string(number_of_frames),
                px.offset);
  return frames;
}

DicomPixelInfo dicom_pixel_info(const DicomFile& file, std::span<const std::uint8_t> bytes) {
  const std::string& name = file.path;
  if (!file.pixel_data)
    throw Error(ErrorCode::format, name, "(7FE0,0010) PixelData",
                "the dataset has no pixel data (or it was not parsed)");
  const DicomPixelData& px = *file.pixel_data;
  const DicomDataset& ds = file.dataset;
  DicomPixelInfo info;
  info.tag = px.tag;
  info.codec = dicom_codec_of(file.transfer_syntax.uid);

  const auto offset_of = [&](DicomTag tag) -> std::optional<std::uint64_t> {
    if (const DicomElement* e = ds.find(tag)) return e->value_offset;
    return std::nullopt;
  };
  const auto bad = [&](DicomTag tag, const std::string& what) {
    return Error(ErrorCode::format, name, field_name(tag), what, offset_of(tag));
  };
  const auto required = [&](DicomTag tag) -> std::int64_t {
    const auto v = ds.integer(tag);
    if (!v) throw bad(tag, "is missing or empty; the pixel data cannot be decoded without it");
    return *v;
  };

  if (info.codec == DicomCodec::unsupported)
    throw Error(ErrorCode::unsupported, name, "(0002,0010) TransferSyntaxUID",
                "voxpipe has no decoder for transfer syntax " + file.transfer_syntax.uid);
  const bool encapsulated_syntax = info.codec != DicomCodec::native &&
                                   info.codec != DicomCodec::deflated_native;
  if (px.encapsulated != encapsulated_syntax)
    throw Error(ErrorCode::format, name, field_name(px.tag),
                px.encapsulated ? "is encapsulated, but the transfer syntax is a native one"
                                : "is not encapsulated, but the transfer syntax " +
                                      file.transfer_syntax.uid + " encapsulates it",
                px.offset);

  const std::int64_t bits_allocated = required(kBitsAllocated);
  if (bits_allocated != 1 && bits_allocated != 8 && bits_allocated != 16 &&
      bits_allocated != 32 && bits_allocated != 64)
    throw Error(bits_allocated > 0 && bits_allocated <= 64 && bits_allocated % 8 == 0
                    ? ErrorCode::unsupported
                    : ErrorCode::format,
                name, field_name(kBitsAllocated),
                "is " + std::to_string(bits_allocated) + "; voxpipe decodes 1, 8, 16, 32 and 64",
                offset_of(kBitsAllocated));
  info.bits_allocated = static_cast<std::uint32_t>(bits_allocated);
  if (px.tag == kPixelData) {
    const std::int64_t stored = required(kBitsStored);
    if (stored < 1 || stored > bits_allocated)
      throw bad(kBitsStored, "is " + std::to_string(stored) + "; it must be 1 to BitsAllocated (" +
                                 std::to_string(bits_allocated) + ")");
    info.bits_stored = static_cast<std::uint32_t>(stored);
    const std::int64_t representation = required(kPixelRepresentation);
    if (representation != 0 && representation != 1)
      throw bad(kPixelRepresentation, "is " + std::to_string(representation) + "; it must be 0 or 1");
    info.pixel_representation = static_cast<std::uint32_t>(representation);
  } else {
    const std::uint32_t want = px.tag == kFloatPixelData ? 32 : 64;
    if (info.bits_allocated != want)
      throw bad(kBitsAllocated, "is " + std::to_string(bits_allocated) + " for " +
                                    field_name(px.tag) + ", which needs " + std::to_string(want));
    info.bits_stored = want;
  }
  if (auto h = ds.integer(kHighBit); h && *h >= 0 && *h < 64)
    info.high_bit = static_cast<std::uint32_t>(*h);
  else
    info.high_bit = info.bits_stored - 1;

  const std::int64_t rows = required(kRows), columns = required(kColumns);
  if (rows < 1 || rows > 65535) throw bad(kRows, "is " + std::to_string(rows) + "; it must be 1 to 65535");
  if (columns < 1 || columns > 65535)
    throw bad(kColumns, "is " + std::to_string(columns) + "; it must be 1 to 65535");
  info.rows = static_cast<std::uint32_t>(rows);
  info.columns = static_cast<std::uint32_t>(columns);

  const std::int64_t samples = required(kSamplesPerPixel);
  if (samples != 1 && samples != 3)
    throw bad(kSamplesPerPixel, "is " + std::to_string(samples) + "; it must be 1 or 3");
  info.samples_per_pixel = static_cast<std::uint32_t>(samples);
  if (samples == 3) {
    const std::int64_t planar = required(kPlanarConfiguration);
    if (planar != 0 && planar != 1)
      throw bad(kPlanarConfiguration, "is " + std::to_string(planar) + "; it must be 0 or 1");
    info.planar_configuration = static_cast<std::uint32_t>(planar);
  }

  const auto photometric = ds.string(kPhotometric);
  if (!photometric) throw bad(kPhotometric, "is missing or empty");
  if (!is_known_photometric(*photometric)) throw bad(kPhotometric, "'" + *photometric + "' is unknown");
  info.photometric = *photometric;

  std::int64_t frames = 1;
  if (const auto n = ds.integer(kNumberOfFrames)) {
    if (*n < 0) throw bad(kNumberOfFrames, "is negative");
    frames = *n == 0 ? 1 : *n;  // pydicom: 0 means 1, with a warning
  }
  info.number_of_frames = static_cast<std::uint64_t>(frames);

  switch (info.bits_allocated) {
    case 1: info.dtype = DType::u8; break;
    case 8: info.dtype = info.pixel_representation ? DType::i8 : DType::u8; break;
    case 16: info.dtype = info.pixel_representation ? DType::i16 : DType::u16; break;
    case 32:
      info.dtype = px.tag == kFloatPixelData ? DType::f32
                   : info.pixel_representation ? DType::i32 : DType::u32;
      break;
    default:
      info.dtype = px.tag != kPixelData ? DType::f64
                   : info.pixel_representation ? DType::i64 : DType::u64;
  }
  info.frame_bytes = std::uint64_t(info.rows) * info.columns * info.samples_per_pixel *
                     dtype_size(info.dtype);

  if (!encapsulated_syntax) {
    // Native data must hold the frames; whole frames beyond NumberOfFrames are kept (pydicom's
    // allow_excess_frames).
    const double frame_length = native_frame_length(info);
    const double expected = std::ceil(frame_length * double(info.number_of_frames));
    const double padded = expected + std::fmod(expected, 2.0);
    const double actual = double(px.length);
    if (actual < padded && actual != expected)
      throw Error(ErrorCode::format, name, field_name(px.tag),
                  "holds " + std::to_string(px.length) + " bytes; " +
                      std::to_string(info.number_of_frames) + " frames of " +
                      std::to_string(info.rows) + " x " + std::to_string(info.columns) +
                      " need " + std::to_string(static_cast<std::uint64_t>(expected)),
                  px.offset);
    if (actual > padded && info.photometric != "YBR_FULL_422") {
      const double whole = std::floor(actual / frame_length);
      if (whole > double(info.number_of_frames))
        info.number_of_frames = static_cast<std::uint64_t>(whole);
    }
  } else {
    if (info.bits_allocated == 1 || info.bits_allocated == 64)
      throw Error(ErrorCode::unsupported, name, field_name(kBitsAllocated),
                  "encapsulated pixel data of " + std::to_string(info.bits_allocated) +
                      " bits is not decoded",
                  offset_of(kBitsAllocated));
    const auto mapped = dicom_frame_fragments(file, info.number_of_frames, bytes);
    if (mapped.size() > info.number_of_frames) info.number_of_frames = mapped.size();
    const auto total = core::checked_mul(info.frame_bytes, info.number_of_frames);
    const auto justified = core::checked_mul(px.length, kMaxExpansion);
    if (!total || (*total > kLimitFloor && (!justified || *total > *justified)))
      throw Error(ErrorCode::limit, name, field_name(kRows),
                  std::to_string(info.number_of_frames) + " frames of " +
                      std::to_string(info.frame_bytes) + " bytes from " +
                      std::to_string(px.length) + " encoded bytes",
                  px.offset);
  }
  if (!core::checked_mul(info.frame_bytes, info.number_of_frames))
    throw Error(ErrorCode::limit, name, field_name(kNumberOfFrames), "the frames overflow 64 bits");

  info.photometric_out = info.photometric;
  if (info.samples_per_pixel == 3) {
    if (is_ybr_full(info.photometric) && info.dtype == DType::u8) info.photometric_out = "RGB";
    if (info.codec == DicomCodec::jpeg2000 &&
        (info.photometric == "YBR_ICT" || info.photometric == "YBR_RCT"))
      info.photometric_out = "RGB";
  }
  if (info.number_of_frames > 1) info.shape.push_back(info.number_of_frames);
  info.shape.push_back(info.rows);
  info.shape.push_back(info.columns);
  if (info.samples_per_pixel > 1) info.shape.push_back(info.samples_per_pixel);
  return info;
}

std::uint64_t dicom_output_frame_bytes(const DicomPixelInfo& info,
                                       const DicomDecodeOptions& options) {
  if (!options.modality) return info.frame_bytes;
  return std::uint64_t(info.rows) * info.columns * info.samples_per_pixel *
         dtype_size(*options.modality);
}

std::vector<std::string> decode_dicom_frames(const DicomFile& file, const DicomPixelInfo& info,
                                             std::uint64_t first,
                         std::uint64_t count, std::span<std::uint8_t> out,
                         const DicomDecodeOptions& options, std::span<const std::uint8_t> bytes) {
  const std::string& name = file.path;
  if (!file.pixel_data)
    throw Error(ErrorCode::invalid_argument, name, "(7FE0,0010) PixelData", "no pixel data");
  if (options.modality && *options.modality != DType::f32 && *options.modality != DType::f64)
    throw Error(ErrorCode::invalid_argument, name, "modality",
                "the modality transform gives float32 or float64");
  if (first > info.number_of_frames || count > info.number_of_frames - first)
    throw Error(ErrorCode::invalid_argument, name, "frames",
                "frames " + std::to_string(first) + " to " + std::to_string(first + count) +
                    " of " + std::to_string(info.number_of_frames));
  const std::uint64_t out_frame = dicom_output_frame_bytes(info, options);
  if (out.size() / (out_frame ? out_frame : 1) < count)
    throw Error(ErrorCode::invalid_argument, name, "out",
                "the output holds " + std::to_string(out.size()) + " bytes, " +
                    std::to_string(count) + " frames need " + std::to_string(count * out_frame));
  if (count == 0) return {};
  const unsigned threads = resolve_threads(options.threads);
  const DicomPixelData& px = *file.pixel_data;
  const Source source(file, bytes);
  const Modality modality = options.modality ? read_modality(file, source) : Modality{};
  const bool direct = !options.modality;  // values can be written straight into `out`
  const std::size_t values = std::size_t(info.rows) * info.columns * info.samples_per_pixel;

  if (info.codec == DicomCodec::native || info.codec == DicomCodec::deflated_native) {
    const double frame_length = native_frame_length(info);
    const bool be_swap_ow = file.big_endian && info.bits_allocated == 8 &&
                            info.tag == kPixelData && px.vr == DicomVR::OW;
    // The stored byte range of frames [a, b) relative to the pixel data's first byte.
    const auto stored_range = [&](std::uint64_t a, std::uint64_t b, unsigned* skip_bits) {
      std::uint64_t begin, end;
      if (info.bits_allocated == 1) {
        const std::uint64_t pixels = values;
        begin = a * pixels / 8;
        end = (b * pixels + 7) / 8;
        *skip_bits = static_cast<unsigned>(a * pixels % 8);
      } else {
        const std::uint64_t length = static_cast<std::uint64_t>(frame_length);
        begin = a * length;
        end = b * length;
        *skip_bits = 0;
      }
      if (be_swap_ow) {
        begin &= ~std::uint64_t{1};
        end = (end + 1) & ~std::uint64_t{1};
      }
      return std::pair{begin, std::min(end, px.length)};
    };
    const auto frame_from = [&](const std::uint8_t* stored, std::size_t length, unsigned skip,
                                std::uint64_t logical_begin, std::uint64_t physical_begin,
                                std::uint64_t index, std::vector<std::uint8_t>& swapped,
                                std::vector<std::uint8_t>& frame, std::vector<std::uint8_t>& scratch) {
      if (be_swap_ow) {
        // 8-bit data written as OW in big endian: each byte pair is swapped (pydicom's rule).
        const std::size_t n = static_cast<std::size_t>(frame_length);
        swapped.resize(n);
        for (std::size_t i = 0; i < n; ++i) {
          const std::uint64_t physical = ((logical_begin + i) ^ 1) - physical_begin;
          swapped[i] = physical < length ? stored[physical] : 0;
        }
        stored = swapped.data();
        length = n;
      }
      std::uint8_t* dst = direct ? out.data() + (index - first) * info.frame_bytes
                                 : (frame.resize(info.frame_bytes), frame.data());
      native_to_values(stored, length, skip, info, file.big_endian && !be_swap_ow, dst, scratch);
      finish_frame(dst, info, info.photometric == "YBR_FULL_422" ? "YBR_FULL" : info.photometric,
                   false, options, name, index, px.offset);
      emit_frame(dst, out.data() + (index - first) * out_frame, info, options, modality);
    };

    if (info.codec == DicomCodec::deflated_native) {
      // The dataset stream is inflated once, up to the last frame asked for.
      unsigned skip = 0;
      // (Plain variables, not a structured binding: the lambda below captures them.)
      const auto range = stored_range(first, first + count, &skip);
      const std::uint64_t begin = range.first, end = range.second;
      std::vector<std::uint8_t> stored(end - begin);
      source.read_inflated(file.dataset_offset, px.offset + begin, stored, field_name(px.tag));
      core::parallel_for(count, threads, [&](std::size_t k) {
        thread_local std::vector<std::uint8_t> swapped, frame, scratch;
        unsigned fskip = 0;
        const auto [fb, fe] = stored_range(first + k, first + k + 1, &fskip);
        const std::uint64_t logical = static_cast<std::uint64_t>(frame_length) * (first + k);
        frame_from(stored.data() + (fb - begin), fe - fb, fskip, logical, fb, first + k, swapped,
                   frame, scratch);
      });
      return {};
    }
    core::parallel_for(count, threads, [&](std::size_t k) {
      thread_local std::vector<std::uint8_t> buffer, swapped, frame, scratch;
      const std::uint64_t index = first + k;
      unsigned skip = 0;
      const auto [fb, fe] = stored_range(index, index + 1, &skip);
      // Plain frames are read straight into their place in the output.
      const bool in_place = direct && info.bits_allocated > 1 && !be_swap_ow &&
                            info.photometric != "YBR_FULL_422" &&
                            fe - fb == info.frame_bytes;
      std::uint8_t* target;
      if (in_place) {
        target = out.data() + k * info.frame_bytes;
      } else {
        buffer.resize(fe - fb);
        target = buffer.data();
      }
      try {
        source.read(px.offset + fb, std::span(target, fe - fb), frame_field(index));
      } catch (const Error& e) {
        throw Error(e.code(), name, frame_field(index), e.detail(), px.offset + fb);
      }
      const std::uint64_t logical = static_cast<std::uint64_t>(frame_length) * index;
      frame_from(target, fe - fb, skip, logical, fb, index, swapped, frame, scratch);
    });
    return {};
  }

  // Encapsulated frames.
  const auto frames = dicom_frame_fragments(file, info.number_of_frames, bytes);
  if (frames.size() < first + count)
    throw Error(ErrorCode::format, name, field_name(px.tag),
                "holds " + std::to_string(frames.size()) + " frames, " +
                    std::to_string(first + count) + " are needed",
                px.offset);
  // Each frame's warnings in its own slot, so that they come back in frame order.
  std::vector<std::vector<std::string>> frame_warnings(count);
  core::parallel_for(count, threads, [&](std::size_t k) {
    thread_local std::vector<std::uint8_t> encoded, frame, scratch;
    const std::uint64_t index = first + k;
    const auto& fragments = frames[index];
    std::uint64_t total = 0;
    for (const DicomFragment& f : fragments) total += f.length;
    encoded.resize(total);
    std::uint64_t at = 0;
    for (const DicomFragment& f : fragments) {
      source.read(f.offset, std::span(encoded.data() + at, f.length), frame_field(index));
      at += f.length;
    }
    const std::uint64_t offset = fragments.empty() ? px.offset : fragments.front().offset;
    std::uint8_t* dst = direct ? out.data() + k * info.frame_bytes
                               : (frame.resize(info.frame_bytes), frame.data());
    std::string photometric = info.photometric;
    bool sign_corrected = false;
    if (info.codec == DicomCodec::deflated_frames) {
      // Each frame is the native frame, raw-deflated; bit-packed frames start on a byte.
      DicomPixelInfo one = info;
      const std::uint64_t length =
          info.bits_allocated == 1 ? (values + 7) / 8
                                   : static_cast<std::uint64_t>(native_frame_length(info));
      scratch.resize(length);
      inflate_frame(encoded, scratch, name, index, offset);
      std::vector<std::uint8_t> planar;
      native_to_values(scratch.data(), length, 0, one, false, dst, planar);
      if (photometric == "YBR_FULL_422") photometric = "YBR_FULL";
    } else {
      dicom::FrameSpec spec;
      spec.name = name;
      spec.frame = index;
      spec.offset = offset;
      spec.rows = info.rows;
      spec.columns = info.columns;
      spec.samples = info.samples_per_pixel;
      spec.bits_allocated = info.bits_allocated;
      spec.bits_stored = info.bits_stored;
      spec.is_signed = info.pixel_representation == 1;
      spec.planar_configuration = info.planar_configuration;
      spec.photometric = info.photometric;
      spec.recover_corrupt = options.on_corrupt == DicomOnCorrupt::warn;
      dicom::FrameOutcome outcome =
          decode_encapsulated(info.codec, encoded, spec, std::span(dst, info.frame_bytes));
      photometric = outcome.photometric;
      sign_corrected = outcome.sign_corrected;
      for (std::string& w : outcome.warnings)
        frame_warnings[k].push_back(name + ": " + frame_field(index) + ": " + std::move(w));
    }
    finish_frame(dst, info, photometric, sign_corrected, options, name, index, offset);
    emit_frame(dst, out.data() + k * out_frame, info, options, modality);
  });
  std::vector<std::string> warnings;
  for (auto& w : frame_warnings)
    warnings.insert(warnings.end(), std::make_move_iterator(w.begin()),
                    std::make_move_iterator(w.end()));
  return warnings;
}

}  // namespace voxpipe
