// The JPEG Lossless (process 14) frame decoder against streams whose decoded values come from
// pydicom's plugins: pylibjpeg-libjpeg and GDCM agree on all of them except the point transform,
// where the values are GDCM's (and T.81's). The streams were written by a small test encoder
// (every predictor, restart intervals, Huffman category 16, separate scans, JFIF, component ids
// 'RGB', skipped segments and fill bytes); broken streams must give a voxpipe::Error.
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

// Generated with /work/main/.venv/bin/python (pydicom 3.0.2, pylibjpeg-libjpeg 2.5, GDCM 3.2.6).
const Bytes kMono16Cat16 = {255, 216, 255, 195, 0, 11, 16, 0, 4, 0, 5, 1, 1, 17, 0, 255, 196, 0, 36, 0, 0, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 255, 218, 0, 8, 1, 1, 0, 1, 0, 0, 239, 242, 35, 254, 255, 0, 187, 250, 156, 222, 255, 0, 51, 194, 239, 215, 60, 239, 247, 123, 190, 253, 197, 94, 255, 0, 81, 8, 239, 247, 79, 30, 255, 0, 41, 148, 239, 227, 51, 59, 252, 27, 91, 191, 199, 166, 123, 252, 23, 55, 191, 222, 58, 187, 252, 233, 191, 191, 199, 250, 123, 251, 26, 62, 247, 247, 239, 242, 71, 111, 255, 217};
const std::vector<std::uint32_t> kMono16Cat16Values = {8768, 41536, 52237, 32720, 38668, 39419, 46672, 1880, 31817, 9694, 26312, 60831, 35897, 4615, 35569, 8504, 49442, 62149, 64188, 40755};
const Bytes kMono12Pred7Restart = {255, 216, 255, 195, 0, 11, 12, 0, 5, 0, 4, 1, 1, 17, 0, 255, 196, 0, 36, 0, 0, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 255, 221, 0, 4, 0, 4, 255, 218, 0, 8, 1, 1, 0, 7, 0, 0, 239, 94, 78, 240, 2, 238, 27, 59, 215, 107, 255, 208, 232, 99, 187, 130, 239, 84, 238, 249, 31, 127, 255, 209, 239, 91, 30, 249, 32, 251, 181, 190, 247, 11, 255, 210, 239, 63, 94, 246, 195, 238, 39, 186, 218, 255, 211, 239, 112, 254, 192, 30, 92, 239, 53, 191, 255, 217};
const std::vector<std::uint32_t> kMono12Pred7RestartValues = {3556, 1511, 596, 2094, 1817, 2715, 4073, 1127, 3505, 565, 1424, 3227, 1014, 2745, 1880, 2098, 3855, 3345, 3437, 2249};
const Bytes kRgbIdsInterleaved = {255, 216, 255, 195, 0, 17, 8, 0, 3, 0, 4, 3, 82, 17, 0, 71, 17, 0, 66, 17, 0, 255, 196, 0, 36, 0, 0, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 255, 218, 0, 12, 3, 82, 0, 71, 0, 66, 0, 4, 0, 0, 231, 190, 123, 226, 30, 142, 58, 82, 230, 190, 167, 182, 222, 110, 224, 126, 114, 225, 190, 60, 233, 3, 157, 122, 220, 237, 83, 214, 248, 47, 161, 14, 158, 171, 231, 112, 93, 37, 107, 28, 197, 214, 111, 8, 244, 91, 209, 111, 83, 93, 66, 117, 223, 210, 246, 177, 255, 217};
const std::vector<std::uint32_t> kRgbIdsInterleavedValues = {251, 251, 34, 52, 78, 141, 210, 123, 251, 90, 237, 151, 184, 60, 151, 205, 226, 222, 247, 32, 199, 119, 175, 70, 3, 21, 249, 229, 77, 110, 61, 37, 219, 172, 19, 51};
const Bytes kJfifSeparateScans = {255, 216, 255, 224, 0, 16, 74, 70, 73, 70, 0, 1, 1, 0, 0, 1, 0, 1, 0, 0, 255, 195, 0, 17, 8, 0, 2, 0, 3, 3, 1, 17, 0, 2, 17, 0, 3, 17, 0, 255, 196, 0, 36, 0, 0, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 255, 218, 0, 8, 1, 1, 0, 6, 0, 0, 200, 113, 53, 77, 31, 123, 231, 127, 255, 218, 0, 8, 1, 2, 0, 6, 0, 0, 230, 110, 53, 225, 109, 79, 152, 121, 155, 255, 218, 0, 8, 1, 3, 0, 6, 0, 0, 231, 238, 130, 121, 167, 167, 158, 182, 248, 99, 255, 217};
const std::vector<std::uint32_t> kJfifSeparateScansValues = {144, 230, 254, 55, 156, 8, 44, 51, 113, 88, 186, 120, 86, 231, 160, 178, 190, 86};
const Bytes kMono10Pt2Pred5 = {255, 216, 255, 195, 0, 11, 10, 0, 3, 0, 4, 1, 1, 17, 0, 255, 196, 0, 36, 0, 0, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 255, 218, 0, 8, 1, 1, 0, 5, 0, 2, 230, 78, 135, 249, 43, 89, 232, 115, 181, 187, 179, 199, 156, 186, 208, 233, 127, 170, 14, 128, 191, 255, 217};
const std::vector<std::uint32_t> kMono10Pt2Pred5Values = {912, 16, 312, 160, 4, 1020, 88, 468, 836, 704, 876, 52};
const Bytes kMono2Pred3 = {255, 216, 255, 195, 0, 11, 2, 0, 3, 0, 3, 1, 1, 17, 0, 255, 196, 0, 36, 0, 0, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 255, 218, 0, 8, 1, 1, 0, 3, 0, 0, 68, 28, 142, 99, 95, 255, 217};
const std::vector<std::uint32_t> kMono2Pred3Values = {1, 0, 0, 3, 0, 2, 0, 1, 3};
const Bytes kSkippedSegments = {255, 216, 255, 254, 0, 5, 97, 98, 99, 255, 225, 0, 4, 1, 2, 255, 255, 255, 254, 0, 3, 122, 255, 195, 0, 11, 16, 0, 2, 0, 2, 1, 1, 17, 0, 255, 196, 0, 36, 0, 0, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 255, 221, 0, 4, 0, 2, 255, 218, 0, 8, 1, 1, 0, 2, 0, 0, 239, 228, 79, 187, 157, 239, 255, 208, 239, 241, 109, 126, 255, 0, 47, 121, 255, 217};
const std::vector<std::uint32_t> kSkippedSegmentsValues = {20799, 20254, 5848, 50770};

FrameSpec spec(std::uint32_t rows, std::uint32_t columns, std::uint32_t samples,
               std::uint32_t bits, std::string_view photometric = "MONOCHROME2") {
  FrameSpec s;
  s.name = "ll.dcm";
  s.frame = 1;
  s.offset = 99;
  s.rows = rows;
  s.columns = columns;
  s.samples = samples;
  s.bits_allocated = bits;
  s.bits_stored = bits;
  s.photometric = photometric;
  return s;
}

struct Decoded {
  std::vector<std::uint32_t> values;
  std::string photometric;
};

Decoded decode(const Bytes& src, const FrameSpec& s) {
  const std::size_t n = std::size_t{s.rows} * s.columns * s.samples;
  const std::size_t element = s.bits_allocated / 8;
  std::vector<std::uint8_t> out(n * element, 0xAB);
  const FrameOutcome outcome = decode_jpeg_lossless_frame(src, s, out);
  EXPECT_FALSE(outcome.sign_corrected);
  Decoded d{{}, outcome.photometric};
  for (std::size_t i = 0; i < n; ++i) {
    if (element == 1) {
      d.values.push_back(out[i]);
    } else if (element == 2) {
      std::uint16_t v;
      std::memcpy(&v, &out[2 * i], 2);
      d.values.push_back(v);
    } else {
      std::uint32_t v;
      std::memcpy(&v, &out[4 * i], 4);
      d.values.push_back(v);
    }
  }
  return d;
}

ErrorCode error_of(const Bytes& src, const FrameSpec& s, std::size_t out_size) {
  std::vector<std::uint8_t> out(out_size);
  try {
    decode_jpeg_lossless_frame(src, s, out);
  } catch (const Error& e) {
    EXPECT_EQ(e.path(), "ll.dcm");
    EXPECT_EQ(e.field(), "frame 1");
    EXPECT_EQ(e.offset(), std::optional<std::uint64_t>(99));
    return e.code();
  }
  ADD_FAILURE() << "no error";
  return ErrorCode::io;
}

ErrorCode error_of(const Bytes& src, const FrameSpec& s) {
  return error_of(src, s, std::size_t{s.rows} * s.columns * s.samples * s.bits_allocated / 8);
}

// Position of the first FF <marker> in a stream.
std::size_t find_marker(const Bytes& b, std::uint8_t marker) {
  for (std::size_t i = 0; i + 1 < b.size(); ++i)
    if (b[i] == 0xFF && b[i + 1] == marker) return i;
  ADD_FAILURE() << "marker not found";
  return 0;
}

TEST(DicomJpegLossless, SixteenBitsWithHuffmanCategory16AreLibjpegsValues) {
  const Decoded d = decode(kMono16Cat16, spec(4, 5, 1, 16));
  EXPECT_EQ(d.values, kMono16Cat16Values);
  EXPECT_EQ(d.photometric, "MONOCHROME2");
}

TEST(DicomJpegLossless, Predictor7WithARestartEveryLine) {
  EXPECT_EQ(decode(kMono12Pred7Restart, spec(5, 4, 1, 16)).values, kMono12Pred7RestartValues);
}

TEST(DicomJpegLossless, RgbComponentIdsMakeThePhotometricRgb) {
  const Decoded d = decode(kRgbIdsInterleaved, spec(3, 4, 3, 8, "YBR_FULL"));
  EXPECT_EQ(d.values, kRgbIdsInterleavedValues);
  EXPECT_EQ(d.photometric, "RGB");
}

TEST(DicomJpegLossless, SeparateScansWithJfifAreColourByPixelAndYbrFull) {
  const Decoded d = decode(kJfifSeparateScans, spec(2, 3, 3, 8, "RGB"));
  EXPECT_EQ(d.values, kJfifSeparateScansValues);
  EXPECT_EQ(d.photometric, "YBR_FULL");
  // A dataset that already says YBR keeps its value.
  EXPECT_EQ(decode(kJfifSeparateScans, spec(2, 3, 3, 8, "YBR_FULL_422")).photometric,
            "YBR_FULL_422");
}

TEST(DicomJpegLossless, PointTransformShiftsTheOutputAsGdcmDoes) {
  EXPECT_EQ(decode(kMono10Pt2Pred5, spec(3, 4, 1, 16)).values, kMono10Pt2Pred5Values);
}

TEST(DicomJpegLossless, TwoBitPrecisionAndWiderElements) {
  EXPECT_EQ(decode(kMono2Pred3, spec(3, 3, 1, 8)).values, kMono2Pred3Values);
  EXPECT_EQ(decode(kMono2Pred3, spec(3, 3, 1, 32)).values, kMono2Pred3Values);
  EXPECT_EQ(decode(kMono16Cat16, spec(4, 5, 1, 32)).values, kMono16Cat16Values);
}

TEST(DicomJpegLossless, CommentsAppSegmentsAndFillBytesAreSkipped) {
  EXPECT_EQ(decode(kSkippedSegments, spec(2, 2, 1, 16)).values, kSkippedSegmentsValues);
}

TEST(DicomJpegLossless, BytesAfterEoiAreIgnored) {
  Bytes f = kMono2Pred3;
  f.push_back(0);
  EXPECT_EQ(decode(f, spec(3, 3, 1, 8)).values, kMono2Pred3Values);
}

TEST(DicomJpegLossless, EveryTruncationIsAnError) {
  // Each prefix that stops before the last byte of entropy-coded data fails; the prefixes that
  // lose only the EOI marker still hold the whole scan.
  const Bytes& full = kMono12Pred7Restart;
  const std::size_t eoi = full.size() - 2;
  for (std::size_t n = 0; n < eoi; ++n) {
    const Bytes f(full.begin(), full.begin() + n);
    EXPECT_EQ(error_of(f, spec(5, 4, 1, 16)), ErrorCode::corrupt) << n;
  }
  EXPECT_EQ(decode(Bytes(full.begin(), full.begin() + eoi), spec(5, 4, 1, 16)).values,
            kMono12Pred7RestartValues);
}

TEST(DicomJpegLossless, BadHuffmanTablesAreCorrupt) {
  Bytes f = kMono16Cat16;
  const std::size_t dht = find_marker(f, 0xC4);
  f[dht + 5] = 3;  // three codes of length 1 cannot exist
  EXPECT_EQ(error_of(f, spec(4, 5, 1, 16)), ErrorCode::corrupt);
  f = kMono16Cat16;
  f[dht + 4] = 0x05;  // table id 5
  EXPECT_EQ(error_of(f, spec(4, 5, 1, 16)), ErrorCode::corrupt);
  f = kMono16Cat16;
  f[dht + 20] = 200;  // more symbols than the segment holds
  EXPECT_EQ(error_of(f, spec(4, 5, 1, 16)), ErrorCode::corrupt);
  f = kMono16Cat16;
  f[find_marker(f, 0xDA) + 6] = 0x10;  // the scan uses table 1, never defined
  EXPECT_EQ(error_of(f, spec(4, 5, 1, 16)), ErrorCode::corrupt);
}

TEST(DicomJpegLossless, HuffmanSymbolsAbove16AreCorrupt) {
  Bytes f = kMono2Pred3;
  const std::size_t dht = find_marker(f, 0xC4);
  for (std::size_t i = dht + 21; i < dht + 21 + 17; ++i) f[i] = 17;  // every symbol is 17
  EXPECT_EQ(error_of(f, spec(3, 3, 1, 8)), ErrorCode::corrupt);
}

TEST(DicomJpegLossless, MissingSofOrSosIsCorrupt) {
  const Bytes& full = kMono16Cat16;
  const std::size_t sof = find_marker(full, 0xC3), dht = find_marker(full, 0xC4);
  Bytes no_sof(full.begin(), full.begin() + sof);
  no_sof.insert(no_sof.end(), full.begin() + dht, full.end());
  EXPECT_EQ(error_of(no_sof, spec(4, 5, 1, 16)), ErrorCode::corrupt);
  const std::size_t sos = find_marker(full, 0xDA);
  Bytes no_sos(full.begin(), full.begin() + sos);
  no_sos.insert(no_sos.end(), {0xFF, 0xD9});
  EXPECT_EQ(error_of(no_sos, spec(4, 5, 1, 16)), ErrorCode::corrupt);
  Bytes no_soi(full.begin() + 2, full.end());
  EXPECT_EQ(error_of(no_soi, spec(4, 5, 1, 16)), ErrorCode::corrupt);
  // One of three components without a scan.
  const Bytes& sep = kJfifSeparateScans;
  Bytes two_scans(sep.begin(), sep.begin() + find_marker(sep, 0xDA));
  two_scans.insert(two_scans.end(), {0xFF, 0xD9});
  EXPECT_EQ(error_of(two_scans, spec(2, 3, 3, 8, "RGB")), ErrorCode::corrupt);
}

TEST(DicomJpegLossless, AMissingRestartMarkerIsCorrupt) {
  Bytes f = kMono12Pred7Restart;
  const std::size_t rst = find_marker(f, 0xD0);
  f.erase(f.begin() + rst, f.begin() + rst + 2);
  EXPECT_EQ(error_of(f, spec(5, 4, 1, 16)), ErrorCode::corrupt);
}

// What libjpeg decodes past with "Corrupt JPEG data" warnings: data left over before an RSTn or
// after the scan, an RSTn out of order. An error naming it by default; with recover_corrupt the
// frame (intact here: the restarts resynchronise) and the message as a warning.
TEST(DicomJpegLossless, LeftOverDataAndRestartsOutOfOrderAreDamage) {
  Bytes before_rst = kMono12Pred7Restart;
  const std::size_t rst1 = find_marker(before_rst, 0xD1);
  before_rst.insert(before_rst.begin() + rst1, {0x12, 0x34});
  Bytes wrong_rst = kMono12Pred7Restart;
  wrong_rst[find_marker(wrong_rst, 0xD1) + 1] = 0xD3;
  Bytes after_scan = kMono12Pred7Restart;
  after_scan.insert(after_scan.end() - 2, {0x00, 0x00, 0x00});
  const std::pair<Bytes, std::string> cases[] = {
      {before_rst, "2 extraneous bytes before an RST marker"},
      {wrong_rst, "found RST3 instead of RST1"},
      {after_scan, "3 extraneous bytes after the scan"}};
  for (const auto& [stream, message] : cases) {
    SCOPED_TRACE(message);
    std::vector<std::uint8_t> out(5 * 4 * 2);
    try {
      decode_jpeg_lossless_frame(stream, spec(5, 4, 1, 16), out);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::corrupt);
      EXPECT_EQ(e.field(), "frame 1");
      EXPECT_NE(e.detail().find(message), std::string::npos) << e.detail();
    }
    FrameSpec recover = spec(5, 4, 1, 16);
    recover.recover_corrupt = true;
    const FrameOutcome outcome = decode_jpeg_lossless_frame(stream, recover, out);
    ASSERT_EQ(outcome.warnings.size(), 1u);
    EXPECT_NE(outcome.warnings[0].find(message), std::string::npos) << outcome.warnings[0];
    EXPECT_EQ(decode(stream, recover).values, kMono12Pred7RestartValues);
  }
}

TEST(DicomJpegLossless, RestartIntervalsOfPartLinesAreUnsupported) {
  Bytes f = kMono12Pred7Restart;
  const std::size_t dri = find_marker(f, 0xDD);
  f[dri + 5] = 3;  // every 3 MCUs, lines of 4
  EXPECT_EQ(error_of(f, spec(5, 4, 1, 16)), ErrorCode::unsupported);
}

TEST(DicomJpegLossless, AFrameOfAnotherSizeThanTheDatasetIsAFormatError) {
  EXPECT_EQ(error_of(kMono16Cat16, spec(5, 4, 1, 16)), ErrorCode::format);
  EXPECT_EQ(error_of(kMono16Cat16, spec(4, 5, 3, 16)), ErrorCode::format);
  EXPECT_EQ(error_of(kMono16Cat16, spec(4, 5, 1, 8)), ErrorCode::format);  // 16 bits in 8
  EXPECT_EQ(error_of(kMono16Cat16, spec(4, 5, 1, 16), 39), ErrorCode::invalid_argument);
}

TEST(DicomJpegLossless, OtherJpegProcessesAreUnsupported) {
  Bytes f = kMono2Pred3;
  f[find_marker(f, 0xC3) + 1] = 0xC1;
  EXPECT_EQ(error_of(f, spec(3, 3, 1, 8)), ErrorCode::unsupported);
}

TEST(DicomJpegLossless, BadScanHeadersAreCorrupt) {
  Bytes f = kMono2Pred3;
  const std::size_t sos = find_marker(f, 0xDA);
  f[sos + 7] = 0;  // predictor 0
  EXPECT_EQ(error_of(f, spec(3, 3, 1, 8)), ErrorCode::corrupt);
  f[sos + 7] = 8;
  EXPECT_EQ(error_of(f, spec(3, 3, 1, 8)), ErrorCode::corrupt);
  f = kMono2Pred3;
  f[sos + 5] = 9;  // component id not in the frame
  EXPECT_EQ(error_of(f, spec(3, 3, 1, 8)), ErrorCode::corrupt);
  f = kMono2Pred3;
  f[sos + 3] = 0xFF;  // segment length past the end
  EXPECT_EQ(error_of(f, spec(3, 3, 1, 8)), ErrorCode::corrupt);
}

TEST(DicomJpegLossless, FlippedBitsNeverEscapeAsAnythingButError) {
  // Each single-bit change either decodes or throws voxpipe::Error (the sanitizer builds check
  // that nothing is read or written out of bounds).
  for (const Bytes* base : {&kMono16Cat16, &kJfifSeparateScans, &kMono12Pred7Restart}) {
    const FrameSpec s = base == &kMono16Cat16         ? spec(4, 5, 1, 16)
                        : base == &kJfifSeparateScans ? spec(2, 3, 3, 8, "RGB")
                                                      : spec(5, 4, 1, 16);
    std::vector<std::uint8_t> out(std::size_t{s.rows} * s.columns * s.samples *
                                  s.bits_allocated / 8);
    for (std::size_t i = 0; i < base->size() * 8; ++i) {
      Bytes f = *base;
      f[i / 8] ^= static_cast<std::uint8_t>(1u << (i % 8));
      try {
        decode_jpeg_lossless_frame(f, s, out);
      } catch (const Error&) {
      }
    }
  }
}

}  // namespace
