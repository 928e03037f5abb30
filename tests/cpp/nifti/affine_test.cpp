// Affines as nibabel computes them: sform before qform before the base affine; the qform of
// known rotations against matrices computed here from the axis and angle; shape_zoom_affine.
#include <numbers>

#include "nifti/nifti_support.hpp"

namespace {

using voxpipe::NiftiHeader;
using Mat = std::array<double, 16>;

Mat mat(std::initializer_list<double> v) {
  Mat m{};
  std::copy(v.begin(), v.end(), m.begin());
  return m;
}

void expect_near(const Mat& got, const Mat& want, double tol) {
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(got[i], want[i], tol) << "element [" << i / 4 << "][" << i % 4 << "]";
}

// Rotation by `angle` about the unit vector (x, y, z): Rodrigues' formula,
// R = I + sin(a) K + (1 - cos(a)) K^2, K the cross-product matrix of the axis.
std::array<std::array<double, 3>, 3> rodrigues(double x, double y, double z, double angle) {
  const double K[3][3] = {{0, -z, y}, {z, 0, -x}, {-y, x, 0}};
  std::array<std::array<double, 3>, 3> R{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      double k2 = 0;
      for (int k = 0; k < 3; ++k) k2 += K[i][k] * K[k][j];
      R[i][j] = (i == j ? 1.0 : 0.0) + std::sin(angle) * K[i][j] + (1 - std::cos(angle)) * k2;
    }
  return R;
}

NiftiHeader rotated(int version, double ax, double ay, double az, double angle) {
  const double n = std::sqrt(ax * ax + ay * ay + az * az);
  ax /= n, ay /= n, az /= n;
  NiftiHeader h = vptest::make_header(version, voxpipe::DType::f32, {10, 11, 12});
  h.qform_code = 1;
  h.quatern_b = ax * std::sin(angle / 2);
  h.quatern_c = ay * std::sin(angle / 2);
  h.quatern_d = az * std::sin(angle / 2);
  h.pixdim = {-1, 1.5, 2, 2.5, 1, 1, 1, 1};
  h.qoffset_x = 10;
  h.qoffset_y = -20;
  h.qoffset_z = 30.5;
  return h;
}

Mat expected_qform(double ax, double ay, double az, double angle, const NiftiHeader& h) {
  const double n = std::sqrt(ax * ax + ay * ay + az * az);
  const auto R = rodrigues(ax / n, ay / n, az / n, angle);
  const double vox[3] = {h.pixdim[1], h.pixdim[2], h.pixdim[3] * h.pixdim[0]};
  Mat m{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) m[i * 4 + j] = R[i][j] * vox[j];
  m[3] = h.qoffset_x, m[7] = h.qoffset_y, m[11] = h.qoffset_z, m[15] = 1;
  return m;
}

TEST(Affine, QformOfAnArbitraryRotation) {
  // NIfTI-2 stores the quaternion in float64: agreement to rounding; NIfTI-1 stores float32.
  for (int version : {2, 1}) {
    const double tol = version == 2 ? 1e-12 : 2e-6;
    for (auto [x, y, z, a] : {std::array<double, 4>{1, 2, 3, 0.7}, {0, 0, 1, std::numbers::pi / 2},
                              {-1, 0.5, 0.25, 2.5}, {0, 1, 0, -0.3}}) {
      const NiftiHeader h = rotated(version, x, y, z, a);
      SCOPED_TRACE("version " + std::to_string(version) + " angle " + std::to_string(a));
      expect_near(voxpipe::nifti_qform(h, "q.nii"), expected_qform(x, y, z, a, h), tol * 3);
    }
  }
}

TEST(Affine, QformOfIdentityQuaternionIsExactlyTheZooms) {
  for (int version : {1, 2}) {
    NiftiHeader h = vptest::make_header(version, voxpipe::DType::f32, {2, 2, 2});
    h.pixdim = {-1, 0.5, 3, 1.25, 1, 1, 1, 1};
    h.qoffset_x = 1, h.qoffset_y = 2, h.qoffset_z = 3;
    EXPECT_EQ(voxpipe::nifti_qform(h, "q.nii"), mat({0.5, 0, 0, 1, 0, 3, 0, 2, 0, 0, -1.25, 3, 0, 0, 0, 1}));
  }
}

TEST(Affine, QformOf180DegreesAboutXHasWZero) {
  // b = 1 leaves w^2 = 0: R = diag(1, -1, -1) exactly.
  NiftiHeader h = vptest::make_header(1, voxpipe::DType::f32, {2, 2, 2});
  h.quatern_b = 1;
  h.pixdim = {1, 2, 3, 4, 1, 1, 1, 1};
  EXPECT_EQ(voxpipe::nifti_qform(h, "q.nii"), mat({2, 0, 0, 0, 0, -3, 0, 0, 0, 0, -4, 0, 0, 0, 0, 1}));
  // Slightly above 1 in float32 is still inside nibabel's 3*eps(float32) threshold.
  h.quatern_b = 1.0000001;
  EXPECT_NO_THROW(voxpipe::nifti_qform(h, "q.nii"));
}

TEST(Affine, QformRefusesQuaternionLongerThanOne) {
  NiftiHeader h = vptest::make_header(2, voxpipe::DType::f32, {2, 2, 2});
  h.quatern_b = h.quatern_c = h.quatern_d = 0.7;
  auto err = vptest::catch_error([&] { voxpipe::nifti_qform(h, "q.nii"); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), voxpipe::ErrorCode::format);
  EXPECT_EQ(err->path(), "q.nii");
  EXPECT_NE(err->field().find("quatern"), std::string::npos) << err->field();
}

TEST(Affine, SformIsTheThreeRows) {
  NiftiHeader h = vptest::full_header(2, false);
  EXPECT_EQ(voxpipe::nifti_sform(h), mat({-1.5, 0, 0, 90, 0, 2, 0.25, -126, 0, 0, 2.5, -72, 0, 0, 0, 1}));
}

TEST(Affine, BestAffinePrefersSformThenQformThenBase) {
  NiftiHeader h = vptest::full_header(1, false);
  h.qform_code = 1, h.sform_code = 2;
  EXPECT_EQ(voxpipe::nifti_best_affine(h, "b.nii"), voxpipe::nifti_sform(h));
  h.sform_code = 0;
  EXPECT_EQ(voxpipe::nifti_best_affine(h, "b.nii"), voxpipe::nifti_qform(h, "b.nii"));
  EXPECT_NE(voxpipe::nifti_qform(h, "b.nii"), voxpipe::nifti_sform(h));
  h.qform_code = 0;
  EXPECT_EQ(voxpipe::nifti_best_affine(h, "b.nii"), voxpipe::nifti_base_affine(h));
  // sform with qform 0 is still the sform.
  h.sform_code = 4;
  EXPECT_EQ(voxpipe::nifti_best_affine(h, "b.nii"), voxpipe::nifti_sform(h));
}

TEST(Affine, BaseAffineFor3D) {
  // shape_zoom_affine((4, 5, 6), (2, 3, 4), x_flip=True): diag(-2, 3, 4) centred on the volume.
  NiftiHeader h = vptest::make_header(1, voxpipe::DType::u8, {4, 5, 6});
  h.pixdim = {1, 2, 3, 4, 9, 1, 1, 1};
  EXPECT_EQ(voxpipe::nifti_base_affine(h),
            mat({-2, 0, 0, 3, 0, 3, 0, -6, 0, 0, 4, -10, 0, 0, 0, 1}));
  // A 4D image uses its first three axes only.
  NiftiHeader h4 = vptest::make_header(2, voxpipe::DType::u8, {4, 5, 6, 7});
  h4.pixdim = {1, 2, 3, 4, 9, 1, 1, 1};
  EXPECT_EQ(voxpipe::nifti_base_affine(h4), voxpipe::nifti_base_affine(h));
}

TEST(Affine, BaseAffineFor2DPadsWithOnes) {
  // shape (4, 5) and zooms (2, 3) padded to (4, 5, 1) and (2, 3, 1); pixdim[3] is ignored.
  NiftiHeader h = vptest::make_header(1, voxpipe::DType::u8, {4, 5});
  h.pixdim = {1, 2, 3, 7, 1, 1, 1, 1};
  const Mat m = voxpipe::nifti_base_affine(h);
  EXPECT_EQ(m, mat({-2, 0, 0, 3, 0, 3, 0, -6, 0, 0, 1, 0, 0, 0, 0, 1}));
  EXPECT_TRUE(std::signbit(m[11])) << "-origin * zoom is -0.0 for a single slice, as in NumPy";
}

TEST(Affine, OpenUsesTheBestAffine) {
  vptest::TempDir dir;
  NiftiHeader h = vptest::full_header(1, true);
  h.sform_code = 0;
  const std::string path = vptest::write_image(dir, "q.nii", h, std::vector<std::int16_t>(120, 1));
  const auto img = voxpipe::open_nifti(path);
  EXPECT_EQ(img.affine, voxpipe::nifti_qform(img.header, path));
  // quatern (0, 0.5, -0.5): w = sqrt(0.5); pixdim (1.5, 2, 2.5), qfac -1.
  const double w = std::sqrt(0.5);
  const auto R = rodrigues(0, 1 / std::sqrt(2.0), -1 / std::sqrt(2.0), 2 * std::acos(w));
  Mat want{};
  const double vox[3] = {1.5, 2, -2.5};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) want[i * 4 + j] = R[i][j] * vox[j];
  want[3] = -90, want[7] = 126, want[11] = -72, want[15] = 1;
  expect_near(img.affine, want, 1e-6);
}

}  // namespace
