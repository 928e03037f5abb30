// Integrity under damage: every read that reaches the end of a gzip member checks its trailer
// (CRC32, ISIZE) and what follows it, whichever engine the layout selects (sequential, the
// speculative parallel engine, sized members, a seek index) and at any thread count. Damage a
// trailer or a decoder can detect is an Error, never bytes.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gz/gzip_reader.hpp"
#include "gz/gzip_source.hpp"
#include "gz/member_writer.hpp"
#include "gz/parallel_inflate.hpp"
#include "gz/seek_index.hpp"
#include "test_support.hpp"

namespace {

using voxpipe::ErrorCode;
using voxpipe::GzipLayout;
using voxpipe::core::AtomicOutputFile;
using voxpipe::core::InputFile;
using vptest::Bytes;
namespace gz = voxpipe::gz;

// Text, then incompressible bytes: deflate's Huffman and stored blocks, and more than the 2 MiB
// of compressed data from which GzipSource hands a plain stream to the parallel engine.
const Bytes& payload() {
  static const Bytes data = vptest::concat(
      {vptest::text_bytes(std::size_t{1} << 20, 7), vptest::random_bytes(std::size_t{9} << 18, 8)});
  return data;
}

enum class Layout { single, concatenated, members, bgzf };

std::string layout_name(Layout l) {
  switch (l) {
    case Layout::single: return "single";
    case Layout::concatenated: return "concatenated";
    case Layout::members: return "members";
    case Layout::bgzf: return "bgzf";
  }
  return "?";
}

// The file, and where its last member holding data ends (its trailer's last byte + 1).
struct GzFile {
  Bytes bytes;
  std::size_t last_member_end = 0;
};

GzFile make(const vptest::TempDir& dir, Layout layout) {
  const Bytes& data = payload();
  if (layout == Layout::single) {
    Bytes b = vptest::gzip_compress(data, 1);
    return {b, b.size()};
  }
  if (layout == Layout::concatenated) {
    const std::size_t half = data.size() / 2;
    Bytes b = vptest::concat({vptest::gzip_compress(std::span(data).first(half), 1),
                              vptest::gzip_compress(std::span(data).subspan(half), 1)});
    return {b, b.size()};
  }
  const std::string path = dir.file("w.gz");
  {
    AtomicOutputFile out(path);
    gz::MemberWriter w(out, 1, layout == Layout::bgzf ? GzipLayout::bgzf : GzipLayout::members, 2);
    w.write(vptest::as_bytes(data));
    w.finish();
    out.commit();
  }
  Bytes b = vptest::read_file(path);
  // BGZF ends with an empty member (the 28-byte end-of-file marker).
  return {b, layout == Layout::bgzf ? b.size() - 28 : b.size()};
}

// Reads [begin, end) through GzipSource as NIfTI reads do: read_range, or a loop of read_at.
Bytes read(const std::string& path, std::uint64_t begin, std::uint64_t end, unsigned threads,
           bool by_read_at, const gz::GzipSourceOptions& options = {}) {
  gz::GzipSource source(path, options);
  Bytes out(end - begin);
  if (by_read_at) {
    for (std::uint64_t at = begin; at < end;) {
      const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(end - at, 1 << 20));
      const std::size_t got = source.read_at(
          at, std::as_writable_bytes(std::span(out.data() + (at - begin), want)));
      if (got == 0) break;
      at += got;
    }
    return out;
  }
  source.read_range(begin, end, threads, [&](std::uint64_t at, std::span<const std::byte> d) {
    std::memcpy(out.data() + (at - begin), d.data(), d.size());
  });
  return out;
}

struct Damage {
  std::string name;
  // What the damage does to a file whose last data member ends at `end`.
  std::function<Bytes(Bytes, std::size_t end)> apply;
  std::optional<ErrorCode> expect;  // nullopt: the data reads back exactly
};

std::vector<Damage> damages() {
  return {
      {"intact", [](Bytes b, std::size_t) { return b; }, std::nullopt},
      {"zero padding", [](Bytes b, std::size_t) { b.insert(b.end(), 100, 0); return b; },
       std::nullopt},
      {"CRC32 flipped", [](Bytes b, std::size_t e) { b[e - 8] ^= 0x01; return b; },
       ErrorCode::corrupt},
      {"ISIZE flipped", [](Bytes b, std::size_t e) { b[e - 1] ^= 0x55; return b; },
       ErrorCode::corrupt},
      // A byte of stored data (the incompressible half) flipped as well as ISIZE: the data
      // decode, so only the CRC32 can tell.
      {"ISIZE and a data byte flipped",
       [](Bytes b, std::size_t e) {
         b[e - 1] ^= 0x55;
         b[e - e / 10] ^= 0x10;
         return b;
       },
       ErrorCode::corrupt},
      {"trailer missing", [](Bytes b, std::size_t e) { b.resize(e - 8); return b; },
       ErrorCode::truncated},
      {"trailer short", [](Bytes b, std::size_t e) { b.resize(e - 3); return b; },
       ErrorCode::truncated},
      {"garbage after", [](Bytes b, std::size_t) {
         const char* g = "garbage!";
         b.insert(b.end(), g, g + 8);
         return b;
       }, ErrorCode::corrupt},
      {"one non-zero byte after", [](Bytes b, std::size_t) { b.push_back(1); return b; },
       ErrorCode::corrupt},
      {"zeros then garbage after", [](Bytes b, std::size_t) {
         b.insert(b.end(), 16, 0);
         b.push_back('x');
         return b;
       }, ErrorCode::corrupt},
  };
}

class Integrity : public ::testing::TestWithParam<Layout> {};

TEST_P(Integrity, WholeReadsCheckTrailerAndTailAtEveryThreadCount) {
  vptest::TempDir dir;
  const GzFile file = make(dir, GetParam());
  const Bytes& data = payload();
  const std::string path = dir.file("d.gz");
  for (const Damage& d : damages()) {
    vptest::write_file(path, d.apply(file.bytes, file.last_member_end));
    // From the start, and from a NIfTI-1 header's end (a whole image) to the end of the data.
    for (std::uint64_t begin : {std::uint64_t{0}, std::uint64_t{352}}) {
      for (unsigned threads : {1u, 2u, 0u}) {
        for (bool by_read_at : {false, true}) {
          if (by_read_at && threads != 1) continue;
          SCOPED_TRACE(d.name + ", begin " + std::to_string(begin) + ", threads " +
                       std::to_string(threads) + (by_read_at ? ", read_at" : ", read_range"));
          auto err = vptest::catch_error([&] {
            const Bytes got = read(path, begin, data.size(), threads, by_read_at);
            EXPECT_TRUE(std::equal(got.begin(), got.end(), data.begin() + begin))
                << "wrong bytes returned";
          });
          if (d.expect) {
            ASSERT_TRUE(err.has_value()) << "damage read back as data";
            EXPECT_EQ(err->code(), *d.expect) << err->what();
            EXPECT_EQ(err->path(), path);
          } else {
            EXPECT_FALSE(err.has_value()) << err->what();
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, Integrity,
                         ::testing::Values(Layout::single, Layout::concatenated, Layout::members,
                                           Layout::bgzf),
                         [](const auto& info) { return layout_name(info.param); });

// A read that stops before its member's end cannot check the trailer (nothing after it is
// inflated) and returns the bytes: documented in docs/gzip.md. One thread is deterministic; the
// parallel engine may have inflated the trailer anyway.
TEST(Integrity, ReadsThatStopShortOfTheTrailerReturnTheirBytes) {
  vptest::TempDir dir;
  Bytes b = make(dir, Layout::single).bytes;
  b[b.size() - 8] ^= 0x01;
  vptest::write_file(dir.file("d.gz"), b);
  const Bytes& data = payload();
  // 64 KiB short: the byte inflated past a sequential read to see whether the stream ends there
  // does not reach the trailer either.
  const Bytes got = read(dir.file("d.gz"), 0, data.size() - (64 << 10), 1, false);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), data.begin()));
}

// Bit rot after an index was built: the file's size, mtime and last 64 KiB are unchanged, so the
// index is still taken as valid; a whole read through it chains the spans' CRC32s and compares
// them with the trailer, at every thread count, from the exact and from the fast index.
TEST(Integrity, BitRotAfterIndexingIsCaughtByTheMemberCrc) {
  vptest::TempDir dir;
  const Bytes& data = payload();
  const Bytes good = make(dir, Layout::single).bytes;
  vptest::write_file(dir.file("g.gz"), good);
  std::vector<gz::SeekIndex> indexes;
  indexes.push_back(gz::build_seek_index(InputFile(dir.file("g.gz")), std::uint64_t{256} << 10));
  {
    gz::SeekIndex fast;
    gz::ParallelInflateOptions o;
    o.threads = 2;
    o.chunk_size = std::size_t{256} << 10;
    o.seek_points = &fast.points;
    fast.uncompressed_size = gz::inflate_parallel(
        InputFile(dir.file("g.gz")), [](std::uint64_t, std::span<const std::byte>) {}, o);
    fast.compressed_size = good.size();
    indexes.push_back(std::move(fast));
  }
  Bytes bad = good;
  bad[bad.size() * 8 / 10] ^= 0x04;  // inside a stored block of the incompressible half
  vptest::write_file(dir.file("b.gz"), bad);
  const InputFile file(dir.file("b.gz"));
  for (std::size_t k = 0; k < indexes.size(); ++k) {
    ASSERT_GE(indexes[k].points.size(), 4u);
    for (std::uint64_t begin : {std::uint64_t{0}, std::uint64_t{352}}) {
      for (unsigned threads : {1u, 2u, 0u}) {
        SCOPED_TRACE("index " + std::to_string(k) + ", begin " + std::to_string(begin) +
                     ", threads " + std::to_string(threads));
        auto err = vptest::catch_error([&] {
          gz::inflate_range(file, indexes[k], begin, data.size(), threads,
                            [](std::uint64_t, std::span<const std::byte>) {});
        });
        ASSERT_TRUE(err.has_value()) << "bit rot read back as data";
        EXPECT_EQ(err->code(), ErrorCode::corrupt) << err->what();
        EXPECT_EQ(err->field(), "gzip trailer") << err->what();
      }
    }
    // The intact file reads back through the same index.
    Bytes out(data.size());
    gz::inflate_range(InputFile(dir.file("g.gz")), indexes[k], 0, data.size(), 0,
                      [&](std::uint64_t at, std::span<const std::byte> d) {
                        std::memcpy(out.data() + at, d.data(), d.size());
                      });
    EXPECT_EQ(out, data);
  }
}

// An empty member right where the read ends is reached by it: its damaged trailer is an error
// on every engine (found by fuzz_inflate_parallel).
TEST(Integrity, EmptyMemberAtTheEndOfTheReadIsChecked) {
  vptest::TempDir dir;
  const Bytes& data = payload();
  Bytes empty = vptest::gzip_compress(Bytes{}, 6);
  empty[empty.size() - 1] ^= 0x01;  // ISIZE of an empty member: not 0
  vptest::write_file(dir.file("e.gz"), vptest::concat({vptest::gzip_compress(data, 1), empty}));
  for (unsigned threads : {1u, 2u}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    EXPECT_VP_ERROR(read(dir.file("e.gz"), 0, data.size(), threads, false), ErrorCode::corrupt);
    gz::ParallelInflateOptions o;
    o.threads = threads;
    o.chunk_size = std::size_t{256} << 10;
    o.stop_after = data.size();
    EXPECT_VP_ERROR(gz::inflate_parallel(InputFile(dir.file("e.gz")),
                                         [](std::uint64_t, std::span<const std::byte>) {}, o),
                    ErrorCode::corrupt);
  }
}

// The device path reads a whole image through an index as consecutive ranges cut at seek
// points: each call continues the last one's CRC32 chain, so the member is still checked.
TEST(Integrity, ConsecutiveIndexReadsChainTheMemberCheck) {
  vptest::TempDir dir;
  const Bytes& data = payload();
  const Bytes good = make(dir, Layout::single).bytes;
  vptest::write_file(dir.file("g.gz"), good);
  const gz::SeekIndex index =
      gz::build_seek_index(InputFile(dir.file("g.gz")), std::uint64_t{256} << 10);
  ASSERT_GE(index.points.size(), 8u);
  gz::write_gzidx_file(dir.file("i.gzidx"), index);  // no key: taken for any file of this size
  Bytes bad = good;
  bad[bad.size() * 8 / 10] ^= 0x04;  // inside a stored block of the incompressible half
  vptest::write_file(dir.file("b.gz"), bad);
  gz::GzipSourceOptions options;
  options.index_path = dir.file("i.gzidx");
  for (const char* name : {"g.gz", "b.gz"}) {
    gz::GzipSource source(dir.file(name), options);
    ASSERT_TRUE(source.index());
    Bytes out(data.size());
    const auto sink = [&](std::uint64_t at, std::span<const std::byte> d) {
      std::memcpy(out.data() + at, d.data(), d.size());
    };
    auto err = vptest::catch_error([&] {
      std::uint64_t from = 0;
      for (std::size_t k = 2; k < index.points.size(); k += 2) {
        source.read_range(from, index.points[k].uncompressed, 2, sink);
        from = index.points[k].uncompressed;
      }
      source.read_range(from, data.size(), 2, sink);
    });
    if (std::string(name) == "g.gz") {
      EXPECT_FALSE(err.has_value()) << err->what();
      EXPECT_EQ(out, data);
    } else {
      ASSERT_TRUE(err.has_value()) << "bit rot read back as data";
      EXPECT_EQ(err->code(), ErrorCode::corrupt) << err->what();
    }
  }
}

}  // namespace
