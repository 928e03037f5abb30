// voxpipe dcm2nii called as a function on hand-built series: the NIfTI written (shape, dtype,
// scale factors, affine, qform, values in position order) and its JSON sidecar, float32 when the
// rescale varies, name clashes, skipped series and the exit codes. tests/python/test_cli_dcm2nii.py
// compares with dcm2niix on pydicom-written series.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "commands.hpp"
#include "dicom/dicom_writer.hpp"
#include "nifti/nifti_support.hpp"

namespace {

using voxpipe::DType;
using vptest::DBytes;
using vptest::DicomWriter;

struct Result {
  int code;
  std::string out, err;
};

Result run(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = voxpipe::cli::run(args, out, err);
  return {code, out.str(), err.str()};
}

std::string even(std::string s, char pad = ' ') {
  if (s.size() % 2) s.push_back(pad);
  return s;
}

struct Slice {
  std::string series_uid = "1.2.3.4.5";
  int series_number = 3;
  std::string description = "T1 test";
  int instance = 1;
  double z = 0;  // ImagePositionPatient (10, 20 + tilt_step * z, z), axial
  double tilt_step = 0;
  std::string slope = "2", intercept = "-100";
  std::vector<std::int16_t> values;  // rows (3) x columns (4), C order
};

// An axial 3x4 int16 slice, explicit VR little endian, with the elements a series needs.
DBytes slice_file(const Slice& s) {
  DBytes file = vptest::part10_head(vptest::kExplicitLE);
  DicomWriter w(false, false, file.size());
  w.text(0x00080018, "UI", even("1.2.3.4.5.6." + s.series_uid.substr(8) + "." + std::to_string(s.instance), '\0'));
  w.text(0x00080060, "CS", even("MR"));
  w.text(0x0008103E, "LO", even(s.description));
  w.text(0x00180050, "DS", even("2.5"));
  w.text(0x00180080, "DS", even("2000"));
  w.text(0x00180081, "DS", even("5"));
  w.text(0x0020000E, "UI", even(s.series_uid, '\0'));
  w.text(0x00200011, "IS", even(std::to_string(s.series_number)));
  w.text(0x00200013, "IS", even(std::to_string(s.instance)));
  std::ostringstream pos;
  pos << "10\\" << 20 + s.tilt_step * s.z << "\\" << s.z;
  w.text(0x00200032, "DS", even(pos.str()));
  w.text(0x00200037, "DS", even("1\\0\\0\\0\\1\\0"));
  w.us(0x00280002, 1);
  w.text(0x00280004, "CS", even("MONOCHROME2"));
  w.us(0x00280010, 3);
  w.us(0x00280011, 4);
  w.text(0x00280030, "DS", even("0.5\\0.75"));  // row spacing 0.5, column spacing 0.75
  w.us(0x00280100, 16);
  w.us(0x00280101, 16);
  w.us(0x00280102, 15);
  w.us(0x00280103, 1);
  w.text(0x00281052, "DS", even(s.intercept));
  w.text(0x00281053, "DS", even(s.slope));
  DBytes pixel;
  for (std::int16_t v : s.values) {
    pixel.push_back(static_cast<std::uint8_t>(v & 0xFF));
    pixel.push_back(static_cast<std::uint8_t>((v >> 8) & 0xFF));
  }
  w.element(0x7FE00010, "OW", pixel);
  file.insert(file.end(), w.bytes().begin(), w.bytes().end());
  return file;
}

// Writes `n` slices at z = 2.5 k (k = 0..n-1, files in reverse order) into `dir`; slice k
// holds 100 k + i for voxel i. Returns the values in voxpipe's order (column fastest).
std::vector<std::int16_t> write_series(const std::string& dir, Slice proto, int n,
                                       const std::vector<int>& skip = {}) {
  std::filesystem::create_directories(dir);
  std::vector<std::int16_t> all;
  for (int k = 0; k < n; ++k) {
    Slice s = proto;
    s.instance = k + 1;
    s.z = 2.5 * k;
    for (int i = 0; i < 12; ++i) s.values.push_back(static_cast<std::int16_t>(100 * k + i - 50));
    all.insert(all.end(), s.values.begin(), s.values.end());
    if (std::find(skip.begin(), skip.end(), k) != skip.end()) continue;
    vptest::write_file(dir + "/f" + std::to_string(n - k) + ".dcm", slice_file(s));
  }
  return all;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(Dcm2nii, WritesStoredValuesWithScaleFactorsAndTheSeriesAffine) {
  vptest::TempDir dir;
  const auto values = write_series(dir.file("in"), Slice{}, 4);
  const auto r = run({"dcm2nii", dir.file("in"), "-o", dir.file("out")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  EXPECT_NE(r.out.find("wrote " + dir.file("out") + "/3_T1_test.nii.gz (4x3x4 int16, scl_slope 2, scl_inter -100)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("1 of 1 series written, 4 files read"), std::string::npos) << r.out;

  const auto img = voxpipe::open_nifti(dir.file("out/3_T1_test.nii.gz"));
  EXPECT_EQ(img.shape, (std::vector<std::int64_t>{4, 3, 4}));
  EXPECT_EQ(img.dtype, DType::i16);
  EXPECT_EQ(img.scaling.slope, 2.0);
  EXPECT_EQ(img.scaling.inter, -100.0);
  EXPECT_EQ(img.header.sform_code, 1);
  EXPECT_EQ(img.header.qform_code, 1);
  EXPECT_EQ(img.header.xyzt_units, 10);
  // LPS -> RAS: x and y negated; i along the row (column spacing 0.75), j down the columns (0.5).
  const std::array<double, 16> expected{-0.75, 0, 0, -10, 0, -0.5, 0, -20, 0, 0, 2.5, 0, 0, 0, 0, 1};
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(img.affine[i], expected[i], 1e-6) << i;
  const auto qform = voxpipe::nifti_qform(img.header, "q");
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(qform[i], expected[i], 1e-6) << i;
  EXPECT_EQ(vptest::read_as<std::int16_t>(img, {}, {.type = DType::i16, .apply_scaling = false}), values);
  EXPECT_STREQ(img.header.descrip.data(), "voxpipe dcm2nii TE=5 TR=2000");

  const std::string json = read_text(dir.file("out/3_T1_test.json"));
  for (const char* item : {"\"EchoTime\": 0.005", "\"RepetitionTime\": 2,", "\"SeriesNumber\": 3",
                           "\"SeriesDescription\": \"T1 test\"", "\"Dimensions\": [4, 3, 4]",
                           "\"RescaleSlope\": 2", "\"RescaleIntercept\": -100",
                           "\"PixelSpacing\": [0.5, 0.75]", "\"ConversionSoftware\": \"voxpipe\""})
    EXPECT_NE(json.find(item), std::string::npos) << item << "\n" << json;
  EXPECT_EQ(json.find("Warnings"), std::string::npos) << json;
}

TEST(Dcm2nii, VaryingRescaleIsWrittenAsFloat32WithEachImagesRescale) {
  vptest::TempDir dir;
  Slice proto;
  write_series(dir.file("in"), proto, 2);
  // A third slice with another slope.
  Slice odd = proto;
  odd.instance = 3;
  odd.z = 5;
  odd.slope = "0.5";
  for (int i = 0; i < 12; ++i) odd.values.push_back(static_cast<std::int16_t>(i * 4));
  vptest::write_file(dir.file("in/odd.dcm"), slice_file(odd));
  const auto r = run({"dcm2nii", "--uncompressed", dir.file("in"), dir.file("out")});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto img = voxpipe::open_nifti(dir.file("out/3_T1_test.nii"));
  EXPECT_EQ(img.dtype, DType::f32);
  EXPECT_FALSE(img.scaling.active());
  const auto v = vptest::read_as<float>(img, {}, {.type = DType::f32});
  ASSERT_EQ(v.size(), 36u);
  EXPECT_EQ(v[0], -50 * 2 - 100);
  EXPECT_EQ(v[12 + 5], (100 + 5 - 50) * 2 - 100);
  EXPECT_EQ(v[24 + 7], 7 * 4 * 0.5 - 100);
  EXPECT_EQ(read_text(dir.file("out/3_T1_test.json")).find("RescaleSlope"), std::string::npos);
}

TEST(Dcm2nii, NameClashesGetLetterSuffixes) {
  vptest::TempDir dir;
  Slice a, b;
  b.series_uid = "1.2.3.4.6";
  write_series(dir.file("in/a"), a, 2);
  write_series(dir.file("in/b"), b, 2);
  const auto r = run({"dcm2nii", dir.file("in"), "-o", dir.file("out"), "-f", "x%s_%d"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("out")))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"x3_T1_test.json", "x3_T1_test.nii.gz",
                                             "x3_T1_test_a.json", "x3_T1_test_a.nii.gz"}));
}

TEST(Dcm2nii, SeriesWithAMissingSliceIsSkippedWithExitCode11) {
  vptest::TempDir dir;
  Slice gap;
  gap.series_uid = "1.2.3.4.7";
  gap.series_number = 4;
  gap.description = "gap";
  write_series(dir.file("in/good"), Slice{}, 3);
  write_series(dir.file("in/gap"), gap, 5, {2});
  vptest::write_file(dir.file("in/notes.txt"), DBytes{'h', 'i'});
  const auto r = run({"dcm2nii", dir.file("in"), "-o", dir.file("out"), "-v"});
  EXPECT_EQ(r.code, 11) << r.err;
  EXPECT_NE(r.err.find("skipped series 4 \"gap\" [1.2.3.4.7]: the slice spacing varies"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("skipped file " + dir.file("in/notes.txt")), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("1 of 2 series written (1 skipped)"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(dir.file("out/3_T1_test.nii.gz")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("out/4_gap.nii.gz")));
}

TEST(Dcm2nii, GantryTiltKeepsShearInTheSformAndDropsTheQform) {
  vptest::TempDir dir;
  Slice tilted;
  tilted.tilt_step = 0.2;  // 0.5 mm along y per 2.5 mm slice: atan(0.2) = 11.3 degrees
  write_series(dir.file("in"), tilted, 3);
  const auto r = run({"dcm2nii", dir.file("in"), "-o", dir.file("out")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("warning: qform_code 0"), std::string::npos) << r.out;
  const auto img = voxpipe::open_nifti(dir.file("out/3_T1_test.nii.gz"));
  EXPECT_EQ(img.header.qform_code, 0);
  EXPECT_EQ(img.header.sform_code, 1);
  EXPECT_NEAR(img.affine[4 * 1 + 2], -0.5, 1e-6);  // RAS y of the slice step: the shear
  EXPECT_NEAR(img.affine[4 * 2 + 2], 2.5, 1e-6);
  const std::string json = read_text(dir.file("out/3_T1_test.json"));
  EXPECT_NE(json.find("\"GantryTiltDegrees\": 11.3"), std::string::npos) << json;
  EXPECT_NE(json.find("\"Warnings\": [\"the slices step off their normal"), std::string::npos) << json;
}

TEST(Dcm2nii, UsageAndInputErrorsHaveTheirExitCodes) {
  vptest::TempDir dir;
  EXPECT_EQ(run({"dcm2nii"}).code, 2);
  EXPECT_EQ(run({"dcm2nii", dir.path()}).code, 2);  // no OUT_DIR
  EXPECT_EQ(run({"dcm2nii", dir.path(), "-o", dir.file("o"), "-f", "%!"}).code, 2);
  EXPECT_EQ(run({"dcm2nii", dir.file("missing"), "-o", dir.file("o")}).code, 3);
  vptest::write_file(dir.file("plain"), DBytes{'x'});
  EXPECT_EQ(run({"dcm2nii", dir.path(), "-o", dir.file("plain/sub")}).code, 4);
  // No DICOM image anywhere: format.
  EXPECT_EQ(run({"dcm2nii", dir.file("plain"), "-o", dir.file("o")}).code, 5);
  const auto help = run({"dcm2nii", "--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("usage: voxpipe dcm2nii"), std::string::npos);
}

TEST(Dcm2nii, ExistingFilesAreKeptUnlessOverwrite) {
  vptest::TempDir dir;
  write_series(dir.file("in"), Slice{}, 2);
  ASSERT_EQ(run({"dcm2nii", dir.file("in"), dir.file("out")}).code, 0);  // OUT_DIR new: the old form
  const auto again = run({"dcm2nii", dir.file("in"), "-o", dir.file("out")});
  EXPECT_EQ(again.code, 11);
  EXPECT_NE(again.err.find("exists"), std::string::npos) << again.err;
  EXPECT_EQ(run({"dcm2nii", "--overwrite", dir.file("in"), "-o", dir.file("out")}).code, 0);
}

TEST(Dcm2nii, AnExistingLastPositionalIsRefusedWithoutDashO) {
  // `voxpipe dcm2nii A B` with B a DICOM folder would write into B and never convert it.
  vptest::TempDir dir;
  write_series(dir.file("a"), Slice{}, 2);
  Slice other;
  other.series_uid = "1.2.3.4.8";
  write_series(dir.file("b"), other, 2);
  const auto r = run({"dcm2nii", dir.file("a"), dir.file("b")});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("exists: name the output folder with -o"), std::string::npos) << r.err;
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.file("b")), {}), 2);  // untouched
  // With -o, both are inputs.
  const auto both = run({"dcm2nii", dir.file("a"), dir.file("b"), "-o", dir.file("out")});
  ASSERT_EQ(both.code, 0) << both.err;
  EXPECT_NE(both.out.find("2 of 2 series written"), std::string::npos) << both.out;
}

}  // namespace
