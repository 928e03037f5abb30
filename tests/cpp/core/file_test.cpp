// Files: positional reads with short reads only at EOF, read_exact, atomic output that leaves
// nothing behind without commit, and error codes for missing paths.
#include "core/file.hpp"
#include "test_support.hpp"

namespace {

using voxpipe::ErrorCode;
using voxpipe::core::AtomicOutputFile;
using voxpipe::core::FileByteSource;
using voxpipe::core::InputFile;

TEST(InputFile, ReadAtReturnsShortCountOnlyAtEof) {
  vptest::TempDir dir;
  const auto data = vptest::random_bytes(100, 1);
  vptest::write_file(dir.file("a.bin"), data);
  InputFile f(dir.file("a.bin"));
  EXPECT_EQ(f.size(), 100u);
  EXPECT_EQ(f.path(), dir.file("a.bin"));

  std::vector<std::byte> buf(20);
  EXPECT_EQ(f.read_at(10, buf), 20u);
  EXPECT_EQ(std::memcmp(buf.data(), data.data() + 10, 20), 0);
  EXPECT_EQ(f.read_at(90, buf), 10u);
  EXPECT_EQ(std::memcmp(buf.data(), data.data() + 90, 10), 0);
  EXPECT_EQ(f.read_at(100, buf), 0u);
  EXPECT_EQ(f.read_at(1000, buf), 0u);
  EXPECT_EQ(f.read_at(5, std::span<std::byte>()), 0u);
}

TEST(InputFile, LargeReadIsComplete) {
  vptest::TempDir dir;
  const auto data = vptest::random_bytes(3 << 20, 2);
  vptest::write_file(dir.file("big.bin"), data);
  InputFile f(dir.file("big.bin"));
  std::vector<std::byte> buf(data.size() + 7);
  ASSERT_EQ(f.read_at(0, buf), data.size());
  EXPECT_EQ(std::memcmp(buf.data(), data.data(), data.size()), 0);
}

TEST(InputFile, MissingFileIsNotFound) {
  vptest::TempDir dir;
  auto err = vptest::catch_error([&] { InputFile f(dir.file("missing.nii")); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::not_found);
  EXPECT_EQ(err->path(), dir.file("missing.nii"));
  // A path through a regular file (ENOTDIR) is also "not found".
  vptest::write_file(dir.file("plain"), vptest::Bytes{1});
  EXPECT_VP_ERROR(InputFile f(dir.file("plain/x.nii")), ErrorCode::not_found);
}

TEST(InputFile, DirectoryIsAnIoError) {
  vptest::TempDir dir;
  EXPECT_VP_ERROR(InputFile f(dir.path()), ErrorCode::io);
}

TEST(FileByteSource, IsRandomAccessAndReadsLikeTheFile) {
  vptest::TempDir dir;
  const auto data = vptest::random_bytes(64, 3);
  vptest::write_file(dir.file("s.bin"), data);
  FileByteSource src(dir.file("s.bin"));
  EXPECT_TRUE(src.random_access());
  EXPECT_EQ(src.size(), 64u);
  std::vector<std::byte> buf(8);
  EXPECT_EQ(src.read_at(60, buf), 4u);
  EXPECT_EQ(std::memcmp(buf.data(), data.data() + 60, 4), 0);
}

TEST(ReadExact, ThrowsTruncatedNamingFieldAndOffset) {
  vptest::TempDir dir;
  vptest::write_file(dir.file("t.bin"), vptest::random_bytes(50, 4));
  FileByteSource src(dir.file("t.bin"));
  std::vector<std::byte> buf(20);
  voxpipe::core::read_exact(src, 30, buf, "data");  // exactly to the end: fine
  auto err = vptest::catch_error([&] { voxpipe::core::read_exact(src, 40, buf, "data"); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::truncated);
  EXPECT_EQ(err->field(), "data");
  EXPECT_EQ(err->path(), dir.file("t.bin"));
  ASSERT_TRUE(err->offset());
  EXPECT_EQ(*err->offset(), 40u);
}

TEST(AtomicOutputFile, NothingIsLeftWithoutCommit) {
  vptest::TempDir dir;
  {
    AtomicOutputFile out(dir.file("o.nii"));
    const auto data = vptest::random_bytes(1000, 5);
    out.write(vptest::as_bytes(data));
    EXPECT_EQ(dir.entries().size(), 1u);  // the temporary name only
    EXPECT_FALSE(vptest::fs::exists(dir.file("o.nii")));
  }
  EXPECT_TRUE(dir.entries().empty());
}

TEST(AtomicOutputFile, NothingIsLeftWhenAnExceptionUnwinds) {
  vptest::TempDir dir;
  try {
    AtomicOutputFile out(dir.file("o.nii"));
    out.write(vptest::as_bytes(vptest::Bytes(10, 1)));
    throw std::runtime_error("producer failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_TRUE(dir.entries().empty());
}

TEST(AtomicOutputFile, CommitPublishesExactlyTheBytesWritten) {
  vptest::TempDir dir;
  const auto a = vptest::random_bytes(3000, 6), b = vptest::random_bytes(17, 7);
  {
    AtomicOutputFile out(dir.file("o.nii"));
    out.write(vptest::as_bytes(a));
    out.write(vptest::as_bytes(b));
    out.write({});
    out.commit();
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"o.nii"});
  EXPECT_EQ(vptest::read_file(dir.file("o.nii")), vptest::concat({a, b}));
}

TEST(AtomicOutputFile, CommitReplacesAnExistingFileAndAbortKeepsIt) {
  vptest::TempDir dir;
  vptest::write_file(dir.file("o.nii"), vptest::Bytes{1, 2, 3});
  {
    AtomicOutputFile out(dir.file("o.nii"));
    out.write(vptest::as_bytes(vptest::Bytes{9, 9}));
  }  // no commit: the old file stays untouched
  EXPECT_EQ(vptest::read_file(dir.file("o.nii")), (vptest::Bytes{1, 2, 3}));
  {
    AtomicOutputFile out(dir.file("o.nii"));
    out.write(vptest::as_bytes(vptest::Bytes{7}));
    out.commit();
  }
  EXPECT_EQ(vptest::read_file(dir.file("o.nii")), (vptest::Bytes{7}));
  EXPECT_EQ(dir.entries().size(), 1u);
}

TEST(AtomicOutputFile, MissingDirectoryIsNotFound) {
  vptest::TempDir dir;
  EXPECT_VP_ERROR(AtomicOutputFile out(dir.file("no/such/dir/o.nii")), ErrorCode::not_found);
}

TEST(AtomicOutputFile, TwoWritersOfOneNameDoNotCollide) {
  vptest::TempDir dir;
  AtomicOutputFile a(dir.file("o.nii")), b(dir.file("o.nii"));
  a.write(vptest::as_bytes(vptest::Bytes{1}));
  b.write(vptest::as_bytes(vptest::Bytes{2}));
  a.commit();
  b.commit();
  EXPECT_EQ(vptest::read_file(dir.file("o.nii")), (vptest::Bytes{2}));
}

}  // namespace
