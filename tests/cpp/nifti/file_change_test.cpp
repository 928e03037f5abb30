// Files changed under an opened image: a data file rewritten in place or replaced (renamed over)
// since open_nifti is Error(io) "changed since it was opened" naming it, on every read path
// (read_nifti_data, a kept NiftiReader, check_data_size), never the new bytes under the old
// header; a file that has not changed reads as before.
#include <fcntl.h>
#include <sys/stat.h>

#include <filesystem>

#include "core/file.hpp"
#include "nifti/nifti_support.hpp"

namespace {

using voxpipe::DType;
using voxpipe::ErrorCode;
using voxpipe::NiftiHeader;
using voxpipe::OutputSpec;

const std::vector<std::int64_t> kShape{6, 5, 4, 3};

std::vector<std::int16_t> values(int seed) {
  std::vector<std::int16_t> v(6 * 5 * 4 * 3);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int16_t>(i * 7 + seed * 1000);
  return v;
}

NiftiHeader header(double slope) {
  NiftiHeader h = vptest::make_header(1, DType::i16, kShape);
  h.scl_slope = slope;
  h.scl_inter = 1;
  return h;
}

// Moves the file's modification time a second on: a rewrite within one tick of the file
// system's clock is not seen (voxpipe/file_identity.hpp), and tests do not wait for one.
void touch_later(const std::string& path) {
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  timespec times[2] = {st.st_atim, st.st_mtim};
  times[1].tv_sec += 1;
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
}

// The same bytes of the image at `path` rewritten in place with `other`'s (the same size).
void rewrite_in_place(const std::string& path, const std::string& other) {
  const vptest::Bytes bytes = vptest::read_file(other);
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  ::close(fd);
  touch_later(path);
}

// The data file of the image at `path` (the .img of a .hdr).
std::string data_of(const std::string& path) {
  return path.ends_with(".hdr") ? path.substr(0, path.size() - 4) + ".img" : path;
}

void expect_changed(const std::function<void()>& f, const std::string& path, const char* what) {
  auto err = vptest::catch_error(f);
  ASSERT_TRUE(err) << what;
  EXPECT_EQ(err->code(), ErrorCode::io) << what;
  EXPECT_EQ(err->path(), path) << what;
  EXPECT_NE(std::string(err->what()).find("changed since it was opened"), std::string::npos)
      << err->what();
}

std::vector<double> read_all(const voxpipe::NiftiImage& img) {
  return vptest::read_as<double>(img, {}, OutputSpec{DType::f64});
}

std::vector<double> read_all(voxpipe::NiftiReader& reader) {
  std::vector<double> out(6 * 5 * 4 * 3);
  reader.read({}, OutputSpec{DType::f64}, std::as_writable_bytes(std::span(out)));
  return out;
}

std::vector<double> scaled(const std::vector<std::int16_t>& v, double slope) {
  std::vector<double> out;
  for (auto x : v) out.push_back(x * slope + 1);
  return out;
}

class FileChange : public ::testing::TestWithParam<const char*> {
 protected:
  std::string name() const { return std::string("img") + GetParam(); }
  std::string write(const std::string& n, int seed, double slope) {
    return vptest::write_image(dir_, n, header(slope), values(seed));
  }
  vptest::TempDir dir_;
};

TEST_P(FileChange, ReadsOfAFileRewrittenInPlaceFail) {
  const std::string path = write(name(), 0, 0.5);
  const auto img = voxpipe::open_nifti(path);
  voxpipe::NiftiReader kept(img);
  EXPECT_EQ(read_all(img), scaled(values(0), 0.5));
  EXPECT_EQ(read_all(kept), scaled(values(0), 0.5));
  const std::string other = write("other" + std::string(GetParam()), 1, 2.0);
  if (other != data_of(other)) rewrite_in_place(path, other);
  rewrite_in_place(data_of(path), data_of(other));
  const std::string data = data_of(path);
  expect_changed([&] { read_all(img); }, data, "read_nifti_data");
  expect_changed([&] { read_all(kept); }, data, "kept reader");
  expect_changed([&] { voxpipe::check_data_size(img); }, data, "check_data_size");
  // Opened again: the new file.
  EXPECT_EQ(read_all(voxpipe::open_nifti(path)), scaled(values(1), 2.0));
}

TEST_P(FileChange, ReadsOfAFileRenamedOverFail) {
  const std::string path = write(name(), 0, 0.5);
  const auto img = voxpipe::open_nifti(path);
  voxpipe::NiftiReader kept(img);
  EXPECT_EQ(read_all(kept), scaled(values(0), 0.5));
  const std::string other = write("new" + std::string(GetParam()), 1, 2.0);
  const std::string data = data_of(path);
  std::filesystem::rename(data_of(other), data);
  if (other != data_of(other)) std::filesystem::rename(other, path);
  // The kept reader's descriptor still reads the old file, but the path names another: refused.
  expect_changed([&] { read_all(kept); }, data, "kept reader");
  expect_changed([&] { read_all(img); }, data, "read_nifti_data");
  expect_changed([&] { voxpipe::NiftiReader{img}; }, data, "a new reader");
  std::filesystem::remove(data);
  EXPECT_VP_ERROR(read_all(img), ErrorCode::not_found);
}

TEST_P(FileChange, AKeptReaderReadsItsFileRenamedAwayOrDeleted) {
  // As nibabel's keep_file_open=True: the descriptor still reads the file opened, unchanged.
  const std::string path = write(name(), 0, 0.5);
  const auto img = voxpipe::open_nifti(path);
  voxpipe::NiftiReader kept(img), deleted(img);
  std::filesystem::rename(data_of(path), dir_.file("moved"));
  EXPECT_EQ(read_all(kept), scaled(values(0), 0.5));
  EXPECT_VP_ERROR(read_all(img), ErrorCode::not_found);
  std::filesystem::remove(dir_.file("moved"));
  EXPECT_EQ(read_all(deleted), scaled(values(0), 0.5));
}

TEST_P(FileChange, AnUnchangedFileReadsAgainAndAgain) {
  const std::string path = write(name(), 0, 0.5);
  const auto img = voxpipe::open_nifti(path);
  voxpipe::NiftiReader kept(img);
  // Read (atime) and renamed away and back: the same file, unchanged.
  std::filesystem::rename(data_of(path), dir_.file("moved"));
  std::filesystem::rename(dir_.file("moved"), data_of(path));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(read_all(kept), scaled(values(0), 0.5));
    EXPECT_EQ(read_all(img), scaled(values(0), 0.5));
  }
}

INSTANTIATE_TEST_SUITE_P(Names, FileChange, ::testing::Values(".nii", ".nii.gz", ".hdr"),
                         [](const auto& info) {
                           std::string s = info.param + 1;
                           for (char& c : s)
                             if (c == '.') c = '_';
                           return s;
                         });

TEST(FileChange, APairReadsItsDataFileAsOpened) {
  vptest::TempDir dir;
  const std::string hdr = vptest::write_image(dir, "p.hdr", header(0.5), values(0));
  const std::string img_path = dir.file("p.img");
  const auto img = voxpipe::open_nifti(hdr);
  EXPECT_EQ(img.data_identity, voxpipe::path_identity(img_path));
  EXPECT_EQ(img.header_identity, voxpipe::path_identity(hdr));
  // The header is read at open only: a new .hdr beside the same .img changes nothing read.
  vptest::write_image(dir, "q.hdr", header(3.0), values(0));
  std::filesystem::rename(dir.file("q.hdr"), hdr);
  EXPECT_EQ(read_all(img), scaled(values(0), 0.5));
  // An .img missing at open: not found while it is missing, refused once one appears.
  const vptest::Bytes data = vptest::read_file(img_path);
  std::filesystem::remove(img_path);
  const auto without = voxpipe::open_nifti(hdr);
  EXPECT_FALSE(without.data_identity);
  EXPECT_VP_ERROR(read_all(without), ErrorCode::not_found);
  vptest::write_file(img_path, data);
  expect_changed([&] { read_all(without); }, img_path, "an .img that appeared");
}

TEST(FileChange, AnImageDescribedByHandIsReadAsItsFilesAre) {
  // No identity recorded (made by hand, not by open_nifti): nothing to compare with.
  vptest::TempDir dir;
  const std::string path = vptest::write_image(dir, "h.nii", header(0.5), values(0));
  auto img = voxpipe::open_nifti(path);
  img.header_identity.reset();
  img.data_identity.reset();
  rewrite_in_place(path, vptest::write_image(dir, "o.nii", header(0.5), values(1)));
  EXPECT_EQ(read_all(img), scaled(values(1), 0.5));
}

}  // namespace
