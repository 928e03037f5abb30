// The RLE Lossless frame decoder (PS3.5 Annex G) against frames encoded by pydicom 3
// (ds.compress(RLELossless), and its segment encoder for 32 bits, which ds.compress refuses),
// and against what pydicom's own decoder (pydicom/pixels/decoders/rle.py) does with broken
// frames: decoded where pydicom decodes, Error(corrupt) where it raises.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dicom/codecs/codec.hpp"
#include "test_support.hpp"

namespace {

using namespace voxpipe;
using namespace voxpipe::dicom;
using vptest::Bytes;

// Generated with /work/main/.venv/bin/python (pydicom 3.0.2); the decoded values are those
// pydicom's pixel_array gives for the same frames.
const Bytes kMono8 = {1, 0, 0, 0, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 252, 7, 4, 1, 2, 3, 4, 5, 255, 9, 254, 0, 0, 255, 254, 128, 0, 1};
// values: [7, 7, 7, 7, 7, 1, 2, 3, 4, 5, 9, 9, 0, 0, 0, 255, 128, 128, 128, 1]
const Bytes kSigned16 = {2, 0, 0, 0, 64, 0, 0, 0, 74, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 255, 128, 127, 254, 0, 2, 1, 255, 0, 2, 255, 0, 255, 254, 0, 2, 2, 254, 5};
// values: [-1, -32768, 32767, 0, 0, 0, 258, -2, 5]
const Bytes kRgb8 = {3, 0, 0, 0, 64, 0, 0, 0, 72, 0, 0, 0, 80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 1, 0, 200, 0, 0, 255, 9, 255, 2, 0, 100, 0, 0, 255, 8, 255, 3, 0, 50, 0, 0, 255, 7};
// values: [1, 2, 3, 1, 2, 3, 200, 100, 50, 0, 0, 0, 9, 8, 7, 9, 8, 7]
const Bytes kMono32 = {4, 0, 0, 0, 64, 0, 0, 0, 70, 0, 0, 0, 76, 0, 0, 0, 82, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 255, 1, 0, 128, 1, 2, 255, 255, 0, 0, 1, 3, 255, 255, 0, 0, 1, 4, 255, 1, 0, 1};
// values: [16909060, 4294967295, 0, 2147483649]
const Bytes kRgb16 = {6, 0, 0, 0, 64, 0, 0, 0, 66, 0, 0, 0, 68, 0, 0, 0, 70, 0, 0, 0, 72, 0, 0, 0, 74, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 1, 255, 2, 255, 3, 255, 4, 255, 255, 255, 255};
// values: [258, 772, 65535, 258, 772, 65535]

FrameSpec spec(std::uint32_t rows, std::uint32_t columns, std::uint32_t samples,
               std::uint32_t bits) {
  FrameSpec s;
  s.name = "rle.dcm";
  s.frame = 2;
  s.offset = 1234;
  s.rows = rows;
  s.columns = columns;
  s.samples = samples;
  s.bits_allocated = bits;
  s.bits_stored = bits;
  s.photometric = samples == 3 ? "RGB" : "MONOCHROME2";
  return s;
}

template <typename T>
std::vector<T> decode(const Bytes& src, const FrameSpec& s) {
  std::vector<T> values(std::size_t{s.rows} * s.columns * s.samples);
  const FrameOutcome outcome = decode_rle_frame(
      src, s, std::span(reinterpret_cast<std::uint8_t*>(values.data()), values.size() * sizeof(T)));
  EXPECT_EQ(outcome.photometric, s.photometric);
  EXPECT_FALSE(outcome.sign_corrected);
  return values;
}

ErrorCode error_of(const Bytes& src, const FrameSpec& s, std::size_t out_size) {
  std::vector<std::uint8_t> out(out_size);
  try {
    decode_rle_frame(src, s, out);
  } catch (const Error& e) {
    EXPECT_EQ(e.path(), "rle.dcm");
    EXPECT_EQ(e.field(), "frame 2");
    EXPECT_EQ(e.offset(), std::optional<std::uint64_t>(1234));
    return e.code();
  }
  ADD_FAILURE() << "no error";
  return ErrorCode::io;
}

ErrorCode error_of(const Bytes& src, const FrameSpec& s) {
  return error_of(src, s, std::size_t{s.rows} * s.columns * s.samples * s.bits_allocated / 8);
}

Bytes header(std::vector<std::uint32_t> words) {
  words.resize(16, 0);
  Bytes h(64);
  for (std::size_t i = 0; i < 16; ++i)
    for (int b = 0; b < 4; ++b) h[4 * i + b] = static_cast<std::uint8_t>(words[i] >> (8 * b));
  return h;
}

Bytes cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(DicomRle, Mono8RunsAndLiteralsDecodeToPydicomsValues) {
  EXPECT_EQ(decode<std::uint8_t>(kMono8, spec(4, 5, 1, 8)),
            (std::vector<std::uint8_t>{7, 7, 7, 7, 7, 1, 2, 3, 4, 5, 9, 9, 0, 0, 0, 255, 128, 128,
                                       128, 1}));
}

TEST(DicomRle, Signed16SegmentsAreMostSignificantFirstAndLandInHostOrder) {
  FrameSpec s = spec(3, 3, 1, 16);
  s.is_signed = true;
  EXPECT_EQ(decode<std::int16_t>(kSigned16, s),
            (std::vector<std::int16_t>{-1, -32768, 32767, 0, 0, 0, 258, -2, 5}));
}

TEST(DicomRle, RgbPlanesBecomeColourByPixel) {
  EXPECT_EQ(decode<std::uint8_t>(kRgb8, spec(2, 3, 3, 8)),
            (std::vector<std::uint8_t>{1, 2, 3, 1, 2, 3, 200, 100, 50, 0, 0, 0, 9, 8, 7, 9, 8, 7}));
  EXPECT_EQ(decode<std::uint16_t>(kRgb16, spec(1, 2, 3, 16)),
            (std::vector<std::uint16_t>{258, 772, 65535, 258, 772, 65535}));
}

TEST(DicomRle, ThirtyTwoBitsUseFourSegments) {
  EXPECT_EQ(decode<std::uint32_t>(kMono32, spec(2, 2, 1, 32)),
            (std::vector<std::uint32_t>{0x01020304u, 0xFFFFFFFFu, 0u, 0x80000001u}));
}

TEST(DicomRle, PaddingAfterASegmentIsIgnoredWithAWarningAsPydicomDoes) {
  // pydicom warns about the extra decoded bytes ("The decoded RLE segment contains
  // non-conformant padding - 5 vs. 4 bytes expected") and keeps the first Rows x Columns.
  const FrameSpec s = spec(2, 2, 1, 8);
  std::vector<std::uint8_t> values(4);
  FrameOutcome outcome =
      decode_rle_frame(cat(header({1, 64}), {128, 254, 7, 128, 0, 9, 0, 0, 0}), s, values);
  EXPECT_EQ(values, (std::vector<std::uint8_t>{7, 7, 7, 9}));
  ASSERT_EQ(outcome.warnings.size(), 1u);
  EXPECT_EQ(outcome.warnings[0],
            "RLE segment 0 decodes to 5 bytes, but the frame holds 4 (non-conformant padding or "
            "damage): the rest is ignored");
  // A run that crosses the end of the frame counts whole, as pydicom's decoded length does.
  outcome = decode_rle_frame(cat(header({1, 64}), {253, 5}), spec(1, 2, 1, 8), values = {0, 0});
  EXPECT_EQ(values, (std::vector<std::uint8_t>{5, 5}));
  ASSERT_EQ(outcome.warnings.size(), 1u);
  EXPECT_NE(outcome.warnings[0].find("decodes to 4 bytes, but the frame holds 2"),
            std::string::npos);
  // A no-operation byte (128) or a repeat without its byte after the frame adds nothing.
  outcome = decode_rle_frame(cat(header({1, 64}), {1, 3, 4, 128, 255}), spec(1, 2, 1, 8), values);
  EXPECT_EQ(values, (std::vector<std::uint8_t>{3, 4}));
  EXPECT_TRUE(outcome.warnings.empty());
  EXPECT_EQ(decode<std::uint8_t>(cat(kMono8, {0, 0}), spec(4, 5, 1, 8))[19], 1);
}

TEST(DicomRle, ALiteralCutShortGivesTheBytesThatAreThere) {
  EXPECT_EQ(decode<std::uint8_t>(cat(header({1, 64}), {4, 10, 20, 30}), spec(1, 3, 1, 8)),
            (std::vector<std::uint8_t>{10, 20, 30}));
}

TEST(DicomRle, AnOffsetInsideTheHeaderDecodesTheHeaderBytesLikePydicom) {
  EXPECT_EQ(decode<std::uint8_t>(header({1, 0}), spec(1, 8, 1, 8)),
            (std::vector<std::uint8_t>(8, 0)));
}

TEST(DicomRle, AShortHeaderIsCorrupt) {
  const Bytes short_frame(kMono8.begin(), kMono8.begin() + 63);
  EXPECT_EQ(error_of(short_frame, spec(4, 5, 1, 8)), ErrorCode::corrupt);
  EXPECT_EQ(error_of({}, spec(4, 5, 1, 8)), ErrorCode::corrupt);
}

TEST(DicomRle, SegmentCountsOtherThanSamplesTimesBytesAreCorrupt) {
  Bytes f = kRgb8;
  f[0] = 16;
  EXPECT_EQ(error_of(f, spec(2, 3, 3, 8)), ErrorCode::corrupt);
  f[0] = 2;
  EXPECT_EQ(error_of(f, spec(2, 3, 3, 8)), ErrorCode::corrupt);
  EXPECT_EQ(error_of(kRgb8, spec(2, 3, 1, 8)), ErrorCode::corrupt);
  EXPECT_EQ(error_of(kMono8, spec(2, 5, 1, 16)), ErrorCode::corrupt);
}

TEST(DicomRle, BadSegmentOffsetsAreCorrupt) {
  Bytes f = kRgb8;
  f[8] = 0xFF;  // segment 1 starts past the end: empty
  f[9] = 0xFF;
  EXPECT_EQ(error_of(f, spec(2, 3, 3, 8)), ErrorCode::corrupt);
  f = kRgb8;
  f[12] = 60;  // segment 2 before segment 1: segment 1 is empty
  EXPECT_EQ(error_of(f, spec(2, 3, 3, 8)), ErrorCode::corrupt);
  f = kRgb8;
  f[4] = 0xFF;  // beyond 32 bits of size_t arithmetic
  f[5] = 0xFF;
  f[6] = 0xFF;
  f[7] = 0xFF;
  EXPECT_EQ(error_of(f, spec(2, 3, 3, 8)), ErrorCode::corrupt);
}

TEST(DicomRle, SegmentsThatDecodeShortAreCorrupt) {
  EXPECT_EQ(error_of(Bytes(kMono8.begin(), kMono8.end() - 1), spec(4, 5, 1, 8)),
            ErrorCode::corrupt);
  // A repeat without its byte contributes nothing.
  EXPECT_EQ(error_of(cat(header({1, 64}), {0, 5, 255}), spec(1, 3, 1, 8)), ErrorCode::corrupt);
  EXPECT_EQ(decode<std::uint8_t>(cat(header({1, 64}), {0, 5, 255}), spec(1, 1, 1, 8)),
            (std::vector<std::uint8_t>{5}));
  EXPECT_EQ(error_of(kMono8, spec(5, 5, 1, 8)), ErrorCode::corrupt);
}

TEST(DicomRle, EveryTruncationIsCorruptOrDecodes) {
  for (std::size_t n = 0; n < kRgb16.size(); ++n) {
    const Bytes f(kRgb16.begin(), kRgb16.begin() + n);
    EXPECT_EQ(error_of(f, spec(1, 2, 3, 16)), ErrorCode::corrupt) << n;
  }
}

TEST(DicomRle, AnOutputOfTheWrongSizeIsRefused) {
  EXPECT_EQ(error_of(kMono8, spec(4, 5, 1, 8), 19), ErrorCode::invalid_argument);
  EXPECT_EQ(error_of(kMono8, spec(4, 5, 1, 8), 21), ErrorCode::invalid_argument);
  EXPECT_EQ(error_of(kMono8, spec(4, 5, 1, 12), 40), ErrorCode::unsupported);
}

}  // namespace
