// GzipWriter: what Python's gzip module writes (header, raw deflate from zlib, CRC32, ISIZE),
// checked by inflating with zlib itself.
#include "gz/gzip_reader.hpp"
#include "gz/gzip_writer.hpp"
#include "test_support.hpp"

namespace {

using voxpipe::ErrorCode;
using voxpipe::core::AtomicOutputFile;
using voxpipe::gz::GzipWriter;
using vptest::Bytes;
using vptest::raw_deflate;

// Writes `data` in pieces of `piece` bytes (0: one call) and returns the file's bytes.
Bytes write_gz(const vptest::TempDir& dir, const Bytes& data, int level, std::size_t piece = 0) {
  const std::string path = dir.file("w.gz");
  {
    AtomicOutputFile out(path);
    GzipWriter w(out, level);
    if (piece == 0) {
      w.write(vptest::as_bytes(data));
    } else {
      for (std::size_t i = 0; i < data.size(); i += piece)
        w.write(vptest::as_bytes(data).subspan(i, std::min(piece, data.size() - i)));
    }
    w.finish();
    out.commit();
  }
  return vptest::read_file(path);
}

Bytes le32(std::uint32_t v) {
  return Bytes{static_cast<std::uint8_t>(v), static_cast<std::uint8_t>(v >> 8),
               static_cast<std::uint8_t>(v >> 16), static_cast<std::uint8_t>(v >> 24)};
}

TEST(GzipWriter, RoundTripThroughZlibAtLevels0To9) {
  vptest::TempDir dir;
  const Bytes data = vptest::concat({vptest::text_bytes(400000, 1), vptest::random_bytes(300000, 2)});
  for (int level : {0, 1, 2, 6, 9}) {
    EXPECT_EQ(vptest::gunzip(write_gz(dir, data, level)), data) << "level " << level;
    EXPECT_EQ(vptest::gunzip(write_gz(dir, data, level, 4093)), data) << "level " << level;
  }
}

TEST(GzipWriter, HeaderBytesAreThoseOfPythonGzip) {
  vptest::TempDir dir;
  const Bytes data = vptest::text_bytes(1000, 3);
  const Bytes level1{0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0xff};
  const Bytes out1 = write_gz(dir, data, 1);
  EXPECT_EQ(Bytes(out1.begin(), out1.begin() + 10), level1);
  // XFL: 2 for level 9, 0 for levels other than 1 and 9.
  const Bytes out9 = write_gz(dir, data, 9);
  EXPECT_EQ(out9[8], 0x02);
  for (int level : {0, 5, 6}) EXPECT_EQ(write_gz(dir, data, level)[8], 0x00) << level;
}

TEST(GzipWriter, WholeFileIsHeaderRawDeflateCrcAndSize) {
  // Level 0 is left out: zlib sizes stored blocks by the caller's output buffer, so only the
  // inflated content is defined there (checked by the round trip above).
  vptest::TempDir dir;
  const Bytes data = vptest::text_bytes(300000, 4);
  for (int level : {1, 6, 9}) {
    const std::uint8_t xfl = level == 1 ? 4 : level == 9 ? 2 : 0;
    const std::uint32_t crc = static_cast<std::uint32_t>(crc32(0, data.data(), static_cast<uInt>(data.size())));
    const Bytes expected = vptest::concat({Bytes{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, xfl, 0xff},
                                           raw_deflate(data, level), le32(crc),
                                           le32(static_cast<std::uint32_t>(data.size()))});
    EXPECT_EQ(write_gz(dir, data, level), expected) << "level " << level;
  }
}

TEST(GzipWriter, Level0StoresAndLevel9Compresses) {
  vptest::TempDir dir;
  const Bytes data = vptest::text_bytes(200000, 5);
  const Bytes stored = write_gz(dir, data, 0), best = write_gz(dir, data, 9), fast = write_gz(dir, data, 1);
  EXPECT_GE(stored.size(), data.size() + 18);
  EXPECT_LT(best.size(), data.size() / 2);
  EXPECT_LE(best.size(), fast.size());
  EXPECT_EQ(vptest::gunzip(stored), data);
  EXPECT_EQ(vptest::gunzip(best), data);
}

TEST(GzipWriter, EmptyInput) {
  vptest::TempDir dir;
  const Bytes out = write_gz(dir, Bytes{}, 1);
  EXPECT_TRUE(vptest::gunzip(out).empty());
  EXPECT_EQ(Bytes(out.end() - 8, out.end()), Bytes(8, 0));  // crc32("") = 0, size 0
}

TEST(GzipWriter, ReadableByGzipByteSource) {
  vptest::TempDir dir;
  const Bytes data = vptest::text_bytes(500000, 6);
  write_gz(dir, data, 1, 100000);
  voxpipe::gz::GzipByteSource src(dir.file("w.gz"));
  std::vector<std::byte> buf(data.size() + 1);
  ASSERT_EQ(src.read_at(0, buf), data.size());
  EXPECT_EQ(std::memcmp(buf.data(), data.data(), data.size()), 0);
}

TEST(GzipWriter, InvalidLevelIsRefusedAndLeavesNoFile) {
  vptest::TempDir dir;
  for (int level : {-1, 10, 100}) {
    {
      AtomicOutputFile out(dir.file("x.gz"));
      EXPECT_VP_ERROR(GzipWriter w(out, level), ErrorCode::invalid_argument);
    }
    EXPECT_TRUE(dir.entries().empty());
  }
}

}  // namespace
