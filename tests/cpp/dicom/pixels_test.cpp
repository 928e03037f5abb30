// The pixel layer on hand-built files: the Image Pixel module checks, native decoding (bit depths,
// BitsStored correction, byte order, bit-packed frames, planar configuration, YBR_FULL_422,
// excess frames), the modality transform, encapsulated frame location (pydicom's rules), the
// deflated syntaxes, and the errors. Expected values are worked out by hand from the bytes (and,
// for the colour conversion, from pydicom's formula); tests/python/test_dicom_pixels.py compares
// with pydicom on real files.
#include <gtest/gtest.h>

#include <cstring>

#include "dicom/dicom_writer.hpp"
#include "test_support.hpp"
#include "voxpipe/dicom.hpp"
#include "voxpipe/error.hpp"

namespace {

using namespace voxpipe;
using vptest::DBytes;
using vptest::DicomWriter;

constexpr DicomTag kSamples = 0x00280002, kPhotometric = 0x00280004, kPlanar = 0x00280006,
                   kFrames = 0x00280008, kRows = 0x00280010, kColumns = 0x00280011,
                   kBitsAllocated = 0x00280100, kBitsStored = 0x00280101,
                   kRepresentation = 0x00280103, kIntercept = 0x00281052, kSlope = 0x00281053,
                   kPixelData = 0x7FE00010;

struct Image {
  unsigned rows = 2, columns = 3, samples = 1, bits_allocated = 16, bits_stored = 16;
  unsigned representation = 0, planar = 0;
  int frames = -1;  // -1: no NumberOfFrames
  std::string photometric = "MONOCHROME2";
  std::string slope, intercept;
};

std::string even(std::string s) {
  if (s.size() % 2) s.push_back(' ');
  return s;
}

// The Image Pixel module (in tag order) with `pixel` as native data, in the encoding of `ts`.
DBytes native_file(const Image& im, const DBytes& pixel, const std::string& ts = vptest::kExplicitLE,
                   const std::string& pixel_vr = "OW") {
  DBytes file = vptest::part10_head(ts);
  const bool big = ts == vptest::kExplicitBE;
  DicomWriter w(false, big, file.size());
  w.us(kSamples, im.samples);
  w.text(kPhotometric, "CS", even(im.photometric));
  if (im.samples > 1) w.us(kPlanar, im.planar);
  if (im.frames >= 0) w.text(kFrames, "IS", even(std::to_string(im.frames)));
  w.us(kRows, im.rows);
  w.us(kColumns, im.columns);
  w.us(kBitsAllocated, im.bits_allocated);
  w.us(kBitsStored, im.bits_stored);
  w.us(0x00280102, im.bits_stored - 1);
  w.us(kRepresentation, im.representation);
  if (!im.intercept.empty()) w.text(kIntercept, "DS", even(im.intercept));
  if (!im.slope.empty()) w.text(kSlope, "DS", even(im.slope));
  w.element(kPixelData, pixel_vr, pixel);
  file.insert(file.end(), w.bytes().begin(), w.bytes().end());
  return file;
}

// The Image Pixel module of a MONOCHROME2 image, in tag order up to BitsStored's neighbours
// (written by hand where a test needs other elements between them).
void mono_module(DicomWriter& w, unsigned rows, unsigned columns, unsigned bits, int frames = -1,
                 unsigned representation = 0) {
  w.us(kSamples, 1);
  w.text(kPhotometric, "CS", "MONOCHROME2 ");
  if (frames >= 0) w.text(kFrames, "IS", even(std::to_string(frames)));
  w.us(kRows, rows);
  w.us(kColumns, columns);
  w.us(kBitsAllocated, bits);
  w.us(kBitsStored, bits);
  w.us(kRepresentation, representation);
}

struct Decoded {
  DicomPixelInfo info;
  DBytes bytes;
};

Decoded decode(const DBytes& file, const DicomDecodeOptions& options = {}) {
  const DicomFile f = parse_dicom(file, "test.dcm");
  Decoded d;
  d.info = dicom_pixel_info(f, file);
  d.bytes.resize(d.info.number_of_frames * dicom_output_frame_bytes(d.info, options));
  decode_dicom_frames(f, d.info, 0, d.info.number_of_frames, d.bytes, options, file);
  return d;
}

template <typename T>
std::vector<T> as(const DBytes& b) {
  std::vector<T> v(b.size() / sizeof(T));
  std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

DBytes le16(std::initializer_list<std::uint16_t> v) {
  DBytes out;
  for (auto x : v) {
    out.push_back(static_cast<std::uint8_t>(x));
    out.push_back(static_cast<std::uint8_t>(x >> 8));
  }
  return out;
}

template <typename F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no voxpipe::Error";
  return Error(ErrorCode::io, "", "", "");
}

TEST(DicomPixels, Unsigned16WithUnusedBitsIsMasked) {
  Image im;
  im.bits_stored = 12;
  const Decoded d = decode(native_file(im, le16({0xF001, 0x0FFF, 0x1234, 0, 1, 0xFFFF})));
  EXPECT_EQ(d.info.dtype, DType::u16);
  EXPECT_EQ(d.info.shape, (std::vector<std::uint64_t>{2, 3}));
  EXPECT_EQ(as<std::uint16_t>(d.bytes), (std::vector<std::uint16_t>{0x001, 0xFFF, 0x234, 0, 1, 0xFFF}));
}

TEST(DicomPixels, Signed16WithUnusedBitsIsSignExtended) {
  Image im;
  im.bits_stored = 12;
  im.representation = 1;
  const Decoded d = decode(native_file(im, le16({0x0800, 0x07FF, 0xFFFF, 0x0FFF, 0xF000, 2})));
  EXPECT_EQ(d.info.dtype, DType::i16);
  EXPECT_EQ(as<std::int16_t>(d.bytes), (std::vector<std::int16_t>{-2048, 2047, -1, -1, 0, 2}));
}

TEST(DicomPixels, BigEndianIsSwapped) {
  Image im;
  DBytes be = {0x01, 0x02, 0x03, 0x04, 0, 5, 0, 6, 0xFF, 0xFE, 0x80, 0x00};
  const Decoded d = decode(native_file(im, be, vptest::kExplicitBE));
  EXPECT_EQ(as<std::uint16_t>(d.bytes),
            (std::vector<std::uint16_t>{0x0102, 0x0304, 5, 6, 0xFFFE, 0x8000}));
}

TEST(DicomPixels, BigEndianEightBitOwSwapsBytePairs) {
  // pydicom: 8-bit data written as OW in big endian has each byte pair swapped; a 1 x 3 frame is
  // odd, so frame 1 starts in the middle of a pair.
  Image im;
  im.rows = 1;
  im.columns = 3;
  im.bits_allocated = im.bits_stored = 8;
  im.frames = 2;
  // Logical bytes 1 2 3 | 4 5 6, stored pairwise swapped.
  const DBytes stored = {2, 1, 4, 3, 6, 5};
  const Decoded d = decode(native_file(im, stored, vptest::kExplicitBE, "OW"));
  EXPECT_EQ(d.bytes, (DBytes{1, 2, 3, 4, 5, 6}));
}

TEST(DicomPixels, BitPackedFramesNeedNotStartOnAByte) {
  Image im;
  im.rows = im.columns = 3;
  im.bits_allocated = im.bits_stored = 1;
  im.frames = 2;
  // 18 bits, little-endian bit order: frame 0 = 1 0 1 1 0 0 0 0 1, frame 1 = 0 0 1 1 1 1 1 1 0.
  const DBytes packed = {0b00001101, 0b11111001, 0b00000001, 0};
  const Decoded d = decode(native_file(im, packed, vptest::kExplicitLE, "OB"));
  EXPECT_EQ(d.info.dtype, DType::u8);
  EXPECT_EQ(d.info.shape, (std::vector<std::uint64_t>{2, 3, 3}));
  EXPECT_EQ(d.bytes, (DBytes{1, 0, 1, 1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 1, 1, 1, 1, 0}));
}

TEST(DicomPixels, PlanarConfigurationOneIsInterleaved) {
  Image im;
  im.rows = 1;
  im.columns = 2;
  im.samples = 3;
  im.planar = 1;
  im.bits_allocated = im.bits_stored = 8;
  im.photometric = "RGB";
  const Decoded d = decode(native_file(im, {10, 11, 20, 21, 30, 31}, vptest::kExplicitLE, "OB"));
  EXPECT_EQ(d.info.shape, (std::vector<std::uint64_t>{1, 2, 3}));
  EXPECT_EQ(d.bytes, (DBytes{10, 20, 30, 11, 21, 31}));
}

TEST(DicomPixels, YbrFull422IsExpandedAndConvertedLikePydicom) {
  Image im;
  im.rows = 1;
  im.columns = 2;
  im.samples = 3;
  im.bits_allocated = im.bits_stored = 8;
  im.photometric = "YBR_FULL_422";
  // Y1 Y2 Cb Cr: (76, 85, 255) is pure red in YBR_FULL; pydicom's float32 matrix gives
  // R = floor(76 + 1.402 * 127 + 0.5) = 254, G = 0 (clipped), B = floor(76 + 1.772 * -43 + .5) = 0.
  const DBytes stored = {76, 128, 85, 255};
  const Decoded rgb = decode(native_file(im, stored, vptest::kExplicitLE, "OB"));
  EXPECT_EQ(rgb.info.photometric_out, "RGB");
  // Pixel 2: Y=128, Cb=85, Cr=255: R = 128 + 178.054 -> 255 (clip), G = 128 + 0.3441*43 -
  // 0.7141*127 = 52.1 -> 52, B = 128 - 76.196 = 51.8 -> 52.
  EXPECT_EQ(rgb.bytes, (DBytes{254, 0, 0, 255, 52, 52}));
  DicomDecodeOptions raw;
  raw.as_rgb = false;
  EXPECT_EQ(decode(native_file(im, stored, vptest::kExplicitLE, "OB"), raw).bytes,
            (DBytes{76, 85, 255, 128, 85, 255}));
}

TEST(DicomPixels, WholeFramesBeyondNumberOfFramesAreKept) {
  Image im;
  im.rows = 1;
  im.columns = 2;
  im.frames = 1;
  const Decoded d = decode(native_file(im, le16({1, 2, 3, 4, 5, 6})));
  EXPECT_EQ(d.info.number_of_frames, 3u);
  EXPECT_EQ(as<std::uint16_t>(d.bytes), (std::vector<std::uint16_t>{1, 2, 3, 4, 5, 6}));
}

TEST(DicomPixels, RescaleInFloat64AndFloat32) {
  Image im;
  im.rows = 1;
  im.columns = 3;
  im.representation = 1;
  im.slope = "0.1";
  im.intercept = "-1024";
  DicomDecodeOptions o;
  o.modality = DType::f64;
  const auto v = as<double>(decode(native_file(im, le16({0, 3, 0xFFFF})), o).bytes);
  EXPECT_EQ(v, (std::vector<double>{0 * 0.1 + -1024.0, 3 * 0.1 + -1024.0, -1 * 0.1 + -1024.0}));
  o.modality = DType::f32;
  const auto f = as<float>(decode(native_file(im, le16({0, 3, 0xFFFF})), o).bytes);
  EXPECT_EQ(f[1], static_cast<float>(3 * 0.1 + -1024.0));
}

TEST(DicomPixels, NoRescaleGivesTheValuesAsFloat) {
  Image im;
  im.rows = 1;
  im.columns = 2;
  im.slope = "2";  // a slope without an intercept is not applied (pydicom)
  DicomDecodeOptions o;
  o.modality = DType::f64;
  EXPECT_EQ(as<double>(decode(native_file(im, le16({7, 9})), o).bytes), (std::vector<double>{7, 9}));
}

TEST(DicomPixels, ModalityLutMapsAndClips) {
  DBytes file = vptest::part10_head(vptest::kExplicitLE);
  DicomWriter w(false, false, file.size());
  mono_module(w, 1, 4, 16);
  DicomWriter item(false, false);
  DicomWriter desc(false, false);
  desc.u16(3);    // entries
  desc.u16(10);   // first mapped value
  desc.u16(16);   // bits
  item.element(0x00283002, "US", desc.bytes());
  item.element(0x00283006, "OW", le16({100, 200, 300}));
  w.header(0x00283000, "SQ", static_cast<std::uint32_t>(8 + item.bytes().size()));
  w.item(static_cast<std::uint32_t>(item.bytes().size()));
  w.raw(item.bytes());
  w.element(kPixelData, "OW", le16({5, 10, 11, 40}));
  file.insert(file.end(), w.bytes().begin(), w.bytes().end());
  DicomDecodeOptions o;
  o.modality = DType::f64;
  EXPECT_EQ(as<double>(decode(file, o).bytes), (std::vector<double>{100, 100, 200, 300}));
}

// Encapsulated pixel data (RLE syntax; the frames are located, not decoded, here).
DBytes encapsulated_file(const std::vector<std::uint32_t>& bot, const std::vector<DBytes>& fragments,
                         int frames, std::vector<std::size_t>* fragment_offsets = nullptr) {
  DBytes file = vptest::part10_head("1.2.840.10008.1.2.5");
  DicomWriter w(false, false, file.size());
  mono_module(w, 1, 1, 8, frames);
  w.header(kPixelData, "OB", 0xFFFFFFFF);
  w.item(static_cast<std::uint32_t>(4 * bot.size()));
  for (auto o : bot) w.u32(o);
  for (const DBytes& f : fragments) {
    w.item(static_cast<std::uint32_t>(f.size()));
    if (fragment_offsets) fragment_offsets->push_back(w.pos());
    w.raw(f);
  }
  w.sequence_delimiter();
  file.insert(file.end(), w.bytes().begin(), w.bytes().end());
  return file;
}

std::vector<std::size_t> frame_sizes(const DBytes& file, std::uint64_t frames) {
  const DicomFile f = parse_dicom(file, "test.dcm");
  std::vector<std::size_t> sizes;
  for (const auto& frame : dicom_frame_fragments(f, frames, file)) sizes.push_back(frame.size());
  return sizes;
}

TEST(DicomPixels, FramesFromTheBasicOffsetTable) {
  // Fragments of 4, 2, 6 bytes: frame 0 = fragments 0 and 1 (offset 0), frame 1 = fragment 2
  // (offset 4 + 8 + 2 + 8 = 22).
  const DBytes file = encapsulated_file({0, 22}, {DBytes(4, 1), DBytes(2, 2), DBytes(6, 3)}, 2);
  EXPECT_EQ(frame_sizes(file, 2), (std::vector<std::size_t>{2, 1}));
}

TEST(DicomPixels, FramesWithoutATable) {
  const std::vector<DBytes> three = {DBytes(4, 1), DBytes(2, 2), DBytes(6, 3)};
  EXPECT_EQ(frame_sizes(encapsulated_file({}, three, 3), 3), (std::vector<std::size_t>{1, 1, 1}));
  EXPECT_EQ(frame_sizes(encapsulated_file({}, three, 1), 1), (std::vector<std::size_t>{3}));
  // More fragments than frames: frames end at a fragment whose last 10 bytes hold FF D9.
  const std::vector<DBytes> jpeg = {DBytes{0xFF, 0xD8, 1, 2}, DBytes{3, 4, 0xFF, 0xD9},
                                    DBytes{0xFF, 0xD8, 0xFF, 0xD9}};
  EXPECT_EQ(frame_sizes(encapsulated_file({}, jpeg, 2), 2), (std::vector<std::size_t>{2, 1}));
  const Error e = error_of([&] { frame_sizes(encapsulated_file({}, three, 5), 5); });
  EXPECT_EQ(e.code(), ErrorCode::format);
  EXPECT_NE(std::string(e.what()).find("3 fragments cannot hold 5 frames"), std::string::npos);
}

TEST(DicomPixels, FramesFromTheExtendedOffsetTable) {
  std::vector<std::size_t> at;
  DBytes file = encapsulated_file({}, {DBytes(4, 1), DBytes(6, 3)}, 2, &at);
  // Insert the Extended Offset Table before the pixel data: rebuild with it in place.
  DBytes head = vptest::part10_head("1.2.840.10008.1.2.5");
  DicomWriter w(false, false, head.size());
  mono_module(w, 1, 1, 8, 2);
  DBytes offsets(16, 0), lengths(16, 0);
  offsets[8] = 12;  // frame 1's item starts 12 bytes after the first item
  lengths[0] = 4;
  lengths[8] = 5;   // and is taken as 5 bytes, as the table says
  w.element(0x7FE00001, "OV", offsets);
  w.element(0x7FE00002, "OV", lengths);
  w.header(kPixelData, "OB", 0xFFFFFFFF);
  w.item(0);
  w.item(4);
  const std::size_t first = w.pos();
  w.raw(DBytes(4, 1));
  w.item(6);
  const std::size_t second = w.pos();
  w.raw(DBytes(6, 3));
  w.sequence_delimiter();
  head.insert(head.end(), w.bytes().begin(), w.bytes().end());
  const DicomFile f = parse_dicom(head, "test.dcm");
  const auto frames = dicom_frame_fragments(f, 2, head);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0][0].offset, first);
  EXPECT_EQ(frames[0][0].length, 4u);
  EXPECT_EQ(frames[1][0].offset, second);
  EXPECT_EQ(frames[1][0].length, 5u);
}

TEST(DicomPixels, DeflatedDatasetPixels) {
  const DBytes head = vptest::part10_head(vptest::kDeflatedLE);
  DicomWriter w(false, false, 0);
  mono_module(w, 2, 2, 16, -1, 1);
  w.element(kPixelData, "OW", le16({1, 0xFFFF, 300, 7}));
  DBytes file = head;
  const DBytes z = vptest::deflate_raw(w.bytes());
  file.insert(file.end(), z.begin(), z.end());
  EXPECT_EQ(as<std::int16_t>(decode(file).bytes), (std::vector<std::int16_t>{1, -1, 300, 7}));
}

TEST(DicomPixels, DeflatedImageFrames) {
  DBytes file = vptest::part10_head("1.2.840.10008.1.2.8.1");
  DicomWriter w(false, false, file.size());
  mono_module(w, 1, 2, 16, 2);
  w.header(kPixelData, "OB", 0xFFFFFFFF);
  w.item(0);
  for (const DBytes& frame : {le16({1, 2}), le16({300, 65535})}) {
    DBytes z = vptest::deflate_raw(frame);
    if (z.size() % 2) z.push_back(0);
    w.item(static_cast<std::uint32_t>(z.size()));
    w.raw(z);
  }
  w.sequence_delimiter();
  file.insert(file.end(), w.bytes().begin(), w.bytes().end());
  EXPECT_EQ(as<std::uint16_t>(decode(file).bytes), (std::vector<std::uint16_t>{1, 2, 300, 65535}));
}

TEST(DicomPixels, FramesInParallelEqualFramesInOrder) {
  Image im;
  im.rows = 7;
  im.columns = 5;
  im.frames = 64;
  im.bits_stored = 11;
  im.representation = 1;
  DBytes pixel(7 * 5 * 64 * 2);
  for (std::size_t i = 0; i < pixel.size(); ++i) pixel[i] = static_cast<std::uint8_t>(i * 37 + 11);
  const DBytes file = native_file(im, pixel);
  DicomDecodeOptions one, two;
  one.threads = 1;
  two.threads = 2;
  const Decoded a = decode(file, one), b = decode(file, two);
  EXPECT_EQ(a.bytes, b.bytes);
  // A range of frames equals the same frames of the whole.
  const DicomFile f = parse_dicom(file, "test.dcm");
  DBytes part(3 * a.info.frame_bytes);
  decode_dicom_frames(f, a.info, 10, 3, part, two, file);
  EXPECT_TRUE(std::equal(part.begin(), part.end(), a.bytes.begin() + 10 * a.info.frame_bytes));
}

TEST(DicomPixels, ErrorsNameTheTag) {
  Image im;
  DBytes file = native_file(im, le16({1, 2, 3}));  // 3 values for 6 pixels
  Error e = error_of([&] { decode(file); });
  EXPECT_EQ(e.code(), ErrorCode::format);
  EXPECT_NE(e.field().find("(7FE0,0010)"), std::string::npos);
  EXPECT_NE(std::string(e.what()).find("need 12"), std::string::npos);

  im.bits_allocated = 12;
  im.bits_stored = 12;
  e = error_of([&] { decode(native_file(im, le16({1, 2, 3, 4, 5, 6}))); });
  EXPECT_EQ(e.code(), ErrorCode::format);
  EXPECT_NE(e.field().find("(0028,0100)"), std::string::npos);

  im = Image{};
  im.bits_stored = 17;
  e = error_of([&] { decode(native_file(im, le16({1, 2, 3, 4, 5, 6}))); });
  EXPECT_NE(e.field().find("(0028,0101)"), std::string::npos);

  im = Image{};
  im.samples = 3;
  im.photometric = "YBR_FULL";
  im.rows = 1;
  im.columns = 1;
  e = error_of([&] { decode(native_file(im, le16({1, 2, 3}))); });
  EXPECT_EQ(e.code(), ErrorCode::unsupported);  // pydicom converts 8-bit YBR only
}

TEST(DicomPixels, MissingRowsIsAFormatErrorNamingIt) {
  DBytes file = vptest::part10_head(vptest::kExplicitLE);
  DicomWriter w(false, false, file.size());
  w.us(kSamples, 1);
  w.text(kPhotometric, "CS", "MONOCHROME2 ");
  w.us(kColumns, 2);
  w.us(kBitsAllocated, 8);
  w.us(kBitsStored, 8);
  w.us(kRepresentation, 0);
  w.element(kPixelData, "OB", DBytes(2, 0));
  file.insert(file.end(), w.bytes().begin(), w.bytes().end());
  const DicomFile f = parse_dicom(file, "test.dcm");
  const Error e = error_of([&] { dicom_pixel_info(f, file); });
  EXPECT_EQ(e.code(), ErrorCode::format);
  EXPECT_EQ(e.field(), "(0028,0010) Rows");
}

TEST(DicomPixels, HugeFramesFromFewEncodedBytesAreALimit) {
  DBytes file = vptest::part10_head("1.2.840.10008.1.2.5");
  DicomWriter w(false, false, file.size());
  mono_module(w, 65535, 65535, 16);
  w.header(kPixelData, "OB", 0xFFFFFFFF);
  w.item(0);
  w.item(64);
  w.raw(DBytes(64, 0));
  w.sequence_delimiter();
  file.insert(file.end(), w.bytes().begin(), w.bytes().end());
  const DicomFile f = parse_dicom(file, "test.dcm");
  EXPECT_EQ(error_of([&] { dicom_pixel_info(f, file); }).code(), ErrorCode::limit);
}

}  // namespace
