// The index file's version-2 trailer (gz/index_file.cpp): a table of contents checked on its own,
// found from the end, with a CRC32 per window. Round trip; each window's checksum caught on its
// own, naming the index, the point and the offset; an index read by ranges fetches its trailer
// and then only the windows a read decodes from; a truncated or lying table of contents is a
// clear error without allocating what it claims; version-1 trailers still read.
#include <zlib.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/file.hpp"
#include "core/range_input.hpp"
#include "core/recording_fetcher.hpp"
#include "gz/seek_index.hpp"
#include "test_support.hpp"

namespace {

using namespace vptest;
using voxpipe::ByteRange;
using voxpipe::ErrorCode;
using voxpipe::FetchedBytes;
using voxpipe::RemoteInputOptions;
using voxpipe::core::InputFile;
using voxpipe::core::RangeInput;
namespace gz = voxpipe::gz;

constexpr std::size_t kHeader = 35, kPoint = 18, kWindow = 32768;

struct Sample {
  TempDir dir;
  Bytes payload;
  gz::SeekIndex index;
  gz::IndexKey key{0, 7, 0};
  Bytes bytes;  // encode_gzidx(index, key)
  std::size_t npoints = 0, nwindows = 0, windows_at = 0, toc_at = 0;
};

// 600 KiB of text and noise, gzip -6, a point every 64 KiB.
std::unique_ptr<Sample> sample() {
  auto s = std::make_unique<Sample>();
  s->payload = text_bytes(300 * 1024, 5);
  const Bytes noise = random_bytes(300 * 1024, 6);
  s->payload.insert(s->payload.end(), noise.begin(), noise.end());
  const Bytes gz_bytes = gzip_compress(s->payload, 6);
  write_file(s->dir.file("g.gz"), gz_bytes);
  s->index = gz::build_seek_index(InputFile(s->dir.file("g.gz")), 64 * 1024);
  s->key.size = gz_bytes.size();
  s->bytes = gz::encode_gzidx(s->index, s->key);
  s->npoints = s->index.points.size() + 1;  // and the end point
  for (const auto& p : s->index.points) s->nwindows += p.has_window() ? 1 : 0;
  s->windows_at = kHeader + s->npoints * kPoint;
  s->toc_at = s->windows_at + s->nwindows * kWindow;
  return s;
}

std::uint32_t le32(const Bytes& b, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::uint32_t{b[at + i]} << (8 * i);
  return v;
}
void put32(Bytes& b, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
}
std::uint32_t crc_of(const Bytes& b, std::size_t at, std::size_t n) {
  return static_cast<std::uint32_t>(crc32(0, b.data() + at, static_cast<uInt>(n)));
}
// Re-seals a trailer edited in place, so that only the edited field is wrong.
void reseal(Bytes& b, std::size_t toc_at) {
  put32(b, b.size() - 4, crc_of(b, toc_at, b.size() - 4 - toc_at));
}

// An object read by ranges over `b`, recording its requests.
struct Object {
  RecordingFetcher fetcher;
  std::shared_ptr<RangeInput> input;
  explicit Object(const Bytes& b, std::uint64_t min_request = kWindow)
      : fetcher(std::vector<std::byte>(reinterpret_cast<const std::byte*>(b.data()),
                                       reinterpret_cast<const std::byte*>(b.data()) + b.size()),
                "s3://bucket/g.gz.gzidx") {
    RemoteInputOptions o;
    o.min_request = min_request;
    input = std::make_shared<RangeInput>(fetcher.name(), fetcher.size(), fetcher.fetcher(),
                                         FetchedBytes{}, o);
  }
};

Bytes decode(const InputFile& file, const gz::SeekIndex& index, std::uint64_t begin,
             std::uint64_t end) {
  Bytes out(end - begin);
  gz::inflate_range(file, index, begin, end, 1,
                    [&](std::uint64_t offset, std::span<const std::byte> data) {
                      std::memcpy(out.data() + (offset - begin), data.data(), data.size());
                    });
  return out;
}

TEST(IndexFile, Version2TrailerLayoutAndRoundTrip) {
  const auto s = sample();
  const Bytes& b = s->bytes;
  ASSERT_GE(s->nwindows, 5u);
  // The GZIDX part is what it was (indexed_gzip and rapidgzip read it); the trailer follows.
  EXPECT_EQ(Bytes(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(s->toc_at)),
            gz::encode_gzidx(s->index));
  EXPECT_EQ(std::string(b.begin() + static_cast<std::ptrdiff_t>(s->toc_at),
                        b.begin() + static_cast<std::ptrdiff_t>(s->toc_at) + 5),
            "VPKEY");
  EXPECT_EQ(b[s->toc_at + 5], 2);
  EXPECT_EQ(le32(b, s->toc_at + 26), s->nwindows);
  for (std::size_t k = 0; k < s->nwindows; ++k)
    EXPECT_EQ(le32(b, s->toc_at + 30 + 4 * k), crc_of(b, s->windows_at + k * kWindow, kWindow));
  const std::size_t head_at = s->toc_at + 30 + 4 * s->nwindows;
  EXPECT_EQ(le32(b, head_at), s->windows_at);
  EXPECT_EQ(std::memcmp(&b[head_at + 4], b.data(), s->windows_at), 0);
  EXPECT_EQ(le32(b, b.size() - 8), b.size() - s->toc_at);
  EXPECT_EQ(le32(b, b.size() - 4), crc_of(b, s->toc_at, b.size() - 4 - s->toc_at));

  std::optional<gz::IndexKey> key;
  const gz::SeekIndex got = gz::read_gzidx(b, "m.gzidx", &key);
  EXPECT_EQ(key, s->key);
  ASSERT_EQ(got.points.size(), s->index.points.size());
  for (std::size_t i = 0; i < got.points.size(); ++i) {
    EXPECT_EQ(got.points[i].compressed_bit, s->index.points[i].compressed_bit);
    EXPECT_EQ(got.points[i].window, s->index.points[i].window);
  }
  EXPECT_EQ(gz::encode_gzidx(got, key), b);
  write_file(s->dir.file("i.gzidx"), b);
  const gz::SeekIndex lazy = gz::read_gzidx_file(s->dir.file("i.gzidx"));
  EXPECT_EQ(lazy.window_slot, kWindow);
  EXPECT_EQ(gz::encode_gzidx(lazy, key), b);
}

// A damaged window is found when it is needed, naming the index, its point and its offset; the
// other windows still decode. (The whole file is not read when an index is loaded.)
TEST(IndexFile, EachWindowIsCheckedByItsOwnCrc) {
  const auto s = sample();
  const InputFile file(s->dir.file("g.gz"));
  std::size_t k = 0;  // window number
  for (std::size_t i = 0; i < s->index.points.size(); ++i) {
    const gz::SeekPoint& p = s->index.points[i];
    if (!p.has_window()) continue;
    const std::size_t slot = s->windows_at + k++ * kWindow;
    Bytes b = s->bytes;
    b[slot + kWindow - 1] ^= 0x10;
    // In memory: the whole index is read, so the damage is found at once.
    auto err = catch_error([&] { gz::read_gzidx(b, "m.gzidx"); });
    ASSERT_TRUE(err);
    EXPECT_EQ(err->code(), ErrorCode::corrupt);
    // From a file: at the first read that starts from that point.
    write_file(s->dir.file("d.gzidx"), b);
    const gz::SeekIndex lazy = gz::read_gzidx_file(s->dir.file("d.gzidx"));
    err = catch_error([&] { decode(file, lazy, p.uncompressed, p.uncompressed + 10); });
    ASSERT_TRUE(err) << "point " << i;
    EXPECT_EQ(err->code(), ErrorCode::corrupt);
    EXPECT_NE(std::string(err->what()).find("d.gzidx"), std::string::npos) << err->what();
    EXPECT_EQ(err->field(), "window of point " + std::to_string(i));
    EXPECT_EQ(err->offset(), slot);
    // Another point's window is fine.
    const gz::SeekPoint& q = s->index.points[i == 1 ? 2 : 1];
    const Bytes got = decode(file, lazy, q.uncompressed, q.uncompressed + 1000);
    EXPECT_TRUE(std::equal(got.begin(), got.end(),
                           s->payload.begin() + static_cast<std::ptrdiff_t>(q.uncompressed)));
  }
}

// Read by ranges: the trailer (one request, from the end), then one window per read; the
// decoded bytes are the file's.
TEST(IndexFile, TableOfContentsThenOneWindowByRanges) {
  const auto s = sample();
  const InputFile file(s->dir.file("g.gz"));
  const std::size_t toc_size = s->bytes.size() - s->toc_at;
  ASSERT_LT(toc_size, 64u << 10);
  Object obj(s->bytes);
  std::optional<gz::IndexKey> key;
  const gz::SeekIndex index = gz::read_gzidx_toc(obj.input, &key);
  EXPECT_EQ(key, s->key);
  // One request, of the end (the trailer and what precedes it up to 64 KiB).
  EXPECT_EQ(obj.fetcher.ranges(),
            (std::vector<Range>{{s->bytes.size() - (64u << 10), 64u << 10}}));
  ASSERT_EQ(index.points.size(), s->index.points.size());
  // A read from the fourth point fetches its window alone.
  obj.fetcher.clear();
  const gz::SeekPoint& p = index.points[4];
  ASSERT_TRUE(p.has_window());
  const Bytes got = decode(file, index, p.uncompressed + 5, p.uncompressed + 5000);
  EXPECT_TRUE(std::equal(got.begin(), got.end(),
                         s->payload.begin() + static_cast<std::ptrdiff_t>(p.uncompressed + 5)));
  const auto w = index.window_range(p);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->size, kWindow);
  EXPECT_EQ(obj.fetcher.ranges(), (std::vector<Range>{{w->offset, kWindow}}));
  // A window the object serves damaged (another version behind the same name) is an error.
  Bytes bad = s->bytes;
  bad[w->offset + 3] ^= 1;
  Object damaged(bad);
  const gz::SeekIndex index2 = gz::read_gzidx_toc(damaged.input);
  auto err = catch_error([&] { decode(file, index2, p.uncompressed, p.uncompressed + 10); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::corrupt);
  EXPECT_NE(std::string(err->what()).find("s3://bucket/g.gz.gzidx"), std::string::npos);
  EXPECT_EQ(err->field(), "window of point 4");
  EXPECT_EQ(err->offset(), w->offset);
}

// Every prefix of the index, and every lie its trailer can tell (each re-sealed with a right
// CRC32), is an error naming the index: never an index, never an allocation of what it claims.
TEST(IndexFile, TruncatedOrLyingTableOfContentsIsAClearError) {
  const auto s = sample();
  const Bytes& good = s->bytes;
  for (std::size_t n = 0; n < good.size(); n += (n + 200 > good.size() ? 1 : 4001)) {
    Object obj(Bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)));
    auto err = catch_error([&] { gz::read_gzidx_toc(obj.input); });
    ASSERT_TRUE(err) << "prefix of " << n << " bytes accepted";
    EXPECT_NE(std::string(err->what()).find("g.gz.gzidx"), std::string::npos);
  }
  const std::size_t toc = s->toc_at, head_at = toc + 30 + 4 * s->nwindows;
  const auto expect = [&](Bytes b, ErrorCode code, const char* what) {
    Object obj(b);
    auto err = catch_error([&] { gz::read_gzidx_toc(obj.input); });
    ASSERT_TRUE(err) << what;
    EXPECT_EQ(err->code(), code) << what << ": " << err->what();
    EXPECT_TRUE(err->offset().has_value()) << what;
    // The file read whole says no less.
    EXPECT_TRUE(catch_error([&] { gz::read_gzidx(b, "x"); })) << what;
  };
  Bytes b = good;
  put32(b, b.size() - 8, 0xfffffff0u);
  reseal(b, toc);
  expect(b, ErrorCode::format, "trailer length beyond the file");
  b = good;
  b[b.size() - 1] ^= 1;
  expect(b, ErrorCode::corrupt, "trailer CRC32");
  b = good;
  b[toc + 40] ^= 1;
  expect(b, ErrorCode::corrupt, "a window CRC32 changed, trailer not re-sealed");
  b = good;
  put32(b, toc + 26, static_cast<std::uint32_t>(s->nwindows + 1));
  reseal(b, toc);
  expect(b, ErrorCode::format, "window count");
  b = good;
  put32(b, toc + 26, 0x40000000u);
  reseal(b, toc);
  expect(b, ErrorCode::format, "huge window count");
  b = good;
  put32(b, head_at, static_cast<std::uint32_t>(s->windows_at - 18));
  reseal(b, toc);
  expect(b, ErrorCode::format, "head length");
  b = good;
  put32(b, head_at + 4 + 31, 0xffffffffu);  // the copy's point count
  reseal(b, toc);
  expect(b, ErrorCode::truncated, "point count of the head's copy");
  b = good;
  b[head_at + 4 + kHeader + 8] ^= 1;  // a point's uncompressed offset, in the copy
  reseal(b, toc);
  expect(b, ErrorCode::format, "a point of the head's copy out of order");
  b = good;
  b[toc + 5] = 3;
  reseal(b, toc);
  expect(b, ErrorCode::format, "trailer version");
  // A head that differs from its checked copy: the file read whole (by ranges the copy is used).
  b = good;
  b[23] ^= 1;  // the spacing, which no other check sees
  auto err = catch_error([&] { gz::read_gzidx(b, "x"); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::corrupt);

  // An object claiming a terabyte whose footer claims a huge trailer: refused before any
  // allocation (the fetcher serves at most 1 MiB a range).
  const std::uint64_t claimed = std::uint64_t{1} << 40;
  auto fetch = [](std::span<const ByteRange> ranges) {
    std::vector<FetchedBytes> out;
    for (const ByteRange& r : ranges) {
      if (r.size > (1u << 20)) throw voxpipe::Error(ErrorCode::io, "big", "", "range too large");
      auto buf = std::make_shared<std::vector<std::byte>>(r.size, std::byte{0xff});
      out.push_back({std::span<const std::byte>(*buf), buf});
    }
    return out;
  };
  auto big = std::make_shared<RangeInput>("s3://bucket/big.gzidx", claimed, fetch, FetchedBytes{},
                                          RemoteInputOptions{});
  err = catch_error([&] { gz::read_gzidx_toc(big); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::format) << err->what();
  EXPECT_EQ(err->field(), "trailer length");

  // An index without a version-2 trailer cannot be read by ranges.
  Object plain(gz::encode_gzidx(s->index));
  EXPECT_VP_ERROR(gz::read_gzidx_toc(plain.input), ErrorCode::format);
}

// Version-1 trailers (written before version 2) read as they did: key, and the whole file's CRC.
TEST(IndexFile, Version1TrailerStillReads) {
  const auto s = sample();
  Bytes b = gz::encode_gzidx(s->index);
  const std::size_t at = b.size();
  for (char c : std::string("VPKEY")) b.push_back(static_cast<std::uint8_t>(c));
  b.push_back(1);
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<std::uint8_t>(s->key.size >> (8 * i)));
  for (int i = 0; i < 8; ++i) b.push_back(i == 0 ? 7 : 0);
  for (int i = 0; i < 4; ++i) b.push_back(0);
  b.resize(b.size() + 4);
  put32(b, b.size() - 4, crc_of(b, 0, b.size() - 4));
  ASSERT_EQ(b.size() - at, 30u);
  std::optional<gz::IndexKey> key;
  const gz::SeekIndex got = gz::read_gzidx(b, "v1.gzidx", &key);
  EXPECT_EQ(key, s->key);
  EXPECT_EQ(got.points.size(), s->index.points.size());
  EXPECT_EQ(got.window_slot, 0u);
  // Re-encoded with its key: version 2.
  EXPECT_EQ(gz::encode_gzidx(got, key), s->bytes);
  b[s->windows_at + 100] ^= 1;  // a window byte: the whole file's CRC32
  EXPECT_VP_ERROR(gz::read_gzidx(b, "v1.gzidx"), ErrorCode::corrupt);
}

}  // namespace
