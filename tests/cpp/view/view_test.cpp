// The viewer's orientation helper against nibabel's io_orientation (values computed with
// nibabel 5.4.2), its strided canonical view, and the checks of render_view / write_png. The
// pictures themselves are checked from Python (tests/python/test_view.py), read back with Pillow.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <numbers>
#include <vector>

#include "view/orientation.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/view.hpp"

namespace voxpipe::view {
namespace {

using Affine = std::array<double, 16>;

Affine with_3x3(const std::array<double, 9>& m) {
  return {m[0], m[1], m[2], 0, m[3], m[4], m[5], 0, m[6], m[7], m[8], 0, 0, 0, 0, 1};
}

void expect_orientation(const Affine& a, const std::array<AxisOrientation, 3>& expected) {
  const auto o = io_orientation(a, "test");
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(o[i].world_axis, expected[i].world_axis) << "voxel axis " << i;
    EXPECT_EQ(o[i].flipped, expected[i].flipped) << "voxel axis " << i;
  }
}

TEST(IoOrientation, PermutationsAndFlipsAsNibabel) {
  expect_orientation(with_3x3({1, 0, 0, 0, 1, 0, 0, 0, 1}), {{{0, false}, {1, false}, {2, false}}});
  // LPS with 0.5 x 2 x 3 mm voxels: nibabel [[0, -1], [1, -1], [2, 1]].
  expect_orientation(with_3x3({-0.5, 0, 0, 0, -2, 0, 0, 0, 3}),
                     {{{0, true}, {1, true}, {2, false}}});
  // PIR: voxel axes towards posterior, inferior, right: nibabel [[1, -1], [2, -1], [0, 1]].
  expect_orientation(with_3x3({0, 0, 1, -1, 0, 0, 0, -1, 0}), {{{1, true}, {2, true}, {0, false}}});
}

TEST(IoOrientation, ObliqueTakesTheClosestAxisGreedily) {
  const auto rot_z = [](double deg) {
    const double a = deg * std::numbers::pi / 180, c = std::cos(a), s = std::sin(a);
    return with_3x3({c, -s, 0, s, c, 0, 0, 0, 1});
  };
  expect_orientation(rot_z(40), {{{0, false}, {1, false}, {2, false}}});
  // Past 45 degrees the first voxel axis is closer to A, and the second then gets -R.
  expect_orientation(rot_z(50), {{{1, false}, {0, true}, {2, false}}});
}

TEST(IoOrientation, ShearIsJudgedOnThePolarFactorNotTheColumns) {
  // The largest entries of the normalised columns would give [[1, -1], [0, -1], [2, -1]];
  // nibabel (SVD polar factor) gives [[0, -1], [2, -1], [1, -1]].
  expect_orientation(
      with_3x3({-1.265, -0.623, 0.041, -2.325, -0.219, -1.246, -0.732, -0.544, -0.316}),
      {{{0, true}, {2, true}, {1, true}}});
}

TEST(IoOrientation, SingularOrNonFiniteAffineIsInvalidArgument) {
  for (const Affine& a :
       {with_3x3({1, 0, 0, 0, 0, 0, 0, 0, 1}), with_3x3({1, 1, 0, 1, 1, 0, 0, 0, 1}),
        with_3x3({1, 0, 0, 0, NAN, 0, 0, 0, 1})}) {
    try {
      io_orientation(a, "img.nii");
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_EQ(e.path(), "img.nii");
      EXPECT_EQ(e.field(), "affine");
    }
  }
}

TEST(CanonicalGrid, StridesWalkTheStoredVolumeInRasOrder) {
  // Stored PIR, shape (4, 5, 6) with voxel sizes 2, 3, 4 mm: canonical R is stored axis 2,
  // A is axis 0 reversed, S is axis 1 reversed.
  const std::array<std::int64_t, 3> shape{4, 5, 6};
  const CanonicalGrid g = canonical_grid(shape, with_3x3({0, 0, 4, -2, 0, 0, 0, -3, 0}), "");
  EXPECT_EQ(g.shape, (std::array<std::int64_t, 3>{6, 4, 5}));
  EXPECT_EQ(g.zooms, (std::array<double, 3>{4, 2, 3}));
  // Canonical (r, a, s) is stored (3 - a, 4 - s, r).
  for (std::int64_t r = 0; r < 6; ++r)
    for (std::int64_t a = 0; a < 4; ++a)
      for (std::int64_t s = 0; s < 5; ++s)
        ASSERT_EQ(g.offset(r, a, s), (3 - a) + 4 * (4 - s) + 20 * r);
}

TEST(RenderView, ChecksItsInputs) {
  std::vector<float> data(24, 1.0f);
  const Affine eye = with_3x3({1, 0, 0, 0, 1, 0, 0, 0, 1});
  const auto code_of = [&](ViewVolume v, ViewOptions o) {
    try {
      render_view(v, o, "v");
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::io;  // no error: not a code render_view throws
  };
  EXPECT_EQ(code_of({data, {2, 3, 5}, eye}, {}), ErrorCode::invalid_argument);  // 30 != 24
  EXPECT_EQ(code_of({data, {2, 3, 0}, eye}, {}), ErrorCode::invalid_argument);
  EXPECT_EQ(code_of({data, {2, 3, 4}, eye}, {ViewLayout::orthogonal, 50, 50}),
            ErrorCode::invalid_argument);
  EXPECT_EQ(code_of({data, {2, 3, 4}, eye}, {ViewLayout::orthogonal, 0, 101}),
            ErrorCode::invalid_argument);
  const GrayImage g = render_view({data, {2, 3, 4}, eye});
  EXPECT_EQ(g.pixels.size(), std::size_t{g.width} * g.height);
}

TEST(WritePng, SameBytesEveryTimeAndTheWritersErrors) {
  const GrayImage img{3, 2, {0, 128, 255, 1, 2, 3}};
  const std::vector<std::uint8_t> png = encode_png(img);
  ASSERT_GE(png.size(), 8u);
  EXPECT_EQ(std::vector<std::uint8_t>(png.begin(), png.begin() + 8),
            (std::vector<std::uint8_t>{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'}));
  EXPECT_EQ(encode_png(img), png);
  EXPECT_THROW(encode_png(GrayImage{3, 3, {1, 2}}), Error);
  try {
    write_png("/nonexistent-folder-for-view-test/x.png", img);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found);  // as every output of AtomicOutputFile
    EXPECT_EQ(e.path(), "/nonexistent-folder-for-view-test/x.png");
  }
}

}  // namespace
}  // namespace voxpipe::view
