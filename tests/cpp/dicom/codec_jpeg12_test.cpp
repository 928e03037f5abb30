// The 12-bit lossy JPEG decoder (JPEG Extended, process 4) through decode_jpeg_frame, which hands
// it the 12-bit frames, against the values pydicom 3's pixel_array gives (pylibjpeg-libjpeg: GDCM
// refuses 12-bit JPEG Extended), and broken or contradicting frames.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "dicom/codecs/codec.hpp"
#include "voxpipe/error.hpp"

namespace {

using namespace voxpipe;
using namespace voxpipe::dicom;

// Both streams hold the coefficients of 3 x 3 blocks of pydicom's JPGExtended.dcm (block rows
// 51-53, columns 18-20), cropped to 20 x 19 samples, re-encoded with their own Huffman tables
// (the re-encoded whole file decodes to pydicom's pixel_array of JPGExtended.dcm). Expected values:
// libjpeg.decode of the stream (pylibjpeg-libjpeg 2.5, what pydicom uses for this syntax).
// kRestart: the file's quantization table, a restart interval of 2 blocks (RST0..RST3).
constexpr std::uint8_t kRestart[] = {
    0xff, 0xd8, 0xff, 0xdb, 0x00, 0x43, 0x00, 0x13, 0x0d, 0x0e, 0x10, 0x0e, 0x0c, 0x13, 0x10, 0x0f,
    0x10, 0x15, 0x14, 0x13, 0x16, 0x1c, 0x30, 0x1f, 0x1c, 0x1a, 0x1a, 0x1c, 0x3a, 0x2a, 0x2c, 0x22,
    0x30, 0x45, 0x3d, 0x49, 0x48, 0x44, 0x3d, 0x43, 0x42, 0x4c, 0x56, 0x6e, 0x5d, 0x4c, 0x51, 0x68,
    0x52, 0x42, 0x43, 0x60, 0x82, 0x61, 0x68, 0x72, 0x75, 0x7b, 0x7c, 0x7b, 0x4a, 0x5c, 0x87, 0x91,
    0x86, 0x78, 0x90, 0x6e, 0x79, 0x7b, 0x76, 0xff, 0xc1, 0x00, 0x0b, 0x0c, 0x00, 0x14, 0x00, 0x13,
    0x01, 0x01, 0x11, 0x00, 0xff, 0xc4, 0x00, 0x38, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, 0x07, 0x0a, 0x10, 0x00, 0x00, 0x00,
    0x00, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02,
    0x03, 0x04, 0x05, 0x11, 0x12, 0x13, 0x21, 0x31, 0x32, 0x41, 0x51, 0x61, 0x71, 0xc1, 0xff, 0xdd,
    0x00, 0x04, 0x00, 0x02, 0xff, 0xda, 0x00, 0x08, 0x01, 0x01, 0x00, 0x00, 0x3f, 0x00, 0x8d, 0x12,
    0x69, 0x5c, 0x18, 0x80, 0x83, 0x30, 0x23, 0x02, 0x00, 0x91, 0xc1, 0xb0, 0xc4, 0x06, 0x74, 0x34,
    0x81, 0xff, 0xd0, 0x8b, 0x83, 0xa6, 0x86, 0x14, 0x20, 0x60, 0x12, 0x88, 0xc2, 0x45, 0x08, 0x0d,
    0x68, 0x41, 0x86, 0xd0, 0x3f, 0xff, 0xd1, 0x8c, 0xe2, 0xc4, 0x8c, 0x20, 0x48, 0xb0, 0xc3, 0x12,
    0x13, 0x2a, 0x80, 0x70, 0xa0, 0x82, 0x08, 0x27, 0x1e, 0x07, 0xff, 0xd2, 0x8d, 0xf1, 0x65, 0xc1,
    0xa2, 0x43, 0x3c, 0x28, 0xd0, 0xd9, 0x74, 0x02, 0x09, 0x64, 0xb4, 0x64, 0x8c, 0x4c, 0xd7, 0xc1,
    0xff, 0xd3, 0x8b, 0xd1, 0x41, 0x04, 0x60, 0x41, 0x84, 0x19, 0xa0, 0xff, 0xd9,
};
constexpr std::uint16_t kRestartExpected[] = {
    82, 81, 80, 80, 79, 73, 62, 53, 48, 52, 57, 60,
    61, 59, 55, 52, 58, 59, 57, 101, 96, 91, 87, 83,
    75, 63, 55, 54, 56, 59, 60, 59, 56, 51, 48, 49,
    51, 53, 125, 118, 107, 97, 89, 80, 68, 60, 61, 61,
    61, 59, 57, 53, 49, 47, 49, 52, 54, 144, 134, 120,
    108, 99, 89, 79, 71, 65, 64, 61, 59, 56, 54, 53,
    52, 59, 60, 60, 156, 146, 133, 121, 112, 103, 93, 86,
    70, 67, 63, 59, 57, 58, 59, 60, 59, 61, 61, 168,
    160, 149, 139, 130, 120, 108, 100, 82, 77, 69, 63, 59,
    60, 62, 64, 51, 54, 57, 185, 178, 169, 159, 149, 135,
    119, 108, 98, 90, 79, 67, 60, 58, 60, 62, 51, 55,
    58, 198, 192, 183, 173, 161, 144, 125, 112, 111, 101, 86,
    71, 60, 56, 56, 57, 61, 63, 63, 201, 190, 179, 176,
    178, 173, 158, 145, 121, 98, 77, 68, 62, 55, 58, 66,
    55, 58, 63, 228, 217, 205, 198, 194, 182, 163, 147, 130,
    111, 93, 86, 78, 66, 62, 65, 67, 69, 71, 236, 228,
    219, 214, 206, 192, 170, 154, 147, 130, 115, 108, 97, 79,
    68, 67, 68, 68, 68, 219, 217, 215, 215, 211, 199, 181,
    167, 166, 147, 129, 120, 106, 86, 74, 73, 71, 69, 67,
    218, 219, 221, 223, 220, 210, 196, 186, 180, 157, 134, 121,
    106, 88, 80, 81, 82, 80, 77, 238, 240, 240, 238, 231,
    220, 208, 201, 181, 158, 135, 121, 107, 91, 84, 86, 77,
    76, 74, 244, 245, 243, 238, 228, 218, 210, 205, 174, 155,
    137, 128, 116, 97, 86, 86, 67, 68, 69, 231, 231, 230,
    225, 216, 209, 205, 203, 166, 151, 140, 136, 125, 103, 88,
    84, 72, 74, 77, 246, 226, 206, 206, 216, 216, 197, 176,
    172, 157, 143, 131, 111, 85, 71, 71, 69, 70, 70, 209,
    204, 199, 198, 199, 195, 187, 179, 151, 139, 132, 128, 115,
    96, 86, 87, 64, 67, 68, 165, 176, 186, 186, 177, 170,
    171, 175, 149, 139, 131, 126, 111, 88, 74, 73, 63, 66,
    68, 140, 153, 166, 168, 161, 153, 153, 157, 136, 126, 120,
    116, 101, 78, 63, 62, 69, 72, 75,
};

// kClamped: 16-bit quantization table (AC steps x 6), DC values set to reach 3900 and 150, so that
// samples clamp at 0 (15) and 4095 (42).
constexpr std::uint8_t kClamped[] = {
    0xff, 0xd8, 0xff, 0xdb, 0x00, 0x83, 0x10, 0x00, 0x13, 0x00, 0x4e, 0x00, 0x54, 0x00, 0x60, 0x00,
    0x54, 0x00, 0x48, 0x00, 0x72, 0x00, 0x60, 0x00, 0x5a, 0x00, 0x60, 0x00, 0x7e, 0x00, 0x78, 0x00,
    0x72, 0x00, 0x84, 0x00, 0xa8, 0x01, 0x20, 0x00, 0xba, 0x00, 0xa8, 0x00, 0x9c, 0x00, 0x9c, 0x00,
    0xa8, 0x01, 0x5c, 0x00, 0xfc, 0x01, 0x08, 0x00, 0xcc, 0x01, 0x20, 0x01, 0x9e, 0x01, 0x6e, 0x01,
    0xb6, 0x01, 0xb0, 0x01, 0x98, 0x01, 0x6e, 0x01, 0x92, 0x01, 0x8c, 0x01, 0xc8, 0x02, 0x04, 0x02,
    0x94, 0x02, 0x2e, 0x01, 0xc8, 0x01, 0xe6, 0x02, 0x70, 0x01, 0xec, 0x01, 0x8c, 0x01, 0x92, 0x02,
    0x40, 0x03, 0x0c, 0x02, 0x46, 0x02, 0x70, 0x02, 0xac, 0x02, 0xbe, 0x02, 0xe2, 0x02, 0xe8, 0x02,
    0xe2, 0x01, 0xbc, 0x02, 0x28, 0x03, 0x2a, 0x03, 0x66, 0x03, 0x24, 0x02, 0xd0, 0x03, 0x60, 0x02,
    0x94, 0x02, 0xd6, 0x02, 0xe2, 0x02, 0xc4, 0xff, 0xc1, 0x00, 0x0b, 0x0c, 0x00, 0x14, 0x00, 0x13,
    0x01, 0x01, 0x11, 0x00, 0xff, 0xc4, 0x00, 0x37, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x0b, 0x10, 0x00, 0x00, 0x00, 0x00,
    0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x03,
    0x04, 0x05, 0x11, 0x12, 0x13, 0x21, 0x31, 0x32, 0x41, 0x51, 0x61, 0x71, 0xc1, 0xff, 0xda, 0x00,
    0x08, 0x01, 0x01, 0x00, 0x00, 0x3f, 0x00, 0x30, 0xc2, 0x69, 0x5c, 0x18, 0x80, 0x83, 0x30, 0x23,
    0x02, 0x02, 0x75, 0x07, 0x06, 0xc3, 0x10, 0x19, 0xd0, 0xd2, 0x03, 0x8a, 0xce, 0x9a, 0x18, 0x50,
    0x81, 0x3a, 0x84, 0xa2, 0x30, 0x91, 0x42, 0x03, 0x5a, 0x10, 0x61, 0xb4, 0x07, 0x15, 0x96, 0x24,
    0x61, 0x02, 0x45, 0x86, 0x18, 0x90, 0x99, 0x54, 0x09, 0xd4, 0x14, 0x10, 0x41, 0x04, 0xe3, 0xc0,
    0x71, 0x58, 0xb2, 0xe0, 0xd1, 0x21, 0x9e, 0x14, 0x68, 0x6c, 0xba, 0x04, 0xea, 0x12, 0xc9, 0x68,
    0xc9, 0x18, 0x99, 0xaf, 0x81, 0xc5, 0x62, 0x82, 0x08, 0xc0, 0x83, 0x08, 0x33, 0x41, 0xff, 0xd9,
};
constexpr std::uint16_t kClampedExpected[] = {
    3706, 3695, 3690, 3693, 3688, 3649, 3584, 3531, 66, 86, 115, 137,
    142, 127, 104, 87, 3914, 3920, 3913, 3817, 3791, 3759, 3735, 3709,
    3660, 3592, 3540, 99, 111, 127, 136, 129, 108, 83, 66, 3861,
    3876, 3885, 3964, 3917, 3853, 3797, 3748, 3690, 3622, 3573, 138, 140,
    139, 132, 116, 94, 72, 58, 3863, 3880, 3890, 4075, 4016, 3934,
    3861, 3804, 3746, 3684, 3640, 164, 157, 143, 128, 112, 100, 92,
    88, 3921, 3930, 3927, 4095, 4089, 4008, 3939, 3885, 3831, 3771, 3729,
    196, 180, 154, 132, 120, 121, 130, 137, 3924, 3935, 3934, 4095,
    4095, 4095, 4046, 3993, 3931, 3860, 3809, 264, 235, 191, 151, 130,
    133, 149, 162, 3874, 3893, 3910, 4095, 4095, 4095, 4095, 4095, 4022,
    3928, 3862, 363, 318, 247, 179, 136, 125, 135, 147, 3876, 3897,
    3915, 4095, 4095, 4095, 4095, 4095, 4076, 3963, 3885, 439, 382, 292,
    201, 137, 111, 112, 120, 3932, 3944, 3948, 113, 47, 0, 0,
    0, 0, 0, 0, 3982, 3846, 3716, 3661, 3624, 3587, 3601, 3651,
    74, 95, 123, 274, 210, 136, 97, 69, 0, 0, 0, 4036,
    3919, 3814, 3772, 3723, 3651, 3624, 3645, 149, 160, 175, 321, 276,
    223, 187, 145, 56, 0, 0, 4095, 4032, 3943, 3904, 3838, 3729,
    3661, 3655, 157, 155, 152, 219, 207, 198, 195, 172, 100, 0,
    0, 4095, 4095, 4031, 3973, 3891, 3773, 3699, 3692, 174, 163, 146,
    212, 220, 235, 245, 227, 167, 83, 21, 4095, 4095, 4060, 3978,
    3890, 3784, 3732, 3741, 237, 225, 206, 336, 344, 349, 335, 294,
    227, 157, 112, 4095, 4095, 4065, 3983, 3898, 3800, 3756, 3771, 208,
    203, 193, 371, 375, 367, 334, 277, 214, 165, 139, 4095, 4095,
    4078, 4024, 3948, 3838, 3772, 3770, 149, 156, 161, 290, 295, 287,
    255, 204, 159, 133, 126, 4095, 4095, 4095, 4070, 4002, 3874, 3780,
    3757, 177, 191, 207, 4095, 4095, 4095, 4095, 4095, 4095, 4095, 4069,
    624, 534, 447, 375, 254, 102, 19, 16, 3909, 3919, 3918, 4095,
    4095, 4095, 4095, 4095, 4095, 4095, 4086, 493, 427, 380, 357, 281,
    164, 103, 111, 3881, 3896, 3903, 4000, 4065, 4095, 4095, 4072, 4030,
    4037, 4063, 486, 422, 376, 347, 256, 116, 33, 27, 3873, 3892,
    3905, 3852, 3930, 4010, 4023, 3975, 3932, 3933, 3955, 408, 349, 309,
    286, 197, 56, 0, 0, 3911, 3931, 3944,
};

FrameSpec spec12(std::uint32_t rows, std::uint32_t columns) {
  FrameSpec s;
  s.name = "twelve.dcm";
  s.frame = 2;
  s.offset = 1234;
  s.rows = rows;
  s.columns = columns;
  s.bits_allocated = 16;
  s.bits_stored = 12;
  s.photometric = "MONOCHROME2";
  return s;
}

std::vector<std::uint16_t> decode(std::span<const std::uint8_t> src, const FrameSpec& s) {
  std::vector<std::uint16_t> values(std::size_t{s.rows} * s.columns);
  const FrameOutcome outcome = decode_jpeg_frame(
      src, s, std::span(reinterpret_cast<std::uint8_t*>(values.data()), values.size() * 2));
  EXPECT_EQ(outcome.photometric, "MONOCHROME2");
  EXPECT_FALSE(outcome.sign_corrected);
  return values;
}

Error error_of(std::span<const std::uint8_t> src, const FrameSpec& s) {
  std::vector<std::uint8_t> out(std::size_t{s.rows} * s.columns * s.samples *
                                s.bits_allocated / 8);
  try {
    decode_jpeg_frame(src, s, out);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected an error";
  return Error(ErrorCode::io, "", "", "", 0);
}

// The offset of the first marker segment `marker` (FF xx) in `v`.
std::size_t find_marker(const std::vector<std::uint8_t>& v, std::uint8_t marker) {
  for (std::size_t i = 0; i + 1 < v.size(); ++i)
    if (v[i] == 0xFF && v[i + 1] == marker) return i;
  ADD_FAILURE() << "no marker " << int{marker};
  return 0;
}

TEST(CodecJpeg12, RestartIntervalsAndPartialBlocksDecodeAsPydicom) {
  EXPECT_EQ(decode(kRestart, spec12(20, 19)),
            std::vector<std::uint16_t>(std::begin(kRestartExpected), std::end(kRestartExpected)));
}

TEST(CodecJpeg12, SamplesClampAtZeroAnd4095AsPydicom) {
  EXPECT_EQ(decode(kClamped, spec12(20, 19)),
            std::vector<std::uint16_t>(std::begin(kClampedExpected), std::end(kClampedExpected)));
}

TEST(CodecJpeg12, ThirtyTwoBitOutputHoldsTheSameValues) {
  FrameSpec s = spec12(20, 19);
  s.bits_allocated = 32;
  std::vector<std::uint32_t> values(20 * 19);
  decode_jpeg_frame(kClamped, s,
                    std::span(reinterpret_cast<std::uint8_t*>(values.data()), values.size() * 4));
  EXPECT_EQ(values, std::vector<std::uint32_t>(std::begin(kClampedExpected),
                                               std::end(kClampedExpected)));
}

TEST(CodecJpeg12, EveryTruncationIsCorruptAndNamesTheFrame) {
  const std::vector<std::uint8_t> whole(std::begin(kRestart), std::end(kRestart));
  const std::size_t sos = find_marker(whole, 0xDA);
  // Cut inside the entropy-coded data (the last 2 bytes are EOI, which is not needed).
  for (std::size_t n = sos + 10; n + 2 < whole.size(); ++n) {
    const std::vector<std::uint8_t> cut(whole.begin(), whole.begin() + static_cast<long>(n));
    const Error e = error_of(cut, spec12(20, 19));
    EXPECT_EQ(e.code(), ErrorCode::corrupt) << n << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find("twelve.dcm"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("frame 2"), std::string::npos) << e.what();
  }
  // Cut in the marker segments: refused, whatever the code.
  for (std::size_t n = 0; n < sos + 10; ++n) {
    const std::vector<std::uint8_t> cut(whole.begin(), whole.begin() + static_cast<long>(n));
    std::vector<std::uint8_t> out(20 * 19 * 2);
    EXPECT_THROW(decode_jpeg_frame(cut, spec12(20, 19), out), Error) << n;
  }
}

TEST(CodecJpeg12, BadHuffmanTableIsCorrupt) {
  std::vector<std::uint8_t> bad(std::begin(kRestart), std::end(kRestart));
  const std::size_t dht = find_marker(bad, 0xC4);
  // Three codes of length 1 (Tc/Th at dht + 4, the counts from dht + 5): lengths overflow.
  bad[dht + 5] = 3;
  const Error e = error_of(bad, spec12(20, 19));
  EXPECT_EQ(e.code(), ErrorCode::corrupt);
  EXPECT_NE(std::string(e.what()).find("Huffman"), std::string::npos) << e.what();
}

TEST(CodecJpeg12, SizeDisagreeingWithTheDatasetIsFormat) {
  EXPECT_EQ(error_of(kRestart, spec12(20, 18)).code(), ErrorCode::format);
  EXPECT_EQ(error_of(kRestart, spec12(21, 19)).code(), ErrorCode::format);
  FrameSpec eight = spec12(20, 19);
  eight.bits_allocated = 8;  // 12-bit samples do not fit
  EXPECT_EQ(error_of(kRestart, eight).code(), ErrorCode::format);
  FrameSpec colour = spec12(20, 19);
  colour.samples = 3;
  EXPECT_EQ(error_of(kRestart, colour).code(), ErrorCode::unsupported);
}

TEST(CodecJpeg12, WrongOutputSizeIsInvalidArgument) {
  std::vector<std::uint8_t> out(20 * 19 * 2 + 1);
  try {
    decode_jpeg_frame(kRestart, spec12(20, 19), out);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  }
}

TEST(CodecJpeg12, ScanThatIsNotSequentialIsCorrupt) {
  // JPEG-lossy.dcm's scan ends at Se 0; pydicom (libjpeg) refuses it too.
  std::vector<std::uint8_t> bad(std::begin(kRestart), std::end(kRestart));
  const std::size_t sos = find_marker(bad, 0xDA);
  bad[sos + 8] = 0;  // Se
  EXPECT_EQ(error_of(bad, spec12(20, 19)).code(), ErrorCode::corrupt);
}

TEST(CodecJpeg12, ProgressiveAndArithmeticFramesAreUnsupported) {
  for (const std::uint8_t sof : {std::uint8_t{0xC2}, std::uint8_t{0xC9}}) {
    std::vector<std::uint8_t> other(std::begin(kRestart), std::end(kRestart));
    other[find_marker(other, 0xC1) + 1] = sof;
    EXPECT_EQ(error_of(other, spec12(20, 19)).code(), ErrorCode::unsupported) << int{sof};
  }
}

TEST(CodecJpeg12, MissingRestartMarkerIsCorrupt) {
  std::vector<std::uint8_t> bad(std::begin(kRestart), std::end(kRestart));
  const std::size_t rst = find_marker(bad, 0xD0);
  bad[rst + 1] = 0x00;  // FF D0 -> a stuffed FF: no RST0 where the interval ends
  EXPECT_EQ(error_of(bad, spec12(20, 19)).code(), ErrorCode::corrupt);
}

}  // namespace
