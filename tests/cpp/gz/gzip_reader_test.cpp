// GzipByteSource over streams made by zlib in the test: members, padding, trailing garbage,
// checksums, truncation, seeking, and reading only as much input as the output needs.
#include "gz/gzip_reader.hpp"
#include "test_support.hpp"

namespace {

using voxpipe::ErrorCode;
using voxpipe::gz::GzipByteSource;
using vptest::Bytes;

std::string put(const vptest::TempDir& dir, const std::string& name, const Bytes& bytes) {
  vptest::write_file(dir.file(name), bytes);
  return dir.file(name);
}

// Reads the whole stream from offset 0 in pieces of `chunk` bytes.
Bytes read_all(GzipByteSource& src, std::size_t chunk) {
  Bytes out;
  std::vector<std::byte> buf(chunk);
  std::uint64_t off = 0;
  for (;;) {
    std::size_t got = src.read_at(off, buf);
    const auto* p = reinterpret_cast<const std::uint8_t*>(buf.data());
    out.insert(out.end(), p, p + got);
    off += got;
    if (got < chunk) return out;
  }
}

Bytes read_range(GzipByteSource& src, std::uint64_t offset, std::size_t n) {
  std::vector<std::byte> buf(n);
  std::size_t got = src.read_at(offset, buf);
  const auto* p = reinterpret_cast<const std::uint8_t*>(buf.data());
  return Bytes(p, p + got);
}

Bytes slice(const Bytes& b, std::size_t offset, std::size_t n) {
  return Bytes(b.begin() + static_cast<std::ptrdiff_t>(offset),
               b.begin() + static_cast<std::ptrdiff_t>(offset + n));
}

TEST(GzipReader, SingleMemberInAnyChunkSize) {
  vptest::TempDir dir;
  const Bytes data = vptest::text_bytes(1 << 20, 1);
  const std::string path = put(dir, "a.gz", vptest::gzip_compress(data));
  for (std::size_t chunk : {std::size_t{7}, std::size_t{4096}, std::size_t{1} << 20, std::size_t{3} << 20}) {
    GzipByteSource src(path);
    EXPECT_EQ(read_all(src, chunk), data) << "chunk " << chunk;
  }
  const Bytes small = vptest::random_bytes(20000, 2);
  GzipByteSource one(put(dir, "b.gz", vptest::gzip_compress(small)));
  EXPECT_EQ(read_all(one, 1), small);
}

TEST(GzipReader, EveryZlibLevelIsReadable) {
  vptest::TempDir dir;
  const Bytes data = vptest::text_bytes(70000, 3);
  for (int level = 0; level <= 9; ++level) {
    GzipByteSource src(put(dir, "l.gz", vptest::gzip_compress(data, level)));
    EXPECT_EQ(read_all(src, 65536), data) << "level " << level;
  }
}

TEST(GzipReader, OptionalHeaderFieldsAreSkipped) {
  vptest::TempDir dir;
  const Bytes data = vptest::text_bytes(5000, 4);
  vptest::GzipHeaderFields fields{"image.nii", "a comment", Bytes{'A', 'B', 4, 0, 1, 2, 3, 4}, true};
  const Bytes gz = vptest::gzip_compress(data, 6, &fields);
  ASSERT_EQ(gz[3], 0x1e);  // FHCRC | FEXTRA | FNAME | FCOMMENT
  GzipByteSource src(put(dir, "h.gz", gz));
  EXPECT_EQ(read_all(src, 1000), data);
}

TEST(GzipReader, MultipleMembersAreConcatenated) {
  vptest::TempDir dir;
  const Bytes a = vptest::text_bytes(30000, 5), b = vptest::random_bytes(1000, 6),
              c = vptest::text_bytes(7, 7);
  const Bytes gz = vptest::concat({vptest::gzip_compress(a), vptest::gzip_compress(b, 1),
                                   vptest::gzip_compress(Bytes{}), vptest::gzip_compress(c, 9)});
  const Bytes expected = vptest::concat({a, b, c});
  for (std::size_t chunk : {std::size_t{1}, std::size_t{999}, std::size_t{100000}}) {
    GzipByteSource src(put(dir, "m.gz", gz));
    EXPECT_EQ(read_all(src, chunk), expected) << "chunk " << chunk;
  }
}

TEST(GzipReader, LargeMembersAcrossInputBuffers) {
  // Incompressible members of 1.5 MiB: member boundaries fall inside the reader's 1 MiB input
  // buffer and members span several buffers.
  vptest::TempDir dir;
  const Bytes a = vptest::random_bytes(3 << 19, 8), b = vptest::random_bytes(3 << 19, 9);
  GzipByteSource src(put(dir, "L.gz", vptest::concat({vptest::gzip_compress(a, 1), vptest::gzip_compress(b, 1)})));
  EXPECT_EQ(read_all(src, 1 << 16), vptest::concat({a, b}));
}

TEST(GzipReader, ZeroPaddingAfterMembersIsAllowed) {
  vptest::TempDir dir;
  const Bytes a = vptest::text_bytes(4000, 10), b = vptest::text_bytes(3000, 11);
  const Bytes zeros(100, 0), many_zeros(std::size_t{2} << 20, 0);
  {
    GzipByteSource src(put(dir, "p1.gz", vptest::concat({vptest::gzip_compress(a), zeros})));
    EXPECT_EQ(read_all(src, 1 << 16), a);
  }
  {
    GzipByteSource src(put(dir, "p2.gz", vptest::concat({vptest::gzip_compress(a), zeros,
                                                         vptest::gzip_compress(b), Bytes(3, 0)})));
    EXPECT_EQ(read_all(src, 1 << 16), vptest::concat({a, b}));
  }
  {
    GzipByteSource src(put(dir, "p3.gz", vptest::concat({vptest::gzip_compress(a), many_zeros})));
    EXPECT_EQ(read_all(src, 1 << 16), a);
  }
}

TEST(GzipReader, GarbageAfterAMemberIsCorrupt) {
  vptest::TempDir dir;
  const Bytes a = vptest::text_bytes(4000, 12);
  const Bytes garbage{'g', 'a', 'r', 'b', 'a', 'g', 'e'};
  for (const Bytes& tail : {garbage, vptest::concat({Bytes(10, 0), garbage}), Bytes{0x1f, 0x00, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}) {
    const std::string path = put(dir, "g.gz", vptest::concat({vptest::gzip_compress(a), tail}));
    {
      // A read that stops before the member's end does not reach the garbage.
      GzipByteSource src(path);
      EXPECT_EQ(read_range(src, 0, a.size() - 1), Bytes(a.begin(), a.end() - 1));
    }
    {
      // One that ends where the member ends runs on through its trailer and what follows it.
      GzipByteSource src(path);
      EXPECT_VP_ERROR(read_range(src, 0, a.size()), ErrorCode::corrupt);
    }
    GzipByteSource src(path);
    EXPECT_VP_ERROR(read_all(src, a.size() + 1), ErrorCode::corrupt);
  }
}

TEST(GzipReader, FlippedChecksumOrSizeIsCorrupt) {
  vptest::TempDir dir;
  const Bytes data = vptest::text_bytes(10000, 13);
  const Bytes gz = vptest::gzip_compress(data);
  for (std::size_t k = 1; k <= 8; ++k) {  // the 4 CRC32 bytes, then the 4 ISIZE bytes
    Bytes bad = gz;
    bad[bad.size() - k] ^= 0x01;
    GzipByteSource src(put(dir, "c.gz", bad));
    SCOPED_TRACE("trailer byte -" + std::to_string(k));
    EXPECT_VP_ERROR(read_all(src, data.size() + 100), ErrorCode::corrupt);
  }
}

TEST(GzipReader, DamagedDeflateDataNeverReadsAsOtherData) {
  vptest::TempDir dir;
  const Bytes data = vptest::text_bytes(3000, 14);
  const Bytes gz = vptest::gzip_compress(data);
  for (std::size_t pos = 10; pos + 8 < gz.size(); ++pos) {
    Bytes bad = gz;
    bad[pos] ^= static_cast<std::uint8_t>(1u << (pos % 8));
    GzipByteSource src(put(dir, "d.gz", bad));
    Bytes got;
    auto err = vptest::catch_error([&] { got = read_all(src, data.size() + 100); });
    if (err) {
      EXPECT_TRUE(err->code() == ErrorCode::corrupt || err->code() == ErrorCode::truncated)
          << "byte " << pos << ": " << err->what();
    } else {
      EXPECT_EQ(got, data) << "byte " << pos << " flipped, but no error and different data";
    }
  }
}

TEST(GzipReader, TruncatedAnywhereIsTruncated) {
  vptest::TempDir dir;
  const Bytes a = vptest::text_bytes(2000, 15), b = vptest::text_bytes(1500, 16);
  const Bytes first = vptest::gzip_compress(a);
  const Bytes gz = vptest::concat({first, vptest::gzip_compress(b)});
  for (std::size_t cut = 2; cut < gz.size(); ++cut) {
    if (cut == first.size()) continue;  // exactly one whole member: a valid file
    const Bytes part(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(cut));
    GzipByteSource src(put(dir, "t.gz", part));
    auto err = vptest::catch_error([&] { read_all(src, 1 << 16); });
    ASSERT_TRUE(err) << "cut at " << cut << " of " << gz.size() << " read without error";
    EXPECT_EQ(err->code(), ErrorCode::truncated) << "cut at " << cut << ": " << err->what();
  }
  GzipByteSource whole_first(put(dir, "t.gz", first));
  EXPECT_EQ(read_all(whole_first, 1 << 16), a);
}

TEST(GzipReader, NonGzipFilesAreFormatErrors) {
  vptest::TempDir dir;
  EXPECT_VP_ERROR(GzipByteSource s(put(dir, "text.gz", Bytes{'h', 'e', 'l', 'l', 'o'})), ErrorCode::format);
  EXPECT_VP_ERROR(GzipByteSource s(put(dir, "empty.gz", Bytes{})), ErrorCode::format);
  EXPECT_VP_ERROR(GzipByteSource s(put(dir, "one.gz", Bytes{0x1f})), ErrorCode::format);
  EXPECT_VP_ERROR(GzipByteSource s(put(dir, "swapped.gz", Bytes{0x8b, 0x1f, 8, 0})), ErrorCode::format);
  EXPECT_VP_ERROR(GzipByteSource s(dir.file("missing.gz")), ErrorCode::not_found);
}

TEST(GzipReader, MagicHelper) {
  EXPECT_TRUE(voxpipe::gz::has_gzip_magic(Bytes{0x1f, 0x8b}));
  EXPECT_TRUE(voxpipe::gz::has_gzip_magic(Bytes{0x1f, 0x8b, 0}));
  EXPECT_FALSE(voxpipe::gz::has_gzip_magic(Bytes{0x1f}));
  EXPECT_FALSE(voxpipe::gz::has_gzip_magic(Bytes{}));
  EXPECT_FALSE(voxpipe::gz::has_gzip_magic(Bytes{0x1f, 0x8c}));
}

TEST(GzipReader, SkipsForwardAndRestartsBackwards) {
  vptest::TempDir dir;
  const Bytes data = vptest::text_bytes(3 << 20, 17);
  GzipByteSource src(put(dir, "s.gz", vptest::gzip_compress(data, 1)));
  EXPECT_FALSE(src.random_access());
  EXPECT_EQ(src.path(), dir.file("s.gz"));
  EXPECT_EQ(read_range(src, 2000000, 1000), slice(data, 2000000, 1000));
  EXPECT_EQ(read_range(src, 10, 100), slice(data, 10, 100));          // backwards: restart
  EXPECT_EQ(read_range(src, 110, 50), slice(data, 110, 50));          // exactly where it stopped
  EXPECT_EQ(read_range(src, 3000000, 4096), slice(data, 3000000, 4096));
  std::mt19937_64 rng(18);
  for (int i = 0; i < 20; ++i) {
    const std::uint64_t off = rng() % data.size();
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(rng() % 5000, data.size() - off));
    ASSERT_EQ(read_range(src, off, n), slice(data, off, n)) << "offset " << off;
  }
}

TEST(GzipReader, ReadsEndShortOnlyAtTheEnd) {
  vptest::TempDir dir;
  const Bytes data = vptest::text_bytes(100000, 19);
  GzipByteSource src(put(dir, "e.gz", vptest::gzip_compress(data)));
  EXPECT_EQ(read_range(src, data.size() - 10, 100), slice(data, data.size() - 10, 10));
  EXPECT_EQ(read_range(src, data.size(), 10).size(), 0u);
  EXPECT_EQ(read_range(src, data.size() + 1000, 10).size(), 0u);
  EXPECT_EQ(read_range(src, 5, 10), slice(data, 5, 10));
  EXPECT_EQ(read_range(src, 0, 0).size(), 0u);
}

TEST(GzipReader, InflatesOnlyWhatTheReadNeeds) {
  vptest::TempDir dir;
  const Bytes data = vptest::random_bytes(std::size_t{6} << 20, 20);  // incompressible
  const Bytes gz = vptest::gzip_compress(data, 1);
  GzipByteSource src(put(dir, "big.gz", gz));
  EXPECT_EQ(src.compressed_consumed(), 0u);
  EXPECT_EQ(read_range(src, 0, 1000), slice(data, 0, 1000));
  EXPECT_GT(src.compressed_consumed(), 0u);
  EXPECT_LE(src.compressed_consumed(), std::uint64_t{2} << 20) << "of " << gz.size();
  EXPECT_EQ(read_range(src, 3 << 20, 1000), slice(data, 3 << 20, 1000));
  EXPECT_LE(src.compressed_consumed(), std::uint64_t{5} << 20) << "of " << gz.size();
  EXPECT_EQ(read_all(src, 1 << 20).size(), data.size());
  EXPECT_EQ(src.compressed_consumed(), gz.size());
}

}  // namespace
