// MemberWriter across its batches (a batch of members compresses on the pool while the previous
// one is written): whatever the thread count, batch boundaries and pieces, every level and layout
// gives the same data back through zlib and through voxpipe's own member reader, and the default
// level and layout make a file no larger than what nibabel writes.
#include <cmath>
#include <random>

#include "gz/member_files.hpp"
#include "gz/member_writer.hpp"
#include "gz/members.hpp"
#include "voxpipe/nifti.hpp"
#include "test_support.hpp"

namespace {

using voxpipe::GzipLayout;
using voxpipe::core::AtomicOutputFile;
using voxpipe::core::InputFile;
using voxpipe::gz::kBgzfBlockSize;
using voxpipe::gz::kMemberSize;
using voxpipe::gz::Member;
using voxpipe::gz::MemberWriter;
using vptest::Bytes;

// int16 little-endian volumes as MRI magnitude images look to a compressor: zero background,
// a smooth signal inside an ellipse, and noise in the low bits that deflate cannot remove (real
// scans and bench/make_data.py's series compress about 2:1 at gzip -1).
Bytes mri_like(std::size_t voxels, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0.0, 4.0);
  const std::size_t nx = 96, ny = 96;
  Bytes b(2 * voxels);
  for (std::size_t i = 0; i < voxels; ++i) {
    const double x = static_cast<double>(i % nx) / nx - 0.5;
    const double y = static_cast<double>((i / nx) % ny) / ny - 0.5;
    const double z = static_cast<double>(i / (nx * ny) % 60) / 60 - 0.5;
    const double r = x * x / 0.16 + y * y / 0.2 + z * z / 0.2;
    const double signal = r < 1 ? 550 + 150 * std::cos(9 * x) * std::sin(7 * y + 3 * z) : 0;
    const double re = signal + noise(rng), im = noise(rng);
    const auto v = static_cast<std::uint16_t>(std::lround(std::sqrt(re * re + im * im)));
    b[2 * i] = static_cast<std::uint8_t>(v);
    b[2 * i + 1] = static_cast<std::uint8_t>(v >> 8);
  }
  return b;
}

using gztest::write_members;

// The whole file through voxpipe's member table and parallel member inflate.
Bytes read_with_voxpipe(const std::string& path, std::size_t size) {
  const InputFile file(path);
  const auto members = voxpipe::gz::read_member_table(file);
  if (!members) throw std::runtime_error("not a sized-member file");
  Bytes out(size);
  voxpipe::gz::inflate_members(file, *members, 0, size, 2,
                               [&](std::uint64_t at, std::span<const std::byte> bytes) {
                                 std::memcpy(out.data() + at, bytes.data(), bytes.size());
                               });
  return out;
}

TEST(MemberWriter, EveryLevelAndLayoutRoundTripsAcrossBatches) {
  // 5 MiB: on 2 threads one full batch of 4 members and the rest in finish(); BGZF's batches are
  // 32 blocks (2 MiB), so two full ones.
  vptest::TempDir dir;
  const Bytes data = mri_like(5 * kMemberSize / 2 + 333, 1);
  for (GzipLayout layout : {GzipLayout::members, GzipLayout::bgzf}) {
    for (int level = 0; level <= 9; ++level) {
      const std::string path = write_members(dir, data, level, layout, 2, 1u << 20);
      const Bytes file = vptest::read_file(path);
      EXPECT_EQ(vptest::gunzip(file), data) << "level " << level;
      EXPECT_EQ(read_with_voxpipe(path, data.size()), data) << "level " << level;
      if (level == 0) {
        EXPECT_GT(file.size(), data.size());
      } else {
        EXPECT_LT(file.size(), data.size() * 2 / 3) << "level " << level;
      }
    }
  }
}

TEST(MemberWriter, BatchBoundariesPiecesAndThreadCountsGiveTheSameData) {
  vptest::TempDir dir;
  // Sizes around whole batches of 2 and 3 threads (4 and 6 members), pieces that straddle them.
  const std::size_t sizes[] = {0, 1, 4 * kMemberSize, 4 * kMemberSize + 1, 6 * kMemberSize - 1,
                               13 * kMemberSize + 4321};
  for (std::size_t size : sizes) {
    const Bytes data = vptest::concat({mri_like(size / 2, size), Bytes(size % 2, 7)});
    const Bytes one_thread = vptest::read_file(write_members(dir, data, 1, GzipLayout::members, 1, 0));
    EXPECT_EQ(vptest::gunzip(one_thread), data) << size << " bytes";
    for (unsigned threads : {2u, 3u}) {
      for (std::size_t piece : {std::size_t{0}, std::size_t{77777}, std::size_t{kMemberSize}}) {
        const std::string path = write_members(dir, data, 1, GzipLayout::members, threads, piece);
        EXPECT_EQ(read_with_voxpipe(path, data.size()), data) << size << " bytes";
        // The same members whatever the threads and pieces: each is compressed on its own.
        EXPECT_EQ(vptest::read_file(path), one_thread)
            << size << " bytes, " << threads << " threads, pieces of " << piece;
      }
    }
  }
}

TEST(MemberWriter, DefaultLevelIsNoLargerThanZlibLevel1OnMriLikeData) {
  // What nibabel writes: one member of zlib level 1 (Python's gzip), the reference the default
  // level and layout must not exceed; 16 MiB so that per-member overheads count as they do on a
  // volume. (BGZF's 64 KiB blocks lose about 1% to it on these data: a layout one asks for.)
  vptest::TempDir dir;
  const Bytes data = mri_like(8 * kMemberSize, 2);
  const std::size_t nibabel = vptest::gzip_compress(data, 1).size();
  const voxpipe::WriteOptions defaults;
  const std::size_t ours = vptest::read_file(write_members(dir, data, defaults.gzip_level,
                                                           defaults.gzip_layout, 2, 0)).size();
  EXPECT_LE(ours, nibabel);
  // Not trivially so: the data compress about as real scans do (2:1), not far better.
  EXPECT_GT(ours, data.size() * 2 / 5);
}

TEST(MemberWriter, IncompressibleBgzfBlocksStayWithin64KiBOverManyBatches) {
  vptest::TempDir dir;
  const Bytes data = vptest::random_bytes(70 * kBgzfBlockSize + 5, 4);  // three batches of 32
  for (int level : {1, 9}) {
    const std::string path = write_members(dir, data, level, GzipLayout::bgzf, 2, 0);
    EXPECT_EQ(vptest::gunzip(vptest::read_file(path)), data);
    const auto blocks = voxpipe::gz::read_member_table(InputFile(path));
    ASSERT_TRUE(blocks);
    EXPECT_EQ(blocks->size(), 71u + 1u);  // the data's blocks and the end marker
    for (const Member& m : *blocks) EXPECT_LE(m.size, 65536u);
  }
}

TEST(MemberWriter, AbandonedWriterLeavesNoFile) {
  // A caller that fails midway destroys the writer without finish(): nothing is committed.
  vptest::TempDir dir;
  const Bytes data = mri_like(5 * kMemberSize, 3);  // 10 MiB: two full batches, half of a third
  {
    AtomicOutputFile out(dir.file("x.nii.gz"));
    MemberWriter w(out, 6, GzipLayout::members, 2);
    w.write(vptest::as_bytes(data));
  }
  EXPECT_TRUE(dir.entries().empty());
}

}  // namespace
