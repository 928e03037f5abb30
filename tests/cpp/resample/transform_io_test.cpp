// The transform readers on hand-computed values and on numbers nitransforms 25.1.0 computed for
// the same files (pasted below); malformed files must fail with Error naming the line.
// (tests/python/test_transforms.py compares against nitransforms itself, on files it writes.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "resample/transform_io.hpp"
#include "test_support.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"
#include "voxpipe/transform.hpp"

namespace {

using namespace voxpipe;
using vptest::TempDir;

void write_text(const std::string& path, const std::string& text) {
  vptest::write_file(path, std::span(reinterpret_cast<const std::uint8_t*>(text.data()),
                                     text.size()));
}

// Equal within `rel` of the matrix's largest entry.
void expect_matrix_near(const Matrix4& got, const Matrix4& want, double rel = 1e-13) {
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(got[i], want[i], rel * scale) << "element " << i;
}

std::string error_text(const std::optional<Error>& e) { return e ? e->what() : "(no error)"; }

// An oblique reference with a positive determinant (FSL flips its x) and an oblique moving
// image of another shape with a negative one; values from nitransforms 25.1.0:
//   load('flirt.mat', fmt='fsl', reference=ref, moving=mov).matrix
constexpr const char* kFlirt =
    "1.02 0.05 -0.03 2.5\n-0.04 0.98 0.07 -3.25\n0.02 -0.06 1.01 4.125\n0 0 0 1\n";
const Grid kRef{{20, 24, 18},
                {1.9875213383310086, -0.24927162718034696, -0.149937507812035, -20.5,
                 0.1759273443534165, 2.440404014880785, -0.5952631375921833, 30.25,
                 0.1371440818543444, 0.481966700132496, 2.936525249470031, -12.0, 0, 0, 0, 1}};
const Grid kMov{{30, 16, 22},
                {-1.4535922299317587, 0.24554811045383101, 0.29887626494719843, 40.0,
                 0.28665169614581165, 1.2254069625915285, -0.09883591414823306, -35.5,
                 0.23430841679023387, 0.024164053566347737, 1.9750707431192673, 10.75, 0, 0, 0,
                 1}};

constexpr const char* kCentred =
    "#Insight Transform File V1.0\n"
    "#Transform 0\n"
    "Transform: AffineTransform_double_3_3\n"
    "Parameters: 1 0.5 0 0 2 0 0.25 0 1 10 20 30\n"
    "FixedParameters: 1 2 4\n";

TEST(ItkText, CentreGoesIntoTheOffsetAndLpsBecomesRas) {
  // LPS: offset = t + c - M c = (10 + 1 - 2, 20 + 2 - 4, 30 + 4 - 4.25); RAS flips the signs
  // of rows and columns 0 and 1. nitransforms' load(fmt='itk').matrix is the same.
  const auto m = resample::parse_itk_text(kCentred, "c.tfm");
  ASSERT_EQ(m.size(), 1u);
  const Matrix4 want{1, 0.5, 0, -9, 0, 2, 0, -18, -0.25, 0, 1, 29.75, 0, 0, 0, 1};
  EXPECT_EQ(m[0], want);
}

TEST(ItkText, SeveralTransformsInFileOrder) {
  const std::string text =
      "#Insight Transform File V1.0\n#Transform 0\nTransform: AffineTransform_float_3_3\n"
      "Parameters: 1 0 0 0 1 0 0 0 1 1 2 3\nFixedParameters: 0 0 0\n\n"
      "#Transform 1\nTransform: MatrixOffsetTransformBase_double_3_3\n"
      "Parameters: 2 0 0 0 2 0 0 0 2 0 0 -1\nFixedParameters: 0 0 0\n";
  const auto m = resample::parse_itk_text(text, "b.tfm");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0], (Matrix4{1, 0, 0, -1, 0, 1, 0, -2, 0, 0, 1, 3, 0, 0, 0, 1}));
  EXPECT_EQ(m[1], (Matrix4{2, 0, 0, 0, 0, 2, 0, 0, 0, 0, 2, -1, 0, 0, 0, 1}));
}

TEST(ItkText, FloatTransformsAreRoundedToFloat32DoubleOnesAreNot) {
  // nitransforms writes "%g" values and AffineTransform_float_3_3, and reads them as float32:
  // 0.1 becomes 0.100000001490116..., as in its .matrix.
  const std::string f =
      "#Insight Transform File V1.0\n#Transform 0\nTransform: AffineTransform_float_3_3\n"
      "Parameters: 0.1 0 0 0 1 0 0 0 1 0 0 0\nFixedParameters: 0 0 0\n";
  std::string d = f;
  d.replace(d.find("float"), 5, "double");
  EXPECT_EQ(resample::parse_itk_text(f, "f.tfm")[0][0], static_cast<double>(0.1f));
  EXPECT_EQ(resample::parse_itk_text(d, "d.tfm")[0][0], 0.1);
}

TEST(ItkText, CompositeHeaderBlockIsSkipped) {
  const std::string text =
      "#Insight Transform File V1.0\n#Transform 0\nTransform: CompositeTransform_double_3_3\n"
      "#Transform 1\nTransform: AffineTransform_double_3_3\n"
      "Parameters: 1 0 0 0 1 0 0 0 1 1 2 3\nFixedParameters: 0 0 0\n";
  const auto m = resample::parse_itk_text(text, "comp.tfm");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0], (Matrix4{1, 0, 0, -1, 0, 1, 0, -2, 0, 0, 1, 3, 0, 0, 0, 1}));
}

TEST(ItkText, RigidTypesMatchTheirRotationMatrices) {
  // A quarter turn about z with translation (1, 2, 3), as Euler angles and as a versor: in LPS
  // [[0 -1 0 1] [1 0 0 2] [0 0 1 3]], in RAS rows/columns 0 and 1 change sign.
  const Matrix4 want{0, -1, 0, -1, 1, 0, 0, -2, 0, 0, 1, 3, 0, 0, 0, 1};
  const std::string euler =
      "#Insight Transform File V1.0\n#Transform 0\nTransform: Euler3DTransform_double_3_3\n"
      "Parameters: 0 0 1.5707963267948966 1 2 3\nFixedParameters: 0 0 0 0\n";
  const std::string versor =
      "#Insight Transform File V1.0\n#Transform 0\nTransform: VersorRigid3DTransform_double_3_3\n"
      "Parameters: 0 0 0.7071067811865476 1 2 3\nFixedParameters: 0 0 0\n";
  expect_matrix_near(resample::parse_itk_text(euler, "e.tfm")[0], want, 1e-15);
  expect_matrix_near(resample::parse_itk_text(versor, "v.tfm")[0], want, 1e-15);
  // Euler order: ZXY by default, ZYX when the 4th fixed value says so; a quarter turn about x
  // then y differs between the two.
  const std::string xy0 =
      "#Insight Transform File V1.0\nTransform: Euler3DTransform_double_3_3\n"
      "Parameters: 1.5707963267948966 1.5707963267948966 0 0 0 0\nFixedParameters: 0 0 0 0\n";
  std::string xy1 = xy0;
  xy1.replace(xy1.rfind("0 0 0 0"), 7, "0 0 0 1");
  const Matrix4 a = resample::parse_itk_text(xy0, "e0.tfm")[0];
  const Matrix4 b = resample::parse_itk_text(xy1, "e1.tfm")[0];
  // Rx Ry (ZXY, z = 0) in LPS is [[0 0 1] [1 0 0] [0 1 0]]; Ry Rx (ZYX) is [[0 1 0] [0 0 -1]
  // [-1 0 0]].
  expect_matrix_near(a, Matrix4{0, 0, -1, 0, 1, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0, 1}, 1e-15);
  expect_matrix_near(b, Matrix4{0, 1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1}, 1e-15);
}

TEST(ItkText, MalformedFilesNameTheLine) {
  const auto err = [](const std::string& text) {
    return vptest::catch_error([&] { resample::parse_itk_text(text, "bad.tfm"); });
  };
  const std::string head = "#Insight Transform File V1.0\n#Transform 0\n";
  struct Case {
    std::string text;
    ErrorCode code;
    std::string needle;
  };
  const std::vector<Case> cases{
      {"#Insight Transform File V2.0\n", ErrorCode::format, "line 1: header"},
      {head + "Transform: AffineTransform_double_3_3\nParameters: 1 0 0 0 1 0 0 0 1 0 0\n"
              "FixedParameters: 0 0 0\n",
       ErrorCode::format, "line 4: Parameters: expected 12 values"},
      {head + "Transform: AffineTransform_double_3_3\nParameters: 1 0 0 0 1 0 0 0 1 0 0 x\n"
              "FixedParameters: 0 0 0\n",
       ErrorCode::format, "line 4: Parameters: expected a finite number, but found 'x'"},
      {head + "Transform: AffineTransform_double_3_3\nParameters: 1 0 0 0 1 0 0 0 1 0 0 nan\n"
              "FixedParameters: 0 0 0\n",
       ErrorCode::format, "line 4: Parameters"},
      {head + "Transform: AffineTransform_double_3_3\nParameters: 1 0 0 0 1 0 0 0 1 0 0 0\n",
       ErrorCode::format, "line 3: FixedParameters"},
      {head + "Transform: AffineTransform_double_3_3\nFixedParameters: 0 0 0\n",
       ErrorCode::format, "line 3: Parameters"},
      {head + "Parameters: 1 0 0 0 1 0 0 0 1 0 0 0\n", ErrorCode::format, "line 3: Parameters"},
      {head + "Transform: BSplineTransform_double_3_3\nParameters: 1\nFixedParameters: 0\n",
       ErrorCode::unsupported, "line 3: Transform"},
      {head + "Transform: AffineTransform_double_2_2\nParameters: 1 0 0 1 0 0\n",
       ErrorCode::unsupported, "line 3: Transform"},
      {head + "Transform: AffineTransform_double_3_3\nParameters: 1 0 0 0 1 0 0 0 1 0 0 0\n"
              "FixedParameters: 0 0 0\nScales: 1\n",
       ErrorCode::format, "line 6: expected Transform, Parameters or FixedParameters"},
      {head + "Transform: AffineTransform_double_3_3\nParameters: 1e10 0 0 0 1 0 0 0 1 0 0 0\n"
              "FixedParameters: 1e300 0 0\n",
       ErrorCode::format, "line 3: Transform: expected finite values"},
      {head, ErrorCode::format, "line 2: expected at least one linear transform"},
      {"", ErrorCode::format, "line 1: header"},
  };
  for (const auto& c : cases) {
    const auto e = err(c.text);
    ASSERT_TRUE(e) << c.text;
    EXPECT_EQ(e->code(), c.code) << e->what();
    EXPECT_NE(std::string(e->what()).find("bad.tfm: " + c.needle), std::string::npos)
        << e->what() << "\n  expected: " << c.needle;
  }
}

// A MATLAB v4 variable as ITK's vnl_matlab_write and scipy's savemat(format='4') write it: a
// column vector of doubles or floats, in either byte order.
void append_matlab(std::string& out, const std::string& name, const std::vector<double>& v,
                   bool single, bool big) {
  const auto put = [&](const void* p, std::size_t n) {
    const auto* b = static_cast<const char*>(p);
    for (std::size_t i = 0; i < n; ++i) out += b[big != vptest::kNativeBig ? n - 1 - i : i];
  };
  const std::int32_t header[5] = {(big ? 1000 : 0) + (single ? 10 : 0),
                                  static_cast<std::int32_t>(v.size()), 1, 0,
                                  static_cast<std::int32_t>(name.size() + 1)};
  for (auto h : header) put(&h, 4);
  out += name;
  out += '\0';
  for (double x : v) {
    const float f = static_cast<float>(x);
    single ? put(&f, 4) : put(&x, 8);
  }
}

TEST(ItkMatlab, BinaryFileEqualsItsTextForm) {
  const std::vector<double> params{1, 0.5, 0, 0, 2, 0, 0.25, 0, 1, 10, 20, 30};
  const Matrix4 want{1, 0.5, 0, -9, 0, 2, 0, -18, -0.25, 0, 1, 29.75, 0, 0, 0, 1};
  for (bool big : {false, true}) {
    std::string mat;
    append_matlab(mat, "AffineTransform_double_3_3", params, false, big);
    append_matlab(mat, "fixed", {1, 2, 4}, true, !big);
    EXPECT_EQ(resample::classify_transform_text(mat), resample::TransformText::itk_matlab);
    EXPECT_EQ(resample::parse_itk_matlab(mat, "a.mat"), want);
    EXPECT_EQ(resample::parse_affines_text(mat, "a.mat", {}), std::vector<Matrix4>{want});
  }
  // antsRegistration's 0GenericAffine.mat: a float transform whose values are stored as
  // doubles: ITK holds the parameters as float32, the centre as double.
  std::string ants;
  append_matlab(ants, "AffineTransform_float_3_3", {0.1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0}, false,
                false);
  append_matlab(ants, "fixed", {0.1, 0, 0}, false, false);
  const Matrix4 m = resample::parse_itk_matlab(ants, "ants.mat");
  EXPECT_EQ(m[0], static_cast<double>(0.1f));
  EXPECT_EQ(m[3], -(0.1 - static_cast<double>(0.1f) * 0.1));  // -(c - M c), x flipped
}

TEST(ItkMatlab, MalformedFilesAreErrors) {
  std::string good;
  append_matlab(good, "AffineTransform_double_3_3", std::vector<double>(12, 1.0), false, false);
  append_matlab(good, "fixed", {0, 0, 0}, false, false);
  for (std::size_t cut = 4; cut < good.size(); cut += 7)
    EXPECT_VP_ERROR(resample::parse_itk_matlab(good.substr(0, cut), "cut.mat"),
                    ErrorCode::truncated);
  std::string only_fixed;
  append_matlab(only_fixed, "fixed", {0, 0, 0}, false, false);
  EXPECT_VP_ERROR(resample::parse_itk_matlab(only_fixed, "f.mat"), ErrorCode::format);
  std::string complex = good;
  complex[12] = 1;  // imagf of the first variable
  EXPECT_VP_ERROR(resample::parse_itk_matlab(complex, "c.mat"), ErrorCode::unsupported);
  std::string huge = good;
  huge[4] = huge[5] = huge[6] = huge[7] = '\xff';  // 2^32 - 1 rows: more than the file holds
  EXPECT_VP_ERROR(resample::parse_itk_matlab(huge, "h.mat"), ErrorCode::truncated);
  std::string two = good;
  append_matlab(two, "AffineTransform_double_3_3", std::vector<double>(12, 1.0), false, false);
  EXPECT_VP_ERROR(resample::parse_itk_matlab(two, "two.mat"), ErrorCode::unsupported);
  AffineReadOptions fsl;
  fsl.format = AffineFormat::fsl;
  fsl.reference = &kRef;
  EXPECT_VP_ERROR(resample::parse_affines_text(good, "a.mat", fsl), ErrorCode::format);
}

TEST(MatrixText, FourByFourThreeByFourCommasAndComments) {
  const Matrix4 want{1, 0, 0, 2.5, 0, 1, 0, -3, 0, 0, 1, 0.125, 0, 0, 0, 1};
  EXPECT_EQ(resample::parse_matrix_text("1 0 0 2.5\n0 1 0 -3\n0 0 1 0.125\n0 0 0 1\n", "m", true),
            want);
  EXPECT_EQ(resample::parse_matrix_text("# RAS\n1, 0, 0, 2.5\n0,1,0,-3  # y\n\n0 0 1 +0.125\n",
                                        "m", true),
            want);
  // Exact decimal -> double (from_chars, correctly rounded): the closest double, not a
  // strtod-of-some-locale approximation.
  const Matrix4 m = resample::parse_matrix_text(
      "0.1 0.2 0.3 1e-300\n0 1 0 0\n0 0 1 0\n0 0 0 1\n", "m", false);
  EXPECT_EQ(m[0], 0.1);
  EXPECT_EQ(m[2], 0.3);
  EXPECT_EQ(m[3], 1e-300);
}

TEST(MatrixText, MalformedMatricesNameTheLineAndRow) {
  struct Case {
    std::string text;
    std::string needle;
  };
  const std::vector<Case> cases{
      {"1 0 0 0\n0 1 0 0\n0 0 1 0\n0 0 0.5 1\n", "line 4: row 4: expected 0 0 0 1"},
      {"1 0 0 0\n0 1 0\n0 0 1 0\n0 0 0 1\n", "line 2: row 2: expected 4 numbers, but found 3"},
      {"1 0 0 0\n0 1 0 0\n0 0 1 0\n0 0 0 1\n0 0 0 1\n", "line 5: row 5"},
      {"1 0 0 0\n0 1 0 0\n", "line 2: expected 4 rows of 4 numbers (or 3), but found 2"},
      {"1 0 0 0\n0 1 0 0\n0 0 1 0\n0 0 0 1e999\n", "line 4: row 4: expected a finite number"},
      {"1,,0 0 0\n0 1 0 0\n0 0 1 0\n", "line 1: row 1: expected a number before ','"},
      {"1 0 0 0,\n0 1 0 0\n0 0 1 0\n", "line 1: row 1: expected a number after ','"},
      {"1 0 0 0x1\n0 1 0 0\n0 0 1 0\n", "line 1: row 1: expected a finite number, but found '0x1'"},
      {"# nothing\n", "line 1: expected 4 rows of 4 numbers (or 3), but found 0"},
  };
  for (const auto& c : cases) {
    const auto e = vptest::catch_error([&] { resample::parse_matrix_text(c.text, "m.txt", true); });
    ASSERT_TRUE(e) << c.text;
    EXPECT_EQ(e->code(), ErrorCode::format);
    EXPECT_NE(std::string(e->what()).find("m.txt: " + c.needle), std::string::npos)
        << e->what() << "\n  expected: " << c.needle;
  }
  // FSL has no 3-row form.
  EXPECT_VP_ERROR(resample::parse_matrix_text("1 0 0 0\n0 1 0 0\n0 0 1 0\n", "f.mat", false),
                  ErrorCode::format);
}

TEST(FslMatrix, EqualsNitransformsWithObliqueGridsOfBothHandedness) {
  AffineReadOptions o;
  o.format = AffineFormat::fsl;
  o.reference = &kRef;
  o.moving = &kMov;
  const auto m = resample::parse_affines_text(kFlirt, "flirt.mat", o);
  ASSERT_EQ(m.size(), 1u);
  expect_matrix_near(
      m[0], {0.9056801086533767, 0.31126971089119404, 0.21387104720832623, 18.679275751320134,
             -0.31900091872772035, 0.9603531939461958, 0.06579120757756046, -58.55993107946648,
             -0.19203422730913955, -0.1350343406454217, 0.9607301136328001, 23.49099500318087,
             0, 0, 0, 1},
      1e-13);
  // Without a moving grid the reference stands in for it (nitransforms warns and does so too).
  o.moving = nullptr;
  expect_matrix_near(
      resample::parse_affines_text(kFlirt, "flirt.mat", o)[0],
      {0.9783125947129951, 0.04534335370792455, -0.01699289778150522, 1.2527287500031825,
       -0.04237536825274203, 1.0150475849823293, -0.0679257338120443, 3.9819869764731948,
       0.00199624875992996, 0.07087837251623125, 0.9839557892407944, -5.450743799425113, 0, 0,
       0, 1},
      1e-13);
}

TEST(FslMatrix, NeedsTheReferenceGrid) {
  AffineReadOptions o;
  o.format = AffineFormat::fsl;
  const auto e = vptest::catch_error([&] { resample::parse_affines_text(kFlirt, "x.mat", o); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::invalid_argument);
  EXPECT_EQ(e->path(), "x.mat");
  EXPECT_NE(error_text(e).find("reference"), std::string::npos);
  // A singular FLIRT matrix cannot be inverted.
  o.reference = &kRef;
  EXPECT_VP_ERROR(resample::parse_affines_text("0 0 0 0\n0 1 0 0\n0 0 1 0\n0 0 0 1\n", "s.mat", o),
                  ErrorCode::format);
}

TEST(AutomaticFormat, ItkByHeaderFslByReferenceAndName) {
  AffineReadOptions o;
  EXPECT_EQ(resample::parse_affines_text(kCentred, "c.txt", o).size(), 1u);
  // Without a reference grid, or with a name that is not FSL's, numbers are a RAS matrix.
  EXPECT_EQ(resample::parse_affines_text(kFlirt, "flirt.mat", o)[0][3], 2.5);
  o.reference = &kRef;
  EXPECT_EQ(resample::parse_affines_text(kFlirt, "flirt.txt", o)[0][3], 2.5);
  EXPECT_NE(resample::parse_affines_text(kFlirt, "flirt.MAT", o)[0][3], 2.5);
  EXPECT_NE(resample::parse_affines_text(kFlirt, "dir/MAT_0003", o)[0][3], 2.5);
  // An explicit format that the content contradicts.
  o.format = AffineFormat::itk;
  EXPECT_VP_ERROR(resample::parse_affines_text(kFlirt, "x.tfm", o), ErrorCode::format);
  o.format = AffineFormat::matrix;
  EXPECT_VP_ERROR(resample::parse_affines_text(kCentred, "x.txt", o), ErrorCode::format);
}

TEST(Files, ListFolderAndSingleTransform) {
  TempDir dir;
  write_text(dir.file("a.tfm"), kCentred);
  std::filesystem::create_directories(dir.file("sub"));
  write_text(dir.file("sub/b.txt"), "2 0 0 0\n0 2 0 0\n0 0 2 0\n");
  write_text(dir.file("list.txt"), "# volumes\na.tfm\n\nsub/b.txt\n" + dir.file("a.tfm") + "\n");
  const auto all = read_affines(dir.file("list.txt"));
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0][3], -9.0);
  EXPECT_EQ(all[1][0], 2.0);
  EXPECT_EQ(all[2][3], -9.0);
  EXPECT_EQ(read_affine(dir.file("a.tfm"))[3], -9.0);
  EXPECT_VP_ERROR(read_affine(dir.file("list.txt")), ErrorCode::format);

  // An MCFLIRT folder: FSL matrices in name order.
  std::filesystem::create_directories(dir.file("mats"));
  write_text(dir.file("mats/MAT_0001"), "1 0 0 1\n0 1 0 0\n0 0 1 0\n0 0 0 1\n");
  write_text(dir.file("mats/MAT_0000"), "1 0 0 0\n0 1 0 0\n0 0 1 0\n0 0 0 1\n");
  AffineReadOptions o;
  o.reference = &kRef;
  const auto mats = read_affines(dir.file("mats"), o);
  ASSERT_EQ(mats.size(), 2u);
  expect_matrix_near(mats[0], kIdentity4);
  EXPECT_NE(mats[1], kIdentity4);
}

TEST(Files, ListErrorsNameTheListAndLine) {
  TempDir dir;
  write_text(dir.file("list.txt"), "# volumes\nmissing.tfm\n");
  auto e = vptest::catch_error([&] { read_affines(dir.file("list.txt")); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::not_found);
  EXPECT_EQ(e->path(), dir.file("list.txt"));
  EXPECT_EQ(e->field(), "line 2");
  write_text(dir.file("inner.txt"), "missing.tfm\n");
  write_text(dir.file("outer.txt"), "inner.txt\n");
  EXPECT_VP_ERROR(read_affines(dir.file("outer.txt")), ErrorCode::format);
  EXPECT_VP_ERROR(read_affines(dir.file("nothing.tfm")), ErrorCode::not_found);
  std::filesystem::create_directories(dir.file("empty"));
  EXPECT_VP_ERROR(read_affines(dir.file("empty")), ErrorCode::format);
}

// "nan" or "inf" first is a matrix with a value that is not finite, not a list naming a file
// called "nan" (Python's float() reads all these spellings).
TEST(Files, AMatrixStartingWithNanOrInfIsABadValueNotAMissingFile) {
  TempDir dir;
  for (const std::string token : {"nan", "inf", "NaN", "Infinity", "nan(1)"}) {
    SCOPED_TRACE(token);
    const std::string text = token + " 0 0 0\n0 1 0 0\n0 0 1 0\n0 0 0 1\n";
    EXPECT_EQ(resample::classify_transform_text(text), resample::TransformText::numbers);
    write_text(dir.file("m.txt"), text);
    auto e = vptest::catch_error([&] { read_affines(dir.file("m.txt")); });
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code(), ErrorCode::format);
    EXPECT_EQ(e->field(), "line 1: row 1");
    EXPECT_NE(e->detail().find("expected a finite number, but found '" + token + "'"),
              std::string::npos)
        << e->what();
  }
  // A list entry that only starts like a number is a file name; a row with a bad value a row.
  for (const char* name : {"nan.tfm\n", "info.txt\n", "001.tfm\n", "-b.mat\n"})
    EXPECT_EQ(resample::classify_transform_text(name), resample::TransformText::list) << name;
  EXPECT_EQ(resample::classify_transform_text("1..0 0 0 0\n"), resample::TransformText::numbers);
  EXPECT_EQ(resample::classify_transform_text("1e999 0 0 0\n"), resample::TransformText::numbers);
  write_text(dir.file("001.tfm"), "#Insight Transform File V1.0\n#Transform 0\n"
                                  "Transform: AffineTransform_double_3_3\n"
                                  "Parameters: 1 0 0 0 1 0 0 0 1 0 0 0\nFixedParameters: 0 0 0\n");
  write_text(dir.file("list.txt"), "001.tfm\n");
  EXPECT_EQ(read_affines(dir.file("list.txt")).size(), 1u);
}

TEST(Files, TextLargerThanTheCapIsRefusedBeforeReading) {
  TempDir dir;
  const std::string path = dir.file("huge.txt");
  std::filesystem::resize_file((write_text(path, ""), path), resample::kMaxTransformTextBytes + 1);
  EXPECT_VP_ERROR(read_affines(path), ErrorCode::limit);
}

// A (2, 3, 2) field with component c of voxel (i, j, k) = 100 c + 10 k + 3 j + i... as float32.
void write_field(const std::string& path, std::vector<std::int64_t> shape) {
  auto h = vptest::make_header(1, DType::f32, shape);
  h.sform_code = 1;
  h.srow_x = {2, 0, 0, -1};
  h.srow_y = {0, 3, 0, -2};
  h.srow_z = {0, 0, 4, -3};
  std::vector<float> v;
  for (int c = 0; c < 3; ++c)
    for (int k = 0; k < 2; ++k)
      for (int j = 0; j < 3; ++j)
        for (int i = 0; i < 2; ++i) v.push_back(static_cast<float>(100 * c + 10 * k + 3 * j + i));
  write_nifti(path, h, {}, producer_from_bytes(std::as_bytes(std::span(v))));
}

TEST(DisplacementField, ItkNegatesRAndARasKeepsAll) {
  TempDir dir;
  write_field(dir.file("itk.nii.gz"), {2, 3, 2, 1, 3});
  write_field(dir.file("ras.nii"), {2, 3, 2, 3});
  const auto itk = read_displacement_field(dir.file("itk.nii.gz"), FieldFormat::itk);
  const auto ras = read_displacement_field(dir.file("ras.nii"), FieldFormat::ras);
  EXPECT_EQ(itk.grid.shape, (std::array<std::int64_t, 3>{2, 3, 2}));
  EXPECT_EQ(itk.grid.affine,
            (Matrix4{2, 0, 0, -1, 0, 3, 0, -2, 0, 0, 4, -3, 0, 0, 0, 1}));
  ASSERT_EQ(itk.data.size(), 36u);
  ASSERT_EQ(ras.data.size(), 36u);
  // Voxel (1, 2, 1): component c at 1 + 2 * (2 + 3 * (1 + 2 * c)).
  for (int c = 0; c < 3; ++c) {
    const double v = 100 * c + 10 + 6 + 1;
    EXPECT_EQ(ras.data[1 + 2 * (2 + 3 * (1 + 2 * c))], v);
    EXPECT_EQ(itk.data[1 + 2 * (2 + 3 * (1 + 2 * c))], c < 2 ? -v : v);
  }
  // A RAS (X, Y, Z, 3) file is not an ITK one; a 5-D one may be read as RAS.
  EXPECT_VP_ERROR(read_displacement_field(dir.file("ras.nii"), FieldFormat::itk),
                  ErrorCode::format);
  EXPECT_EQ(read_displacement_field(dir.file("itk.nii.gz"), FieldFormat::ras).data[1], 1.0);
  const std::vector<float> zeros(12);
  write_nifti(dir.file("scalar.nii"), vptest::make_header(1, DType::f32, {2, 3, 2}), {},
              producer_from_bytes(std::as_bytes(std::span(zeros))));
  EXPECT_VP_ERROR(read_displacement_field(dir.file("scalar.nii"), FieldFormat::ras),
                  ErrorCode::format);
}

}  // namespace
