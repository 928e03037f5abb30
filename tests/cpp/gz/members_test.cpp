// Sized-member gzip ('VP' and BGZF): what MemberWriter writes is ordinary gzip to zlib, and its
// members are found from the headers alone and inflated in any order, any range, any threads.
#include <random>

#include "gz/gzip_source.hpp"
#include "gz/member_files.hpp"
#include "gz/member_writer.hpp"
#include "gz/members.hpp"
#include "test_support.hpp"

namespace {

using voxpipe::ErrorCode;
using voxpipe::GzipLayout;
using voxpipe::core::InputFile;
using voxpipe::gz::kBgzfBlockSize;
using voxpipe::gz::kMemberSize;
using voxpipe::gz::Member;
using vptest::Bytes;

// Smooth int16-like data with a zero background: compresses like an anatomical image.
Bytes image_bytes(std::size_t n, std::uint64_t seed) {
  Bytes b(n);
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i < n; ++i)
    b[i] = (i / 4096) % 3 == 0 ? 0 : static_cast<std::uint8_t>((i / 7) ^ (rng() & 3));
  return b;
}

using gztest::write_members;

Bytes collect(const InputFile& file, const std::vector<Member>& members, std::uint64_t begin,
              std::uint64_t end, unsigned threads) {
  Bytes out(end - begin);
  std::vector<int> seen(end - begin, 0);
  voxpipe::gz::inflate_members(file, members, begin, end, threads,
                               [&](std::uint64_t at, std::span<const std::byte> data) {
                                 ASSERT_GE(at, begin);
                                 ASSERT_LE(at + data.size(), end);
                                 std::memcpy(out.data() + (at - begin), data.data(), data.size());
                                 for (std::size_t i = 0; i < data.size(); ++i) ++seen[at - begin + i];
                               });
  for (std::size_t i = 0; i < seen.size(); ++i)
    if (seen[i] != 1) ADD_FAILURE() << "byte " << begin + i << " delivered " << seen[i] << " times";
  return out;
}

TEST(MemberWriter, ZlibReadsEverySizeLayoutLevelAndThreadCount) {
  vptest::TempDir dir;
  const std::size_t sizes[] = {0, 1, 1000, kBgzfBlockSize, kMemberSize - 1, kMemberSize,
                               kMemberSize + 1, 3 * kMemberSize + 12345};
  for (std::size_t size : sizes) {
    const Bytes data = image_bytes(size, size);
    for (GzipLayout layout : {GzipLayout::members, GzipLayout::bgzf}) {
      for (int level : {0, 1, 6, 9}) {
        for (unsigned threads : {1u, 3u}) {
          const std::string path = write_members(dir, data, level, layout, threads, 100000);
          EXPECT_EQ(vptest::gunzip(vptest::read_file(path)), data)
              << size << " bytes, level " << level << ", threads " << threads;
        }
      }
    }
  }
}

TEST(MemberWriter, HeadersAnnounceTheSizesAndBgzfEndsWithItsMarker) {
  vptest::TempDir dir;
  const Bytes data = image_bytes(2 * kMemberSize + 10, 1);
  const Bytes vp = vptest::read_file(write_members(dir, data, 1, GzipLayout::members, 2));
  EXPECT_EQ(Bytes(vp.begin(), vp.begin() + 16),
            (Bytes{0x1f, 0x8b, 8, 4, 0, 0, 0, 0, 4, 0xff, 12, 0, 'V', 'P', 8, 0}));
  const InputFile vp_file(dir.file("m.gz"));
  const auto members = voxpipe::gz::read_member_table(vp_file);
  ASSERT_TRUE(members);
  ASSERT_EQ(members->size(), 4u);  // and the table member, empty, at the end
  EXPECT_EQ(members->back().uncompressed_size, 0u);
  EXPECT_EQ(members->back().uncompressed_offset, data.size());
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    const Member& m = (*members)[i];
    EXPECT_EQ(m.offset, offset);
    EXPECT_EQ(m.uncompressed_offset, i * kMemberSize);
    EXPECT_EQ(m.uncompressed_size, i < 2 ? kMemberSize : 10u);
    const std::uint32_t announced = vp[m.offset + 16] | vp[m.offset + 17] << 8 |
                                    vp[m.offset + 18] << 16 | static_cast<std::uint32_t>(vp[m.offset + 19]) << 24;
    EXPECT_EQ(announced, m.size);
    offset += m.size;
  }
  EXPECT_EQ(offset + members->back().size, vp.size());

  const Bytes bgzf = vptest::read_file(write_members(dir, data, 6, GzipLayout::bgzf, 2));
  const Bytes eof{0x1f, 0x8b, 8, 4, 0, 0, 0, 0, 0, 0xff, 6, 0, 0x42, 0x43, 2, 0, 0x1b, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  ASSERT_GT(bgzf.size(), eof.size());
  EXPECT_EQ(Bytes(bgzf.end() - 28, bgzf.end()), eof);
  const InputFile bgzf_file(dir.file("m.bgz"));
  const auto blocks = voxpipe::gz::read_member_table(bgzf_file);
  ASSERT_TRUE(blocks);
  EXPECT_EQ(blocks->size(), (data.size() + kBgzfBlockSize - 1) / kBgzfBlockSize + 1);
  for (const Member& m : *blocks) {
    EXPECT_LE(m.size, 65536u);
    EXPECT_LE(m.uncompressed_size, kBgzfBlockSize);
  }
}

TEST(InflateMembers, AnyRangeWithAnyThreadsDeliversEachByteOnce) {
  vptest::TempDir dir;
  const Bytes data = image_bytes(4 * kMemberSize + 777, 5);
  for (GzipLayout layout : {GzipLayout::members, GzipLayout::bgzf}) {
    const InputFile file(write_members(dir, data, 1, layout, 2));
    const auto members = voxpipe::gz::read_member_table(file);
    ASSERT_TRUE(members);
    std::mt19937_64 rng(7);
    std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges = {
        {0, data.size()}, {0, 1}, {kMemberSize - 1, kMemberSize + 1}, {kMemberSize, 2 * kMemberSize},
        {data.size() - 1, data.size()}, {5, 5}};
    for (int i = 0; i < 20; ++i) {
      std::uint64_t a = rng() % data.size(), b = rng() % (data.size() + 1);
      ranges.push_back({std::min(a, b), std::max(a, b)});
    }
    for (auto [begin, end] : ranges)
      for (unsigned threads : {1u, 2u, 4u})
        EXPECT_EQ(collect(file, *members, begin, end, threads),
                  Bytes(data.begin() + static_cast<std::ptrdiff_t>(begin), data.begin() + static_cast<std::ptrdiff_t>(end)))
            << begin << ".." << end << " threads " << threads;
  }
}

TEST(GzipSource, RandomReadsOfSizedMembersEqualTheData) {
  vptest::TempDir dir;
  const Bytes data = image_bytes(3 * kMemberSize + 99, 9);
  voxpipe::gz::GzipSource source(write_members(dir, data, 1, GzipLayout::members, 2));
  ASSERT_TRUE(source.random_access());
  std::mt19937_64 rng(11);
  for (int i = 0; i < 60; ++i) {
    const std::uint64_t at = rng() % data.size();
    const std::size_t n = static_cast<std::size_t>(rng() % (i % 2 ? 300 : 2 * kMemberSize));
    Bytes got(n);
    const std::size_t r = source.read_at(at, std::as_writable_bytes(std::span(got)));
    const std::size_t expect = std::min<std::uint64_t>(n, data.size() - at);
    ASSERT_EQ(r, expect);
    got.resize(r);
    EXPECT_EQ(got, Bytes(data.begin() + static_cast<std::ptrdiff_t>(at),
                         data.begin() + static_cast<std::ptrdiff_t>(at + r)));
  }
  Bytes none(10);
  EXPECT_EQ(source.read_at(data.size(), std::as_writable_bytes(std::span(none))), 0u);
}

TEST(GzipSource, PlainGzipIsReadSequentiallyThroughTheSamePipe) {
  vptest::TempDir dir;
  const Bytes data = image_bytes(3 * kMemberSize + 5, 13);
  vptest::write_file(dir.file("p.gz"), vptest::gzip_compress(data, 6));
  for (unsigned threads : {1u, 2u}) {
    voxpipe::gz::GzipSource source(dir.file("p.gz"));
    EXPECT_FALSE(source.random_access());
    Bytes out(data.size() - 100);
    source.read_range(100, data.size(), threads, [&](std::uint64_t at, std::span<const std::byte> d) {
      std::memcpy(out.data() + (at - 100), d.data(), d.size());
    });
    EXPECT_EQ(out, Bytes(data.begin() + 100, data.end()));
  }
}

// A plain gzip large enough for the speculative parallel engine: a read of the whole stream
// runs on to the trailer and checks it, so a damaged CRC32 is an error, on one thread or two; a
// read that ends before the stream does is not checked (nothing after it is inflated).
TEST(GzipSource, WholeStreamReadsCheckTheTrailer) {
  vptest::TempDir dir;
  const Bytes data = vptest::random_bytes(std::size_t{3} << 20, 23);  // 3 MiB compressed
  Bytes gz = vptest::gzip_compress(data, 1);
  ASSERT_GT(gz.size(), std::size_t{2} << 20);
  gz[gz.size() - 8] ^= 0x5a;  // the CRC32's first byte
  vptest::write_file(dir.file("bad.gz"), gz);
  auto read = [&](std::uint64_t end, unsigned threads) {
    voxpipe::gz::GzipSource source(dir.file("bad.gz"));
    Bytes out(end);
    source.read_range(0, end, threads, [&](std::uint64_t at, std::span<const std::byte> d) {
      std::memcpy(out.data() + at, d.data(), d.size());
    });
    return out;
  };
  for (unsigned threads : {1u, 2u}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    EXPECT_VP_ERROR(read(data.size(), threads), ErrorCode::corrupt);
  }
  // One thread stops where the read ends, 64 KiB short of the trailer; the parallel engine may
  // have inflated the trailer already (then the damage is an error, which is never wrong).
  const std::size_t short_end = data.size() - (64 << 10);
  EXPECT_EQ(read(short_end, 1), Bytes(data.begin(), data.begin() + short_end));
}

TEST(GzipSource, SinkErrorsReachTheCallerFromEitherPipelineThread) {
  vptest::TempDir dir;
  const Bytes data = image_bytes(4 * kMemberSize, 17);
  vptest::write_file(dir.file("p.gz"), vptest::gzip_compress(data, 1));
  for (int fail_at : {0, 3, 7}) {
    voxpipe::gz::GzipSource source(dir.file("p.gz"));
    int calls = 0;
    std::mutex m;
    EXPECT_THROW(source.read_range(0, data.size(), 2,
                                   [&](std::uint64_t, std::span<const std::byte>) {
                                     std::lock_guard lock(m);
                                     if (calls++ == fail_at) throw std::runtime_error("sink");
                                   }),
                 std::runtime_error);
  }
}

TEST(ReadMemberTable, PlainAndConcatenatedFilesAreNotSized) {
  vptest::TempDir dir;
  const Bytes data = image_bytes(kMemberSize + 3, 19);
  vptest::write_file(dir.file("plain.gz"), vptest::gzip_compress(data, 6));
  EXPECT_FALSE(voxpipe::gz::read_member_table(InputFile(dir.file("plain.gz"))));
  // A sized file followed by a plain member: read as plain gzip, all of it.
  const Bytes sized = vptest::read_file(write_members(dir, data, 1, GzipLayout::members, 1));
  vptest::write_file(dir.file("cat.gz"), vptest::concat({sized, vptest::gzip_compress(data, 1)}));
  EXPECT_FALSE(voxpipe::gz::read_member_table(InputFile(dir.file("cat.gz"))));
  // Zero padding after the last member is accepted, as gzip does.
  vptest::write_file(dir.file("pad.gz"), vptest::concat({sized, Bytes(100, 0)}));
  const auto padded = voxpipe::gz::read_member_table(InputFile(dir.file("pad.gz")));
  ASSERT_TRUE(padded);
  EXPECT_EQ(padded->size(), 3u);  // two members and the table member, found by a walk
}

// An input that counts its reads.
class CountingInput final : public voxpipe::core::RandomAccessInput {
 public:
  explicit CountingInput(const std::string& path) : file_(path) {}
  std::size_t read_at(std::uint64_t offset, std::span<std::byte> dst) const override {
    ++reads;
    return file_.read_at(offset, dst);
  }
  std::uint64_t size() const noexcept override { return file_.size(); }
  const std::string& path() const noexcept override { return file_.path(); }
  mutable int reads = 0;

 private:
  InputFile file_;
};

bool same_members(const std::vector<Member>& a, const std::vector<Member>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].offset != b[i].offset || a[i].size != b[i].size ||
        a[i].uncompressed_offset != b[i].uncompressed_offset ||
        a[i].uncompressed_size != b[i].uncompressed_size)
      return false;
  return true;
}

// The table member: the file's end and its first header give every member (two reads, however
// many members), the same list a walk of the headers finds; a table that does not add up is
// not used (the walk decides); one that adds up but lies about a member is caught when that
// member is inflated, never read as data.
TEST(ReadMemberTable, TheTableMemberGivesWhatAWalkFindsInTwoReads) {
  vptest::TempDir dir;
  const Bytes data = image_bytes(5 * kMemberSize + 12345, 29);
  const Bytes good = vptest::read_file(write_members(dir, data, 1, GzipLayout::members, 2));
  const std::size_t n = 6, table_size = 58 + 4 * n;
  const std::size_t t = good.size() - table_size;
  ASSERT_EQ(Bytes(good.begin() + static_cast<std::ptrdiff_t>(t),
                  good.begin() + static_cast<std::ptrdiff_t>(t) + 4),
            (Bytes{0x1f, 0x8b, 8, 4}));
  EXPECT_EQ(good[t + 24], 'V');
  EXPECT_EQ(good[t + 25], 'T');
  EXPECT_EQ(vptest::gunzip(good), data);  // an empty member to zlib

  const CountingInput counted(dir.file("m.gz"));
  const auto from_table = voxpipe::gz::read_member_table(counted);
  ASSERT_TRUE(from_table);
  EXPECT_EQ(counted.reads, 2);
  ASSERT_EQ(from_table->size(), n + 1);
  EXPECT_EQ(collect(InputFile(dir.file("m.gz")), *from_table, 0, data.size(), 2), data);

  const auto read = [&](const Bytes& b, int* reads = nullptr) {
    vptest::write_file(dir.file("x.gz"), b);
    const CountingInput in(dir.file("x.gz"));
    auto m = voxpipe::gz::read_member_table(in);
    if (reads) *reads = in.reads;
    return m;
  };
  // Without its end marker the table is not found: the walk finds the same members.
  Bytes b = good;
  b[good.size() - 17] = 'X';
  int reads = 0;
  auto walked = read(b, &reads);
  ASSERT_TRUE(walked);
  EXPECT_TRUE(same_members(*walked, *from_table));
  EXPECT_GT(reads, 2);
  // Lies that do not add up: the walk decides (here: the same members).
  const auto put32 = [](Bytes& x, std::size_t at, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) x[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
  };
  const auto get32 = [](const Bytes& x, std::size_t at) {
    return static_cast<std::uint32_t>(x[at] | x[at + 1] << 8 | x[at + 2] << 16 |
                                      static_cast<std::uint32_t>(x[at + 3]) << 24);
  };
  for (std::size_t field : {t + 40 + 4 * 2, t + 28, t + 32, t + 40}) {
    b = good;
    put32(b, field, get32(b, field) + 1);
    auto m = read(b, &reads);
    ASSERT_TRUE(m) << field - t;
    EXPECT_TRUE(same_members(*m, *from_table)) << field - t;
    EXPECT_GT(reads, 2) << field - t;
  }
  // The table member's own 'VP' size: not a table, and the walk finds it runs past the end.
  b = good;
  put32(b, t + 16, get32(b, t + 16) + 1);
  auto err = vptest::catch_error([&] { read(b); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::truncated);
  b = good;
  put32(b, t + 28, 0xffffffffu);  // a member count that would be 16 GiB of sizes
  auto m = read(b);
  ASSERT_TRUE(m);
  EXPECT_TRUE(same_members(*m, *from_table));
  // A lie that adds up (one member 1 byte longer, the next 1 shorter): caught on inflating.
  b = good;
  put32(b, t + 40 + 4 * 2, get32(b, t + 40 + 4 * 2) + 1);
  put32(b, t + 40 + 4 * 3, get32(b, t + 40 + 4 * 3) - 1);
  m = read(b, &reads);
  ASSERT_TRUE(m);
  EXPECT_EQ(reads, 2);
  err = vptest::catch_error([&] {
    collect(InputFile(dir.file("x.gz")), *m, 2 * kMemberSize, 3 * kMemberSize, 1);
  });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::corrupt);
  // So is a lie about the last member's data size.
  b = good;
  put32(b, t + 36, get32(b, t + 36) + 1);
  m = read(b);
  ASSERT_TRUE(m);
  err = vptest::catch_error([&] {
    collect(InputFile(dir.file("x.gz")), *m, 0, data.size() + 1, 1);
  });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::corrupt);
  // A file of more members than a table lists has none, and is walked.
  const std::vector<std::uint32_t> many(voxpipe::gz::kMaxTableMembers + 1, 100);
  EXPECT_TRUE(voxpipe::gz::encode_table_member(many, kMemberSize, 1).empty());
  EXPECT_FALSE(voxpipe::gz::encode_table_member(std::span(many).first(many.size() - 1),
                                                kMemberSize, 1).empty());
}

TEST(ReadMemberTable, DamagedFilesAreClearErrors) {
  vptest::TempDir dir;
  const Bytes data = image_bytes(2 * kMemberSize + 3, 23);
  const Bytes good = vptest::read_file(write_members(dir, data, 1, GzipLayout::members, 1));
  auto table_error = [&](const Bytes& bad) {
    vptest::write_file(dir.file("bad.gz"), bad);
    return vptest::catch_error([&] { voxpipe::gz::read_member_table(InputFile(dir.file("bad.gz"))); });
  };
  // Truncated anywhere after the first header: the announced size runs past the end.
  for (std::size_t cut : {std::size_t{30}, good.size() / 2, good.size() - 1}) {
    auto e = table_error(Bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut)));
    ASSERT_TRUE(e) << cut;
    EXPECT_EQ(e->code(), ErrorCode::truncated) << cut;
  }
  // Garbage after the end.
  auto e = table_error(vptest::concat({good, Bytes{1, 2, 3}}));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::corrupt);
  // A member size smaller than a header and trailer.
  Bytes tiny = good;
  tiny[16] = 5, tiny[17] = tiny[18] = tiny[19] = 0;
  e = table_error(tiny);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::corrupt);
  // 'VP' uncompressed size disagreeing with ISIZE.
  Bytes lie = good;
  lie[20] ^= 1;
  e = table_error(lie);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::corrupt);
  EXPECT_EQ(e->field(), "ISIZE");
}

TEST(InflateMembers, FlippedBitsAreCorruptErrorsNamingTheMember) {
  vptest::TempDir dir;
  const Bytes data = image_bytes(2 * kMemberSize, 29);
  const Bytes good = vptest::read_file(write_members(dir, data, 1, GzipLayout::members, 1));
  std::mt19937_64 rng(31);
  for (int i = 0; i < 40; ++i) {
    Bytes bad = good;
    // Inside the first member's deflate data or trailer (its header sizes stay intact).
    const std::size_t at = 24 + rng() % (good.size() / 2 - 24);
    bad[at] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
    vptest::write_file(dir.file("bad.gz"), bad);
    auto e = vptest::catch_error([&] {
      const InputFile file(dir.file("bad.gz"));
      const auto members = voxpipe::gz::read_member_table(file);
      if (members) collect(file, *members, 0, data.size(), 2);
    });
    // A flip may hit the second member's header instead when members differ in size; either
    // way it must be an error.
    ASSERT_TRUE(e) << "flip at " << at;
    EXPECT_TRUE(e->code() == ErrorCode::corrupt || e->code() == ErrorCode::truncated) << e->what();
  }
}

}  // namespace
