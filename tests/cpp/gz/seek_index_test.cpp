// Seek index: GZIDX encoding, building on the output of every gzip producer, decoding any range
// from the nearest point (one and two threads) equal to zlib's output, the parallel builds (one
// pass, sized members' spans) equal to the sequential one byte for byte and their progress full
// only once the index is, rejection of damaged index files, and staleness of stored indexes.
#include "gz/seek_index.hpp"

#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/file.hpp"
#include "gz/member_writer.hpp"
#include "gz/members.hpp"
#include "voxpipe/gzip.hpp"
#include "test_support.hpp"

namespace {

using namespace vptest;
using voxpipe::ErrorCode;
using voxpipe::core::InputFile;
namespace gz = voxpipe::gz;

// Text with runs of incompressible bytes: dynamic, fixed and stored blocks from most producers.
Bytes mixed_payload(std::size_t n, std::uint64_t seed) {
  Bytes out = text_bytes(n / 2, seed);
  const Bytes noise = random_bytes(n / 8, seed + 1);
  out.insert(out.end(), noise.begin(), noise.end());
  const Bytes more = text_bytes(n - out.size(), seed + 2);
  out.insert(out.end(), more.begin(), more.end());
  return out;
}

// Decodes [begin, end) through the index; checks every byte arrives exactly once.
Bytes read_range(const InputFile& file, const gz::SeekIndex& index, std::uint64_t begin,
                 std::uint64_t end, unsigned threads) {
  Bytes out(end - begin);
  std::vector<std::uint8_t> seen(end - begin, 0);
  gz::inflate_range(file, index, begin, end, threads,
                    [&](std::uint64_t offset, std::span<const std::byte> data) {
                      EXPECT_GE(offset, begin);
                      EXPECT_LE(offset + data.size(), end);
                      std::memcpy(out.data() + (offset - begin), data.data(), data.size());
                      for (std::size_t i = 0; i < data.size(); ++i) ++seen[offset - begin + i];
                    });
  for (std::size_t i = 0; i < seen.size(); ++i)
    if (seen[i] != 1) {
      ADD_FAILURE() << "byte " << begin + i << " delivered " << int(seen[i]) << " times";
      break;
    }
  return out;
}

void expect_invariants(const gz::SeekIndex& index, std::uint64_t compressed_size,
                       std::uint64_t uncompressed_size) {
  EXPECT_EQ(index.compressed_size, compressed_size);
  EXPECT_EQ(index.uncompressed_size, uncompressed_size);
  ASSERT_FALSE(index.points.empty());
  EXPECT_EQ(index.points[0].uncompressed, 0u);
  EXPECT_TRUE(index.points[0].window.empty());
  for (std::size_t i = 0; i < index.points.size(); ++i) {
    const auto& p = index.points[i];
    EXPECT_LT(p.compressed_bit, compressed_size * 8);
    EXPECT_LE(p.window.size(), gz::kWindowSize);
    EXPECT_LE(p.window.size(), p.uncompressed);
    if (i > 0) {
      EXPECT_GT(p.compressed_bit, index.points[i - 1].compressed_bit) << i;
      EXPECT_GE(p.uncompressed, index.points[i - 1].uncompressed) << i;
    }
  }
}

// Random ranges, plus ranges that start and end exactly at points, equal the reference.
void expect_ranges_match(const InputFile& file, const gz::SeekIndex& index, const Bytes& ref,
                         std::uint64_t seed, int nrandom = 20) {
  std::mt19937_64 rng(seed);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges{{0, ref.size()}};
  for (int i = 0; i < nrandom; ++i) {
    const std::uint64_t a = rng() % (ref.size() + 1);
    const std::uint64_t len = (i % 4 == 0) ? rng() % (ref.size() - a + 1) : rng() % 70000;
    ranges.emplace_back(a, std::min<std::uint64_t>(ref.size(), a + len));
  }
  for (std::size_t i = 0; i < index.points.size(); i += 1 + index.points.size() / 8) {
    const std::uint64_t u = index.points[i].uncompressed;
    ranges.emplace_back(u, std::min<std::uint64_t>(ref.size(), u + 1));
    if (u > 0) ranges.emplace_back(u - 1, u);
    if (u > 0) ranges.emplace_back(0, u);
    if (i + 2 < index.points.size()) ranges.emplace_back(u, index.points[i + 2].uncompressed);
  }
  for (const auto& [a, b] : ranges)
    for (unsigned threads : {1u, 2u}) {
      const Bytes got = read_range(file, index, a, b, threads);
      ASSERT_TRUE(std::equal(got.begin(), got.end(), ref.begin() + static_cast<std::ptrdiff_t>(a)))
          << "range [" << a << ", " << b << ") threads " << threads;
    }
}

// Compresses `data` with an external producer; nullopt when the tool is not installed.
std::optional<Bytes> compress_with(const std::string& command, const Bytes& data,
                                   const TempDir& dir) {
  const std::string tool = command.substr(0, command.find(' '));
  if (::access(tool.c_str(), X_OK) != 0) return std::nullopt;
  const std::string in = dir.file("payload"), out = dir.file("payload.gz");
  write_file(in, data);
  const std::string cmd = command + " < '" + in + "' > '" + out + "'";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("failed: " + cmd);
  return read_file(out);
}

struct Producer {
  const char* name;
  const char* command;  // empty: zlib level `level` through test_support
  int level;
};

class ProducerTest : public ::testing::TestWithParam<Producer> {};

TEST_P(ProducerTest, BuiltIndexDecodesEveryRangeAsZlib) {
  const Producer& pr = GetParam();
  TempDir dir;
  const Bytes payload = mixed_payload(1536 * 1024, 7);
  Bytes gzdata;
  if (std::string(pr.command).empty()) {
    gzdata = gzip_compress(payload, pr.level);
  } else {
    auto c = compress_with(pr.command, payload, dir);
    if (!c) GTEST_SKIP() << pr.command << " is not installed";
    gzdata = *c;
  }
  ASSERT_EQ(gunzip(gzdata), payload);
  const std::string path = dir.file("x.gz");
  write_file(path, gzdata);
  InputFile file(path);
  const gz::SeekIndex index = gz::build_seek_index(file, 128 * 1024);
  expect_invariants(index, gzdata.size(), payload.size());
  // igzip -0 writes the whole payload as one block (and an empty last one): one point.
  if (std::string(pr.name) != "igzip0") {
    EXPECT_GE(index.points.size(), 4u);
  }
  expect_ranges_match(file, index, payload, 11);
  // Through the file format and back: the same reads.
  const gz::SeekIndex again = gz::read_gzidx(gz::encode_gzidx(index), "x.gzidx");
  expect_ranges_match(file, again, payload, 12, 6);
}

INSTANTIATE_TEST_SUITE_P(
    Producers, ProducerTest,
    ::testing::Values(Producer{"zlib1", "", 1}, Producer{"zlib6", "", 6}, Producer{"zlib9", "", 9},
                      Producer{"gzip1", "/usr/bin/gzip -c -1", 0},
                      Producer{"gzip6", "/usr/bin/gzip -c -6", 0},
                      Producer{"gzip9", "/usr/bin/gzip -c -9", 0},
                      Producer{"pigz", "/usr/bin/pigz -c -6 -p 2 -b 128", 0},
                      Producer{"igzip0", "/usr/bin/igzip -c -0", 0},
                      Producer{"igzip3", "/usr/bin/igzip -c -3", 0},
                      Producer{"libdeflate12", "/usr/bin/libdeflate-gzip -c -12", 0}),
    [](const ::testing::TestParamInfo<Producer>& info) { return std::string(info.param.name); });

TEST(SeekIndex, StoredBlocksFromRandomBytes) {
  TempDir dir;
  const Bytes payload = random_bytes(700 * 1024, 3);
  const Bytes gzdata = gzip_compress(payload, 6);
  write_file(dir.file("r.gz"), gzdata);
  InputFile file(dir.file("r.gz"));
  const gz::SeekIndex index = gz::build_seek_index(file, 50000);
  expect_invariants(index, gzdata.size(), payload.size());
  EXPECT_GE(index.points.size(), 8u);
  expect_ranges_match(file, index, payload, 5);
}

TEST(SeekIndex, MultiMemberHasEmptyWindowPointAtEachMemberAndDecodesAcrossThem) {
  TempDir dir;
  const Bytes a = text_bytes(300000, 1), b = random_bytes(100000, 2), c = text_bytes(250000, 3);
  const Bytes empty;
  const Bytes ga = gzip_compress(a, 6), gb = gzip_compress(b, 1), ge = gzip_compress(empty, 6),
              gc = gzip_compress(c, 9);
  const Bytes gzdata = concat({ga, gb, ge, gc});
  const Bytes payload = concat({a, b, c});
  write_file(dir.file("m.gz"), gzdata);
  InputFile file(dir.file("m.gz"));
  const gz::SeekIndex index = gz::build_seek_index(file, 64 * 1024);
  expect_invariants(index, gzdata.size(), payload.size());
  // Member starts: first block right after each 10-byte header, with an empty window.
  for (std::uint64_t member_byte : {ga.size(), ga.size() + gb.size(), ga.size() + gb.size() + ge.size()}) {
    bool found = false;
    for (const auto& p : index.points)
      if (p.compressed_bit == (member_byte + 10) * 8) {
        found = true;
        EXPECT_TRUE(p.window.empty());
      }
    EXPECT_TRUE(found) << "no point at the member starting at byte " << member_byte;
  }
  expect_ranges_match(file, index, payload, 9);
  // Exactly across the member boundaries.
  for (std::uint64_t u : {a.size(), a.size() + b.size()})
    for (unsigned threads : {1u, 2u}) {
      const Bytes got = read_range(file, index, u - 5, u + 5, threads);
      EXPECT_TRUE(std::equal(got.begin(), got.end(), payload.begin() + static_cast<long>(u - 5)));
    }
  // An index without member-start points (as rapidgzip writes) still decodes across members.
  gz::SeekIndex sparse = index;
  std::erase_if(sparse.points, [](const gz::SeekPoint& p) { return p.window.empty() && p.uncompressed > 0; });
  ASSERT_LT(sparse.points.size(), index.points.size());
  expect_ranges_match(file, sparse, payload, 10, 8);
}

// A member the decode crosses into from its header is checked: its CRC32 or ISIZE, damaged, is
// Error(corrupt) at its trailer, also when the index has no point at that member (rapidgzip's).
// A range ending where b ends runs on through b's trailer; one ending before does not reach it.
TEST(SeekIndex, CrossedMemberChecksItsTrailer) {
  TempDir dir;
  const Bytes a = text_bytes(200000, 4), b = text_bytes(150000, 5), c = text_bytes(100000, 6);
  const Bytes ga = gzip_compress(a, 6), gb = gzip_compress(b, 6), gc = gzip_compress(c, 6);
  const Bytes payload = concat({a, b, c});
  for (std::size_t field : {8u, 4u}) {  // bytes from b's member end: CRC32, then ISIZE
    Bytes bad = concat({ga, gb, gc});
    bad[ga.size() + gb.size() - field] ^= 1;
    write_file(dir.file("t.gz"), bad);
    InputFile file(dir.file("t.gz"));
    // build_seek_index checks every trailer: the points come from the intact file.
    write_file(dir.file("ok.gz"), concat({ga, gb, gc}));
    gz::SeekIndex sparse = gz::build_seek_index(InputFile(dir.file("ok.gz")), 0);
    std::erase_if(sparse.points, [](const gz::SeekPoint& p) { return p.uncompressed > 0; });
    ASSERT_EQ(sparse.points.size(), 1u);
    for (unsigned threads : {1u, 2u}) {
      auto err = catch_error([&] { read_range(file, sparse, a.size() - 10, payload.size(), threads); });
      ASSERT_TRUE(err.has_value()) << "field " << field << ", threads " << threads;
      EXPECT_EQ(err->code(), ErrorCode::corrupt) << err->what();
      EXPECT_EQ(err->field(), "gzip trailer");
      // At the field that does not match: the CRC32, or ISIZE 4 bytes after it.
      EXPECT_EQ(err->offset(), std::optional<std::uint64_t>(ga.size() + gb.size() - field));
    }
    for (unsigned threads : {1u, 2u}) {
      EXPECT_VP_ERROR(read_range(file, sparse, 0, a.size() + b.size(), threads), ErrorCode::corrupt);
      // Short of b's last byte: its trailer is not reached.
      const Bytes got = read_range(file, sparse, 0, a.size() + b.size() - 1, threads);
      EXPECT_TRUE(std::equal(got.begin(), got.end(), payload.begin()));
    }
  }
}

TEST(SeekIndex, ZeroPaddingBetweenMembersIsSkipped) {
  TempDir dir;
  const Bytes a = text_bytes(50000, 1), b = text_bytes(60000, 2);
  const Bytes zeros(100, 0);
  const Bytes gzdata = concat({gzip_compress(a), zeros, gzip_compress(b), zeros});
  write_file(dir.file("p.gz"), gzdata);
  InputFile file(dir.file("p.gz"));
  const gz::SeekIndex index = gz::build_seek_index(file, 10000);
  const Bytes payload = concat({a, b});
  expect_invariants(index, gzdata.size(), payload.size());
  expect_ranges_match(file, index, payload, 4, 8);
}

TEST(SeekIndex, TinyFiles) {
  TempDir dir;
  for (std::size_t n : {0, 1, 2, 100, 40000}) {
    const Bytes payload = text_bytes(n, n);
    const Bytes gzdata = gzip_compress(payload, 6);
    write_file(dir.file("t.gz"), gzdata);
    InputFile file(dir.file("t.gz"));
    const gz::SeekIndex index = gz::build_seek_index(file, 1);
    EXPECT_EQ(index.uncompressed_size, n);
    EXPECT_EQ(index.points.empty(), n == 0);
    const gz::SeekIndex again = gz::read_gzidx(gz::encode_gzidx(index), "t.gzidx");
    EXPECT_EQ(again.uncompressed_size, n);
    if (n > 0) {
      expect_invariants(again, gzdata.size(), n);
      EXPECT_EQ(read_range(file, again, 0, n, 2), payload);
      EXPECT_EQ(read_range(file, again, n - 1, n, 1), Bytes(payload.end() - 1, payload.end()));
    }
    EXPECT_TRUE(read_range(file, index, n, n, 1).empty());
  }
}

// A point at the last block start at or before each wanted offset: no block starts between it
// and the offset (checked against an index with a point at every block start).
TEST(SeekIndex, WantedOffsetsGetTheLastBlockStartAtOrBeforeThem) {
  TempDir dir;
  const Bytes payload = mixed_payload(1200 * 1024, 21);
  const Bytes gzdata = gzip_compress(payload, 6);
  write_file(dir.file("w.gz"), gzdata);
  InputFile file(dir.file("w.gz"));
  const gz::SeekIndex every = gz::build_seek_index(file, 1);
  ASSERT_GE(every.points.size(), 10u);
  std::vector<std::uint64_t> wanted;
  for (std::uint64_t w = 352; w < payload.size(); w += 110592) wanted.push_back(w);
  wanted.push_back(every.points[5].uncompressed);  // exactly at a block start
  std::sort(wanted.begin(), wanted.end());
  wanted.push_back(payload.size() + 10);  // past the end: ignored
  const gz::SeekIndex index = gz::build_seek_index(file, 0, wanted);
  expect_invariants(index, gzdata.size(), payload.size());
  const auto last_at_or_before = [](const gz::SeekIndex& idx, std::uint64_t w) {
    const gz::SeekPoint* best = nullptr;
    for (const auto& p : idx.points)
      if (p.uncompressed <= w) best = &p;
    return best;
  };
  for (std::uint64_t w : wanted) {
    if (w >= payload.size()) continue;
    const gz::SeekPoint* mine = last_at_or_before(index, w);
    const gz::SeekPoint* truth = last_at_or_before(every, w);
    ASSERT_TRUE(mine && truth);
    EXPECT_EQ(mine->compressed_bit, truth->compressed_bit) << "wanted " << w;
    EXPECT_EQ(mine->uncompressed, truth->uncompressed) << "wanted " << w;
    EXPECT_EQ(mine->window, truth->window) << "wanted " << w;
  }
  // No spacing points: at most one per wanted offset, plus the first.
  EXPECT_LE(index.points.size(), wanted.size() + 1);
  expect_ranges_match(file, index, payload, 22, 8);
}

TEST(SeekIndex, BuildRejectsBadChecksumTruncationAndNonGzip) {
  TempDir dir;
  const Bytes payload = text_bytes(100000, 5);
  Bytes gzdata = gzip_compress(payload, 6);
  const std::string path = dir.file("c.gz");
  Bytes bad = gzdata;
  bad[bad.size() - 6] ^= 1;  // CRC32
  write_file(path, bad);
  EXPECT_VP_ERROR(gz::build_seek_index(InputFile(path), 1 << 20), ErrorCode::corrupt);
  bad = gzdata;
  bad[bad.size() - 2] ^= 1;  // ISIZE
  write_file(path, bad);
  EXPECT_VP_ERROR(gz::build_seek_index(InputFile(path), 1 << 20), ErrorCode::corrupt);
  write_file(path, std::span(gzdata).first(gzdata.size() / 2));
  EXPECT_VP_ERROR(gz::build_seek_index(InputFile(path), 1 << 20), ErrorCode::truncated);
  write_file(path, concat({gzdata, Bytes{'x', 'y'}}));
  EXPECT_VP_ERROR(gz::build_seek_index(InputFile(path), 1 << 20), ErrorCode::corrupt);
  write_file(path, payload);
  EXPECT_VP_ERROR(gz::build_seek_index(InputFile(path), 1 << 20), ErrorCode::format);
  write_file(path, Bytes{});
  EXPECT_VP_ERROR(gz::build_seek_index(InputFile(path), 1 << 20), ErrorCode::format);
  write_file(path, gzdata);
  const std::vector<std::uint64_t> unsorted{5, 3};
  EXPECT_VP_ERROR(gz::build_seek_index(InputFile(path), 0, unsorted), ErrorCode::invalid_argument);
}

TEST(SeekIndex, InflateRangeRejectsWrongFileAndRangeAndReportsBadData) {
  TempDir dir;
  const Bytes payload = text_bytes(300000, 8);
  const Bytes gzdata = gzip_compress(payload, 6);
  const std::string path = dir.file("d.gz");
  write_file(path, gzdata);
  const gz::SeekIndex index = gz::build_seek_index(InputFile(path), 32768);
  auto ignore = [](std::uint64_t, std::span<const std::byte>) {};
  EXPECT_VP_ERROR(gz::inflate_range(InputFile(path), index, 10, payload.size() + 1, 1, ignore),
                  ErrorCode::invalid_argument);
  EXPECT_VP_ERROR(gz::inflate_range(InputFile(path), index, 10, 5, 1, ignore),
                  ErrorCode::invalid_argument);
  // A file of another size.
  write_file(path, concat({gzdata, Bytes(4, 0)}));
  EXPECT_VP_ERROR(gz::inflate_range(InputFile(path), index, 0, 10, 1, ignore),
                  ErrorCode::invalid_argument);
  // Garbage in the deflate data after a point: an error naming the file, never a crash.
  // (Garbage bytes inside a block may well decode; a reserved block type (BTYPE 11, the two
  // bits after BFINAL) at the point never does.)
  Bytes bad = gzdata;
  for (std::uint64_t bit : {index.points[1].compressed_bit + 1, index.points[1].compressed_bit + 2})
    bad[bit / 8] |= static_cast<std::uint8_t>(1u << (bit % 8));
  write_file(path, bad);
  auto err = catch_error([&] {
    gz::inflate_range(InputFile(path), index, index.points[1].uncompressed, payload.size(), 2,
                      ignore);
  });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->code(), ErrorCode::corrupt) << err->what();
  EXPECT_EQ(err->path(), path);
  EXPECT_TRUE(err->offset().has_value());
}

TEST(SeekIndex, SinkExceptionStopsTheDecodeAndReachesTheCaller) {
  TempDir dir;
  const Bytes payload = text_bytes(600000, 9);
  write_file(dir.file("s.gz"), gzip_compress(payload, 6));
  InputFile file(dir.file("s.gz"));
  const gz::SeekIndex index = gz::build_seek_index(file, 65536);
  for (unsigned threads : {1u, 2u})
    EXPECT_THROW(gz::inflate_range(file, index, 0, payload.size(), threads,
                                   [](std::uint64_t, std::span<const std::byte>) {
                                     throw std::runtime_error("stop");
                                   }),
                 std::runtime_error);
}

// --- GZIDX ------------------------------------------------------------------------------------

gz::SeekIndex sample_index(TempDir& dir, Bytes* payload_out = nullptr) {
  const Bytes payload = mixed_payload(400 * 1024, 31);
  write_file(dir.file("g.gz"), gzip_compress(payload, 6));
  if (payload_out) *payload_out = payload;
  return gz::build_seek_index(InputFile(dir.file("g.gz")), 40000);
}

void put_u64(Bytes& b, std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
}
void put_u32(Bytes& b, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
}

TEST(Gzidx, EncodeReadRoundTripWithAndWithoutKey) {
  TempDir dir;
  const gz::SeekIndex index = sample_index(dir);
  ASSERT_GE(index.points.size(), 5u);
  for (bool with_key : {false, true}) {
    const std::optional<gz::IndexKey> key =
        with_key ? std::optional(gz::IndexKey{123, -456789, 0xdeadbeef}) : std::nullopt;
    const Bytes bytes = gz::encode_gzidx(index, key);
    std::optional<gz::IndexKey> got_key;
    const gz::SeekIndex got = gz::read_gzidx(bytes, "r.gzidx", &got_key);
    EXPECT_EQ(got_key, key);
    EXPECT_EQ(got.compressed_size, index.compressed_size);
    EXPECT_EQ(got.uncompressed_size, index.uncompressed_size);
    EXPECT_EQ(got.spacing, index.spacing);
    ASSERT_EQ(got.points.size(), index.points.size());
    for (std::size_t i = 0; i < got.points.size(); ++i) {
      EXPECT_EQ(got.points[i].compressed_bit, index.points[i].compressed_bit);
      EXPECT_EQ(got.points[i].uncompressed, index.points[i].uncompressed);
      EXPECT_EQ(got.points[i].window, index.points[i].window);
    }
    // Written to a file and read back: the same bytes.
    gz::write_gzidx_file(dir.file("r.gzidx"), index, key);
    EXPECT_EQ(read_file(dir.file("r.gzidx")), bytes);
    // Read from the file, the windows stay there until asked for: the same bytes, and the
    // index encodes to the same file.
    const gz::SeekIndex lazy = gz::read_gzidx_file(dir.file("r.gzidx"));
    ASSERT_EQ(lazy.points.size(), index.points.size());
    std::vector<std::uint8_t> scratch;
    for (std::size_t i = 0; i < lazy.points.size(); ++i) {
      const gz::SeekPoint& p = lazy.points[i];
      EXPECT_TRUE(p.window.empty());
      EXPECT_EQ(p.has_window(), !index.points[i].window.empty());
      const std::span<const std::uint8_t> w = lazy.window_of(p, scratch);
      EXPECT_EQ(Bytes(w.begin(), w.end()), index.points[i].window) << i;
    }
    EXPECT_EQ(gz::encode_gzidx(lazy, key), bytes);
  }
}

// A file-read index decodes as the built one, and an index file cut short after it was read
// is an error when a window is needed, not a wrong window.
TEST(Gzidx, WindowsReadFromTheIndexFileWhenNeeded) {
  TempDir dir;
  Bytes payload;
  const gz::SeekIndex index = sample_index(dir, &payload);
  const InputFile file(dir.file("g.gz"));
  gz::write_gzidx_file(dir.file("w.gzidx"), index);
  const gz::SeekIndex lazy = gz::read_gzidx_file(dir.file("w.gzidx"));
  ASSERT_TRUE(lazy.window_file);
  ASSERT_GE(lazy.points.size(), 5u);
  const std::uint64_t n = index.uncompressed_size;
  for (unsigned threads : {1u, 2u}) {
    const Bytes got = read_range(file, lazy, n / 3, n, threads);
    EXPECT_TRUE(got == Bytes(payload.begin() + static_cast<std::ptrdiff_t>(n / 3), payload.end()))
        << threads;
  }
  ASSERT_EQ(::truncate(dir.file("w.gzidx").c_str(), 100), 0);
  EXPECT_VP_ERROR(read_range(file, lazy, n - 1, n, 1), ErrorCode::io);
}

// The layout of what is written: version 1, 32 KiB windows, the bit convention of zran.c
// (offset = ceil(bit / 8), bits = bits of the byte before it), and an end point.
TEST(Gzidx, WritesVersion1WithZranBitConventionAndEndPoint) {
  gz::SeekIndex index;
  index.compressed_size = 1000;
  index.uncompressed_size = 5000;
  index.spacing = 777;
  index.points.push_back({80, 0, {}});
  index.points.push_back({8 * 300 + 3, 2000, Bytes(100, 7)});
  const Bytes b = gz::encode_gzidx(index);
  ASSERT_EQ(b.size(), 35u + 3 * 18 + 32768);
  EXPECT_EQ(std::string(b.begin(), b.begin() + 5), "GZIDX");
  EXPECT_EQ(b[5], 1);
  EXPECT_EQ(b[27] | b[28] << 8 | b[29] << 16, 32768);
  EXPECT_EQ(b[31], 3);
  const std::size_t p1 = 35 + 18;
  EXPECT_EQ(b[p1], 301 % 256);
  EXPECT_EQ(b[p1 + 1], 301 / 256);
  EXPECT_EQ(b[p1 + 16], 5);  // 8 - 3 bits of byte 300 belong to the block
  EXPECT_EQ(b[p1 + 17], 1);
  EXPECT_EQ(b[35 + 17], 0);        // first point: no window
  EXPECT_EQ(b[35 + 2 * 18], 1000 % 256);  // end point at the compressed size
  EXPECT_EQ(b[35 + 2 * 18 + 17], 0);
  const std::size_t w = 35 + 3 * 18;
  EXPECT_EQ(b[w], 0);  // zero padding before a short window
  EXPECT_EQ(b[w + 32767], 7);
}

TEST(Gzidx, ReadsVersion0WithWindowsForAllButTheFirstPoint) {
  Bytes b(35);
  std::memcpy(b.data(), "GZIDX", 5);
  b[5] = 0;
  put_u64(b, 7, 1000);
  put_u64(b, 15, 50000);
  put_u32(b, 23, 4096);
  put_u32(b, 27, 32768);
  put_u32(b, 31, 2);
  Bytes p(17 * 2, 0);
  put_u64(p, 0, 10);
  put_u64(p, 17, 400);
  put_u64(p, 17 + 8, 40000);
  p[17 + 16] = 6;
  b = concat({b, p});
  Bytes window(32768);
  for (std::size_t i = 0; i < window.size(); ++i) window[i] = static_cast<std::uint8_t>(i);
  b = concat({b, window});
  const gz::SeekIndex index = gz::read_gzidx(b, "v0.gzidx");
  ASSERT_EQ(index.points.size(), 2u);
  EXPECT_EQ(index.points[0].compressed_bit, 80u);
  EXPECT_TRUE(index.points[0].window.empty());
  EXPECT_EQ(index.points[1].compressed_bit, 400u * 8 - 6);
  EXPECT_EQ(index.points[1].window, window);
  // A window before only 1000 bytes of output keeps just those.
  put_u64(b, 35 + 17 + 8, 1000);
  EXPECT_EQ(gz::read_gzidx(b, "v0.gzidx").points[1].window,
            Bytes(window.end() - 1000, window.end()));
}

TEST(Gzidx, DamagedFilesGiveClearErrors) {
  TempDir dir;
  const gz::SeekIndex index = sample_index(dir);
  const Bytes good = gz::encode_gzidx(index, gz::IndexKey{1, 2, 3});
  const std::size_t pts = 35, npoints = index.points.size() + 1;
  // Every truncation.
  for (std::size_t n = 0; n < good.size(); n += (n < 200 ? 1 : 997)) {
    auto err = catch_error([&] { gz::read_gzidx(std::span(good).first(n), "t.gzidx"); });
    ASSERT_TRUE(err) << "prefix of " << n << " bytes accepted";
    EXPECT_TRUE(err->code() == ErrorCode::truncated || err->code() == ErrorCode::format)
        << err->what();
  }
  const auto expect = [&](Bytes b, ErrorCode code, const char* what) {
    auto err = catch_error([&] { gz::read_gzidx(b, "x.gzidx"); });
    ASSERT_TRUE(err) << what;
    EXPECT_EQ(err->code(), code) << what << ": " << err->what();
    EXPECT_NE(std::string(err->what()).find("x.gzidx"), std::string::npos);
    EXPECT_TRUE(err->offset().has_value()) << what;
  };
  Bytes b = good;
  b[0] = 'X';
  expect(b, ErrorCode::format, "magic");
  b = good;
  b[5] = 2;
  expect(b, ErrorCode::format, "version");
  b = good;
  put_u32(b, 27, 1024);
  expect(b, ErrorCode::format, "window size");
  b = good;
  put_u32(b, 31, 0xffffffffu);  // npoints huge: checked against the file size first
  expect(b, ErrorCode::truncated, "npoints");
  b = good;
  put_u64(b, pts + 2 * 18 + 8, index.points[1].uncompressed - 1);  // before point 1
  expect(b, ErrorCode::format, "uncompressed order");
  b = good;
  put_u64(b, pts + 2 * 18, index.points[1].compressed_bit / 8);  // compressed before point 1
  b[pts + 2 * 18 + 16] = 7;
  expect(b, ErrorCode::format, "compressed order");
  b = good;
  put_u64(b, pts + 18, index.compressed_size + 1);
  expect(b, ErrorCode::format, "compressed offset beyond the file");
  b = good;
  put_u64(b, pts + 18 + 8, index.uncompressed_size + 1);
  expect(b, ErrorCode::format, "uncompressed offset beyond the data");
  b = good;
  b[pts + 18 + 16] = 8;
  expect(b, ErrorCode::format, "bits");
  b = good;
  put_u64(b, pts + 8, 5);
  expect(b, ErrorCode::format, "first point not at 0");
  b = good;
  b[pts + npoints * 18 + 100] ^= 1;  // a window byte: caught by the trailer CRC
  expect(b, ErrorCode::corrupt, "window damaged");
  b = good;
  b.push_back(0);
  expect(b, ErrorCode::format, "trailing byte");
  b = gz::encode_gzidx(index);
  b.insert(b.end(), {1, 2, 3});
  expect(b, ErrorCode::format, "trailing garbage without a key");
}

TEST(Gzidx, EncodeRejectsIndexesThatBreakTheInvariants) {
  gz::SeekIndex index;
  index.compressed_size = 100;
  index.uncompressed_size = 1000;
  index.points.push_back({80, 0, {}});
  index.points.push_back({200, 500, Bytes(600, 1)});  // window longer than the output before it
  EXPECT_VP_ERROR(gz::encode_gzidx(index), ErrorCode::invalid_argument);
  index.points[1] = {60, 500, {}};  // compressed order
  EXPECT_VP_ERROR(gz::encode_gzidx(index), ErrorCode::invalid_argument);
  index.points[1] = {800, 500, {}};  // at the end of the compressed data
  EXPECT_VP_ERROR(gz::encode_gzidx(index), ErrorCode::invalid_argument);
}

// --- Locations and staleness ------------------------------------------------------------------

using vptest::ScopedEnv;

void set_mtime(const std::string& path, long sec, long usec) {
  struct timeval tv[2] = {{sec, usec}, {sec, usec}};
  ASSERT_EQ(::utimes(path.c_str(), tv), 0);
}

TEST(IndexStore, SidecarIsFoundUntilTheFileChanges) {
  TempDir dir;
  ScopedEnv cache("VOXPIPE_CACHE_DIR", dir.file("cache"));
  Bytes payload;
  const gz::SeekIndex index = sample_index(dir, &payload);
  const std::string gzp = dir.file("g.gz");
  set_mtime(gzp, 1700000000, 250000);
  EXPECT_FALSE(gz::find_index(gzp));
  gz::save_index(gzp, index, /*sidecar=*/true);
  EXPECT_EQ(gz::sidecar_path(gzp), gzp + ".gzidx");
  ASSERT_TRUE(fs::exists(gzp + ".gzidx"));
  auto found = gz::find_index(gzp);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->points.size(), index.points.size());
  expect_ranges_match(InputFile(gzp), *found, payload, 3, 4);

  // Touched: stale.
  set_mtime(gzp, 1700000001, 250000);
  EXPECT_FALSE(gz::find_index(gzp));
  EXPECT_VP_ERROR(gz::load_index(gzp, gzp + ".gzidx"), ErrorCode::invalid_argument);
  set_mtime(gzp, 1700000000, 250000);
  EXPECT_TRUE(gz::find_index(gzp));

  // Same size and mtime, different tail: stale.
  Bytes data = read_file(gzp);
  data[data.size() - 9] ^= 0x40;
  write_file(gzp, data);
  set_mtime(gzp, 1700000000, 250000);
  EXPECT_FALSE(gz::find_index(gzp));
  data[data.size() - 9] ^= 0x40;
  write_file(gzp, data);
  set_mtime(gzp, 1700000000, 250000);
  EXPECT_TRUE(gz::find_index(gzp));

  // A sidecar whose table of contents (its trailer) is damaged is skipped, not returned and
  // not thrown.
  const Bytes good = read_file(gzp + ".gzidx");
  Bytes idx = good;
  idx[idx.size() - 10] ^= 1;
  write_file(gzp + ".gzidx", idx);
  EXPECT_FALSE(gz::find_index(gzp));
  // A damaged window is found when a read starts from its point (the windows are not all read
  // when an index is loaded): an error naming the sidecar, never the wrong bytes.
  idx = good;
  idx[35 + 18 * (index.points.size() + 1) + 100] ^= 1;  // the first window
  write_file(gzp + ".gzidx", idx);
  const auto lazy = gz::find_index(gzp);
  ASSERT_TRUE(lazy);
  const auto with_window = std::find_if(lazy->points.begin(), lazy->points.end(),
                                        [](const gz::SeekPoint& p) { return p.has_window(); });
  ASSERT_NE(with_window, lazy->points.end());
  const auto err = catch_error([&] {
    read_range(InputFile(gzp), *lazy, with_window->uncompressed, with_window->uncompressed + 1, 1);
  });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::corrupt);
  EXPECT_NE(std::string(err->what()).find(gzp + ".gzidx"), std::string::npos);
}

TEST(IndexStore, CacheDirectoryFromTheEnvironment) {
  TempDir dir;
  Bytes payload;
  const gz::SeekIndex index = sample_index(dir, &payload);
  const std::string gzp = dir.file("g.gz");
  {
    ScopedEnv cache("VOXPIPE_CACHE_DIR", dir.file("c1"));
    const std::string p = gz::cache_path(gzp);
    EXPECT_EQ(p.rfind(dir.file("c1") + "/g.gz-", 0), 0u) << p;
    EXPECT_EQ(p.substr(p.size() - 6), ".gzidx");
    EXPECT_EQ(gz::cache_path(dir.path() + "/./g.gz"), p);  // same file, same entry
    EXPECT_NE(gz::cache_path(dir.file("h.gz")), p);
    gz::save_index(gzp, index, /*sidecar=*/false);
    EXPECT_TRUE(fs::exists(p));
    EXPECT_FALSE(fs::exists(gz::sidecar_path(gzp)));
    ASSERT_TRUE(gz::find_index(gzp));
    ::unlink(p.c_str());
    EXPECT_FALSE(gz::find_index(gzp));
  }
  {
    ScopedEnv unset_vp("VOXPIPE_CACHE_DIR", "");
    ScopedEnv xdg("XDG_CACHE_HOME", dir.file("xdg"));
    EXPECT_EQ(gz::cache_path(gzp).rfind(dir.file("xdg") + "/voxpipe/g.gz-", 0), 0u);
    ScopedEnv no_xdg("XDG_CACHE_HOME", "");
    ScopedEnv home("HOME", dir.file("home"));
    EXPECT_EQ(gz::cache_path(gzp).rfind(dir.file("home") + "/.cache/voxpipe/g.gz-", 0), 0u);
  }
}

TEST(IndexStore, IndexWithoutTrailerIsOnlyUsedWhenNamed) {
  TempDir dir;
  ScopedEnv cache("VOXPIPE_CACHE_DIR", dir.file("cache"));
  Bytes payload;
  const gz::SeekIndex index = sample_index(dir, &payload);
  const std::string gzp = dir.file("g.gz");
  gz::write_gzidx_file(gz::sidecar_path(gzp), index);  // as indexed_gzip would write it
  EXPECT_FALSE(gz::find_index(gzp));
  const gz::SeekIndex named = gz::load_index(gzp, gz::sidecar_path(gzp));
  expect_ranges_match(InputFile(gzp), named, payload, 8, 4);
  // Named, but for a file of another size.
  write_file(dir.file("other.gz"), gzip_compress(text_bytes(1000, 1)));
  EXPECT_VP_ERROR(gz::load_index(dir.file("other.gz"), gz::sidecar_path(gzp)),
                  ErrorCode::invalid_argument);
  EXPECT_VP_ERROR(gz::save_index(dir.file("other.gz"), index, true), ErrorCode::invalid_argument);
  EXPECT_VP_ERROR(gz::find_index(dir.file("missing.gz")), ErrorCode::not_found);
}

}  // namespace

namespace {

// An index with no points (an empty file) reads back from memory and from a file: a regression
// input of fuzz_gzidx, where the empty point table reached memcpy with a null pointer.
TEST(Gzidx, AnIndexWithoutPointsReadsBack) {
  TempDir dir;
  write_file(dir.file("e.gz"), gzip_compress(Bytes{}, 6));
  const gz::SeekIndex index = gz::build_seek_index(InputFile(dir.file("e.gz")), 1024);
  ASSERT_TRUE(index.points.empty());
  ASSERT_EQ(index.uncompressed_size, 0u);
  // Without even the end point: a header that promises no points at all.
  Bytes bytes = gz::encode_gzidx(index);
  bytes.resize(35);
  for (int i = 31; i < 35; ++i) bytes[static_cast<std::size_t>(i)] = 0;
  EXPECT_TRUE(gz::read_gzidx(bytes, "none.gzidx").points.empty());
  write_file(dir.file("none.gzidx"), bytes);
  EXPECT_TRUE(gz::read_gzidx_file(dir.file("none.gzidx")).points.empty());
}

// GzipIndexOptions::progress: the furthest compressed byte read (the file is small enough for the
// sequential exact build), rising to the file size, for both builders; the index is the one
// built without it.
TEST(BuildGzipIndex, ProgressRisesToTheFileSize) {
  TempDir dir;
  const Bytes gzdata = gzip_compress(mixed_payload(6u << 20, 7), 6);
  const std::string path = dir.file("p.gz");
  write_file(path, gzdata);
  for (const bool exact : {true, false}) {
    voxpipe::GzipIndexOptions options;
    options.exact = exact;
    options.threads = 2;
    options.spacing = 1u << 20;
    options.output = dir.file("plain.gzidx");
    const auto plain = voxpipe::build_gzip_index(path, options);
    std::vector<std::uint64_t> seen;
    options.output = dir.file("reported.gzidx");
    options.progress = [&](std::uint64_t done, std::uint64_t total) {
      EXPECT_EQ(total, gzdata.size());
      EXPECT_TRUE(seen.empty() || done > seen.back()) << done;
      seen.push_back(done);
    };
    const auto reported = voxpipe::build_gzip_index(path, options);
    // The exact builder reads in slices: a bar that moves (the parallel one may take a file
    // smaller than its chunk at once).
    ASSERT_GE(seen.size(), exact ? 2u : 1u) << exact;
    EXPECT_EQ(seen.back(), gzdata.size()) << exact;
    EXPECT_EQ(reported.points, plain.points) << exact;
    EXPECT_EQ(read_file(dir.file("reported.gzidx")), read_file(dir.file("plain.gzidx"))) << exact;
  }
}

// --- The parallel exact build -----------------------------------------------------------------

// The files of each producer, small enough for the TSan stage: 16 KiB chunks, so that a few
// hundred KiB of compressed data make tens of chunks.
constexpr std::size_t kSmallChunk = 16 * 1024;

// Under ThreadSanitizer (the tsan stage runs this file) every producer still runs, on fewer
// rules and thread counts: the same threaded code, a tenth of the time.
#if defined(__SANITIZE_THREAD__)
constexpr bool kTsan = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kTsan = true;
#else
constexpr bool kTsan = false;
#endif
#else
constexpr bool kTsan = false;
#endif

// The reference every build must equal byte for byte: zlib's inflate front to back (Z_BLOCK), as
// zran.c builds an index. The one-thread build (our decoder) is compared with it like the others.
gz::SeekIndex zlib_index(const voxpipe::core::RandomAccessInput& file, std::uint64_t spacing,
                         std::span<const std::uint64_t> wanted = {}) {
  gz::ExactBuildOptions options;
  options.zlib_reference = true;
  return gz::build_seek_index(file, spacing, wanted, options);
}

std::string write_voxpipe_members(const TempDir& dir, const Bytes& data,
                                  voxpipe::GzipLayout layout) {
  const std::string path = dir.file(layout == voxpipe::GzipLayout::bgzf ? "vp.bgz" : "vp.gz");
  voxpipe::core::AtomicOutputFile out(path);
  gz::MemberWriter w(out, 6, layout, 2);
  w.write(as_bytes(data));
  w.finish();
  out.commit();
  return path;
}

// The compressed bytes of `name`'s producer for `payload`; nullopt when the tool is missing.
std::optional<Bytes> produce(const std::string& name, const Bytes& payload, const TempDir& dir) {
  if (name == "zlib1") return gzip_compress(payload, 1);
  if (name == "zlib6") return gzip_compress(payload, 6);
  if (name == "gzip1") return compress_with("/usr/bin/gzip -c -1", payload, dir);
  if (name == "gzip6") return compress_with("/usr/bin/gzip -c -6", payload, dir);
  if (name == "pigz") return compress_with("/usr/bin/pigz -c -6 -p 2 -b 128", payload, dir);
  if (name == "igzip1") return compress_with("/usr/bin/igzip -c -1", payload, dir);
  if (name == "igzip3") return compress_with("/usr/bin/igzip -c -3", payload, dir);
  if (name == "libdeflate9") return compress_with("/usr/bin/libdeflate-gzip -c -9", payload, dir);
  if (name == "multimember") {
    // Members of every size, an empty one, zero padding between two and after the last.
    const std::size_t a = payload.size() / 2, b = a + payload.size() / 3;
    const auto part = [&](std::size_t from, std::size_t to) {
      return Bytes(payload.begin() + static_cast<std::ptrdiff_t>(from),
                   payload.begin() + static_cast<std::ptrdiff_t>(to));
    };
    return concat({gzip_compress(part(0, a), 6), gzip_compress(Bytes{}, 6), Bytes(7, 0),
                   gzip_compress(part(a, b), 1), gzip_compress(part(b, payload.size()), 9),
                   Bytes(3, 0)});
  }
  if (name == "voxpipe" || name == "bgzf")
    return read_file(write_voxpipe_members(
        dir, payload, name == "bgzf" ? voxpipe::GzipLayout::bgzf : voxpipe::GzipLayout::members));
  throw std::runtime_error("unknown producer " + name);
}

class ParallelBuildTest : public ::testing::TestWithParam<const char*> {};

// Every point rule (spacing, wanted offsets, a point at every block), 2 and 4 threads: the GZIDX
// bytes of the sequential build, and the build really ran in parallel, with chunks decoded
// ahead and accepted (the one-pass build) or, for sized members, in spans from the member
// headers, every span kept and none kept (windows decoded again).
TEST_P(ParallelBuildTest, SameBytesAsTheSequentialBuild) {
  const std::string name = GetParam();
  TempDir dir;
  // 2.25 MiB for voxpipe's layout: three members (1 MiB each but the last), its spans (found
  // from the members' headers).
  const Bytes payload = mixed_payload(name == "voxpipe" ? 2304 * 1024 : 768 * 1024, 41);
  const std::optional<Bytes> gzdata = produce(name, payload, dir);
  if (!gzdata) GTEST_SKIP() << name << " is not installed";
  if (name != "multimember") {  // zlib's gunzip here takes no padding between members
    ASSERT_EQ(gunzip(*gzdata), payload);
  }
  const std::string path = dir.file("x.gz");
  write_file(path, *gzdata);
  const InputFile file(path);
  const bool sized = name == "voxpipe" || name == "bgzf";
  std::vector<std::uint64_t> wanted;
  for (std::uint64_t w = 348; w < payload.size(); w += 90001) wanted.push_back(w);
  struct Rule {
    std::uint64_t spacing;
    std::span<const std::uint64_t> wanted;
  };
  const Rule rules[] = {{64 * 1024, {}}, {0, wanted}, {100000, wanted}, {1, {}}};
  for (std::size_t r = 0; r < std::size(rules); ++r) {
    if (kTsan && r != 0 && r != 2) continue;
    const gz::SeekIndex seq = zlib_index(file, rules[r].spacing, rules[r].wanted);
    expect_invariants(seq, gzdata->size(), payload.size());
    const Bytes want = gz::encode_gzidx(seq);
    for (unsigned threads : {1u, 2u, 4u}) {
      if (kTsan && threads != 2) continue;
      for (std::uint64_t budget : {std::uint64_t{0}, std::uint64_t{1}}) {
        // The budget is the sized members' spans' only: a few are enough.
        if (budget == 1 && (!sized || threads != 2 || r == 3)) continue;
        gz::ExactBuildOptions::Stats stats;
        gz::ExactBuildOptions options;
        options.threads = threads;
        options.chunk_size = kSmallChunk;
        options.keep_budget = budget;
        options.stats = &stats;
        const gz::SeekIndex par =
            gz::build_seek_index(file, rules[r].spacing, rules[r].wanted, options);
        const std::string what = name + " rule " + std::to_string(r) + " threads " +
                                 std::to_string(threads) + " budget " + std::to_string(budget);
        EXPECT_EQ(stats.parallel, threads > 1) << what;
        EXPECT_FALSE(stats.zlib_fallback) << what;
        if (threads > 1) {
          EXPECT_GE(stats.spans, 3u) << what;
        }
        if (sized) {
          EXPECT_EQ(stats.accepted, 0u) << what;
        }
        // A budget of one byte keeps no span: every window (none at member starts) is decoded
        // again.
        if (budget == 1) {
          const auto windows = static_cast<std::size_t>(
              std::count_if(seq.points.begin(), seq.points.end(),
                            [](const gz::SeekPoint& p) { return !p.window.empty(); }));
          EXPECT_GE(stats.redecoded_windows, windows) << what;
          EXPECT_LE(stats.redecoded_windows, windows + 1) << what;  // + one at the very end
        } else {
          EXPECT_EQ(stats.redecoded_windows, 0u) << what;
        }
        ASSERT_EQ(par.points.size(), seq.points.size()) << what;
        EXPECT_TRUE(gz::encode_gzidx(par) == want) << what;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Producers, ParallelBuildTest,
                         ::testing::Values("zlib1", "zlib6", "gzip1", "gzip6", "pigz", "igzip1",
                                           "igzip3", "libdeflate9", "multimember", "voxpipe",
                                           "bgzf"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

// Damaged files fail the parallel build with the sequential build's error: the same code, field,
// offset and message, whatever the thread count.
TEST(ParallelBuild, DamagedFilesGiveTheSequentialError) {
  TempDir dir;
  const Bytes a = mixed_payload(300 * 1024, 51), b = mixed_payload(200 * 1024, 52);
  const Bytes ga = gzip_compress(a, 6), gb = gzip_compress(b, 6);
  const Bytes good = concat({ga, gb});
  std::vector<std::pair<std::string, Bytes>> cases;
  for (std::size_t field : {8u, 4u}) {  // the first member's CRC32, its ISIZE
    Bytes bad = good;
    bad[ga.size() - field] ^= 1;
    cases.emplace_back("first trailer " + std::to_string(field), bad);
    bad = good;
    bad[bad.size() - field] ^= 0x10;
    cases.emplace_back("last trailer " + std::to_string(field), bad);
  }
  for (std::size_t cut : {good.size() / 3, ga.size() - 3, ga.size() + 5, good.size() - 1})
    cases.emplace_back("cut at " + std::to_string(cut),
                       Bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut)));
  for (std::size_t at : {ga.size() / 2, ga.size() + gb.size() / 2}) {
    Bytes bad = good;
    for (std::size_t i = 0; i < 64; ++i) bad[at + i] = static_cast<std::uint8_t>(0xff - i);
    cases.emplace_back("garbage at " + std::to_string(at), bad);
  }
  cases.emplace_back("data after the end", concat({good, Bytes{'x', 'y'}}));
  // Sized members: spans from the member table, checked by the parallel build's own chained
  // CRC32s.
  for (const auto layout : {voxpipe::GzipLayout::members, voxpipe::GzipLayout::bgzf}) {
    const Bytes sized = read_file(write_voxpipe_members(dir, concat({a, b, a, b, a}), layout));
    const auto members = gz::read_member_table(InputFile(dir.file(
        layout == voxpipe::GzipLayout::bgzf ? "vp.bgz" : "vp.gz")));
    ASSERT_TRUE(members && members->size() >= 2);
    const gz::Member& m = (*members)[1];
    for (std::uint64_t field : {8u, 4u}) {
      Bytes bad = sized;
      bad[m.offset + m.size - field] ^= 0x04;
      cases.emplace_back("sized member trailer " + std::to_string(field), bad);
    }
  }
  cases.emplace_back("data between members", concat({ga, Bytes{0, 0, 'x'}, gb}));
  cases.emplace_back("not gzip", a);
  const std::string path = dir.file("bad.gz");
  for (const auto& [what, bytes] : cases) {
    write_file(path, bytes);
    const InputFile file(path);
    const auto seq = catch_error([&] { zlib_index(file, 32768); });
    ASSERT_TRUE(seq.has_value()) << what;
    EXPECT_TRUE(seq->code() == ErrorCode::corrupt || seq->code() == ErrorCode::truncated ||
                seq->code() == ErrorCode::format)
        << what << ": " << seq->what();
    EXPECT_TRUE(seq->offset().has_value()) << what;
    for (unsigned threads : {1u, 2u, 3u}) {
      for (const std::size_t chunk : {kSmallChunk, std::size_t{4096}}) {
        if (kTsan && (threads != 2 || chunk != kSmallChunk)) continue;
        if (threads == 1 && chunk != kSmallChunk) continue;  // one thread has no chunks
        gz::ExactBuildOptions::Stats stats;
        gz::ExactBuildOptions options;
        options.threads = threads;
        options.chunk_size = chunk;
        options.stats = &stats;
        const auto par = catch_error([&] { gz::build_seek_index(file, 32768, {}, options); });
        ASSERT_TRUE(par.has_value()) << what << " threads " << threads << " chunk " << chunk;
        // Our decoder's error is not the one reported: zlib's build ran for its own (the file
        // does not start with the gzip magic: no build ran).
        EXPECT_EQ(stats.zlib_fallback, what != "not gzip") << what << " threads " << threads;
        EXPECT_EQ(par->code(), seq->code()) << what;
        EXPECT_EQ(par->field(), seq->field()) << what;
        EXPECT_EQ(par->offset(), seq->offset()) << what;
        EXPECT_STREQ(par->what(), seq->what()) << what;
      }
    }
  }
}

// A file of one chunk (nothing to share out) is built sequentially; one whose chunks hold no
// block start to find (one huge block) gets the sequential index all the same.
TEST(ParallelBuild, OneSpanIsBuiltSequentially) {
  TempDir dir;
  const Bytes payload = text_bytes(100000, 3);
  write_file(dir.file("s.gz"), gzip_compress(payload, 6));
  const InputFile file(dir.file("s.gz"));
  gz::ExactBuildOptions::Stats stats;
  gz::ExactBuildOptions options;
  options.threads = 4;
  options.stats = &stats;
  const gz::SeekIndex par = gz::build_seek_index(file, 8192, {}, options);
  EXPECT_FALSE(stats.parallel);
  EXPECT_TRUE(gz::encode_gzidx(par) == gz::encode_gzidx(zlib_index(file, 8192)));
  // Stored blocks of 64 KiB at most, but one block of a run of zeros: igzip -0 writes one.
  const auto one_block = compress_with("/usr/bin/igzip -c -0", payload, dir);
  if (!one_block) return;
  write_file(dir.file("b.gz"), *one_block);
  const InputFile single(dir.file("b.gz"));
  options.chunk_size = 4096;
  const gz::SeekIndex b = gz::build_seek_index(single, 8192, {}, options);
  EXPECT_TRUE(gz::encode_gzidx(b) == gz::encode_gzidx(zlib_index(single, 8192)));
}

// The one-pass build with chunks of 4 KiB, the smallest: most chunks' block starts are false or
// lie inside blocks that began in the chunk before, chunks end and start at member starts
// (members of a few KiB, empty ones, zero padding; members padded to start chunks), stored
// blocks start chunks (a stored block's header may begin at several bits), and chunks of zeros
// outgrow their cap (16 chunks of output) and are decoded from the frontier instead: every
// time the sequential index, whether chunks are left to the scheduling or all decoded ahead.
TEST(OnePassBuild, TinyChunksGiveTheSequentialIndex) {
  TempDir dir;
  const Bytes text = mixed_payload(256 * 1024, 61);
  std::vector<std::pair<std::string, Bytes>> files;
  files.emplace_back("zlib1", gzip_compress(text, 1));
  files.emplace_back("zlib6", gzip_compress(text, 6));
  files.emplace_back("stored", gzip_compress(text, 0));
  Bytes members;
  for (std::size_t at = 0, k = 0; at < text.size(); at += 5000 + 977 * (k % 5), ++k) {
    const std::size_t end = std::min(text.size(), at + 5000 + 977 * (k % 5));
    const Bytes part(text.begin() + static_cast<std::ptrdiff_t>(at),
                     text.begin() + static_cast<std::ptrdiff_t>(end));
    members = concat({members, gzip_compress(part, static_cast<int>(k % 10))});
    if (k % 7 == 3) members = concat({members, gzip_compress(Bytes{}, 6)});
    if (k % 11 == 5) members = concat({members, Bytes(3, 0)});
  }
  files.emplace_back("members", members);
  // Members of several blocks, each padded with zeros to start a chunk: chunks that begin at a
  // member's first block, with an empty window.
  const Bytes long_text = mixed_payload(768 * 1024, 62);
  Bytes aligned;
  for (std::size_t k = 0; k < 8; ++k) {
    const Bytes part(long_text.begin() + static_cast<std::ptrdiff_t>(k * 96 * 1024),
                     long_text.begin() + static_cast<std::ptrdiff_t>((k + 1) * 96 * 1024));
    aligned = concat({aligned, gzip_compress(part, k % 2 ? 1 : 6)});
    aligned.resize((aligned.size() + 4095) / 4096 * 4096, 0);
  }
  files.emplace_back("aligned members", aligned);
  files.emplace_back("zeros", gzip_compress(concat({text, Bytes(6u << 20, 0), text}), 6));
  for (const auto& [name, gzdata] : files) {
    const std::string path = dir.file("x.gz");
    write_file(path, gzdata);
    const InputFile file(path);
    std::size_t accepted = 0;
    for (const std::uint64_t spacing : {std::uint64_t{0}, std::uint64_t{20000}, std::uint64_t{1}}) {
      if (kTsan && spacing != 20000) continue;
      const gz::SeekIndex seq = zlib_index(file, spacing);
      const Bytes want = gz::encode_gzidx(seq);
      for (const unsigned threads : {1u, 2u, 3u}) {
        for (const bool ahead_first : {false, true}) {
          if (kTsan && (threads != 2 || !ahead_first)) continue;
          if (threads == 1 && ahead_first) continue;
          gz::ExactBuildOptions::Stats stats;
          gz::ExactBuildOptions options;
          options.threads = threads;
          options.chunk_size = 4096;
          options.decode_ahead_first = ahead_first;
          options.stats = &stats;
          const gz::SeekIndex par = gz::build_seek_index(file, spacing, {}, options);
          const std::string what = name + " spacing " + std::to_string(spacing) + " threads " +
                                   std::to_string(threads) + " ahead first " +
                                   std::to_string(ahead_first);
          EXPECT_EQ(stats.parallel, threads > 1) << what;
          EXPECT_FALSE(stats.zlib_fallback) << what;
          if (ahead_first) accepted += stats.accepted;
          ASSERT_EQ(par.points.size(), seq.points.size()) << what;
          EXPECT_TRUE(gz::encode_gzidx(par) == want) << what;
        }
      }
    }
    // With every chunk decoded ahead first, chunks that start on real block starts were
    // accepted (left to the scheduling, a small file's frontier may get everywhere first). The
    // small members are one final block each, which the block finder does not look for.
    if (name != "members") {
      EXPECT_GT(accepted, 0u) << name;
    }
  }
}

// A chunk whose first block is a member's first, where the run before it stopped (no window
// carried over), and whose output starts empty: an empty stored block (a sync flush before any
// data) then an empty final block. Its points take an empty window without looking into its
// output, which holds nothing yet (fuzz_index_build found the lookup out of bounds).
TEST(OnePassBuild, ChunkStartingAtAnEmptyMember) {
  TempDir dir;
  // One final stored block across the first 4 KiB chunk's end, so that the next member's first
  // block is the first block start in the second chunk.
  const Bytes first = gzip_compress(random_bytes(4200, 5), 0);
  Bytes empty;
  {
    z_stream z{};
    ASSERT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
    empty.resize(256);
    z.next_out = empty.data();
    z.avail_out = static_cast<uInt>(empty.size());
    ASSERT_EQ(deflate(&z, Z_SYNC_FLUSH), Z_OK);
    ASSERT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
    empty.resize(z.total_out);
    deflateEnd(&z);
  }
  const Bytes gzdata = concat({first, empty, gzip_compress(mixed_payload(96 * 1024, 11), 6)});
  write_file(dir.file("e.gz"), gzdata);
  const InputFile file(dir.file("e.gz"));
  const Bytes want = gz::encode_gzidx(zlib_index(file, 1000));
  for (int run = 0; run < (kTsan ? 2 : 8); ++run) {
    gz::ExactBuildOptions::Stats stats;
    gz::ExactBuildOptions options;
    options.threads = 2;
    options.chunk_size = 4096;
    options.decode_ahead_first = true;
    options.stats = &stats;
    const gz::SeekIndex par = gz::build_seek_index(file, 1000, {}, options);
    EXPECT_TRUE(stats.parallel);
    EXPECT_FALSE(stats.zlib_fallback);
    EXPECT_TRUE(gz::encode_gzidx(par) == want) << run;
  }
}

// --- Progress of the parallel exact build -----------------------------------------------------

// Counts the bytes read through it: how much of its work a build had done when it reported.
class CountingInput final : public voxpipe::core::RandomAccessInput {
 public:
  explicit CountingInput(const voxpipe::core::RandomAccessInput& file) : file_(file) {}
  std::size_t read_at(std::uint64_t offset, std::span<std::byte> dst) const override {
    const std::size_t n = file_.read_at(offset, dst);
    read_ += n;
    return n;
  }
  std::uint64_t size() const noexcept override { return file_.size(); }
  const std::string& path() const noexcept override { return file_.path(); }
  std::uint64_t bytes_read() const { return read_; }

 private:
  const voxpipe::core::RandomAccessInput& file_;
  mutable std::atomic<std::uint64_t> read_{0};
};

// A progress report, with the bytes the build had read when it came.
struct Report {
  std::uint64_t done, total, read;
};

// The reports of a parallel exact build of a file of `size` bytes that read `read_in_all` bytes:
// `done` never decreasing, `total` the file size, and (size, size) last and only there, made
// when the build had read everything it ever read (each chunk or span decoded and placed, not
// just read).
void expect_done_only_at_the_end(const std::vector<Report>& reports, std::uint64_t size,
                                 std::uint64_t read_in_all) {
  ASSERT_GE(reports.size(), 2u);  // the bar moved before it was full
  for (std::size_t i = 0; i < reports.size(); ++i) {
    EXPECT_EQ(reports[i].total, size) << i;
    if (i > 0) {
      EXPECT_GE(reports[i].done, reports[i - 1].done) << i;
    }
    if (i + 1 < reports.size()) {
      EXPECT_LT(reports[i].done, size) << i << " of " << reports.size();
    }
  }
  EXPECT_EQ(reports.back().done, size);
  EXPECT_EQ(reports.back().read, read_in_all) << "the total was reported before the index was done";
}

// ExactBuildOptions::progress on the parallel paths, the one-pass build (zlib6) and spans from the
// members' headers (voxpipe): reported as above, and the index is the sequential build's.
TEST(ParallelBuild, ProgressReachesTheTotalOnlyWhenTheIndexIsDone) {
  for (const std::string name : {"zlib6", "voxpipe"}) {
    TempDir dir;
    const Bytes payload = mixed_payload(name == "voxpipe" ? 2304 * 1024 : 768 * 1024, 43);
    const std::optional<Bytes> gzdata = produce(name, payload, dir);
    ASSERT_TRUE(gzdata);
    write_file(dir.file("x.gz"), *gzdata);
    const InputFile file(dir.file("x.gz"));
    const CountingInput counting(file);
    std::vector<Report> reports;
    gz::ExactBuildOptions::Stats stats;
    gz::ExactBuildOptions options;
    options.threads = 2;
    options.chunk_size = kSmallChunk;
    options.stats = &stats;
    options.progress = [&](std::uint64_t done, std::uint64_t total) {
      reports.push_back({done, total, counting.bytes_read()});
    };
    const gz::SeekIndex par = gz::build_seek_index(counting, 64 * 1024, {}, options);
    ASSERT_TRUE(stats.parallel) << name;
    ASSERT_GE(stats.spans, 3u) << name;
    SCOPED_TRACE(name);
    expect_done_only_at_the_end(reports, gzdata->size(), counting.bytes_read());
    EXPECT_TRUE(gz::encode_gzidx(par) == gz::encode_gzidx(zlib_index(file, 64 * 1024)));
  }
}

// The same through the public options (GzipIndexOptions::progress, as `voxpipe index` draws its
// bar) on a file large enough for the parallel path at the default chunk size (four chunks of
// 8 MiB), 2 threads: the bar reaches its end when the index is done, not before.
TEST(BuildGzipIndex, ThreadedExactProgressReachesTheTotalOnlyWhenDone) {
  if (kTsan) GTEST_SKIP() << "32 MiB through the instrumented parallel build; the small-chunk "
                             "test above covers the threaded reporting";
  // 64 symbols at random: 6 bits a byte, Huffman-coded blocks the block finder finds.
  Bytes payload(44u << 20);
  std::mt19937_64 rng(47);
  for (auto& b : payload) b = static_cast<std::uint8_t>('0' + rng() % 64);
  const Bytes gzdata = gzip_compress(payload, 1);
  ASSERT_GE(gzdata.size(), std::size_t{32} << 20);
  TempDir dir;
  write_file(dir.file("big.gz"), gzdata);
  const InputFile file(dir.file("big.gz"));
  const CountingInput counting(file);
  std::vector<Report> reports;
  voxpipe::GzipIndexOptions options;
  options.threads = 2;
  options.progress = [&](std::uint64_t done, std::uint64_t total) {
    reports.push_back({done, total, counting.bytes_read()});
  };
  const gz::SeekIndex index = gz::build_index(counting, options);
  EXPECT_EQ(index.uncompressed_size, payload.size());
  // The parallel path read the whole file (in one pass: about once).
  ASSERT_GE(counting.bytes_read(), gzdata.size());
  expect_done_only_at_the_end(reports, gzdata.size(), counting.bytes_read());
}

}  // namespace
