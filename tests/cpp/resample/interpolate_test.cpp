// Hand-checked values of the interpolation core: boundary index mapping, spline weights and
// coefficients, the kernel at known points, output rounding, layouts, threads and errors.
// (tests/python/test_resample_interp.py compares everything against scipy itself.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "resample/boundary.hpp"
#include "resample/bspline.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/resample.hpp"

namespace {

using namespace voxpipe;
using resample::map_coordinate;
using resample::map_tap;

template <typename T>
ArrayRef ref(std::vector<T>& v, DType t, std::vector<std::int64_t> shape) {
  ArrayRef r;
  r.data = v.data();
  r.dtype = t;
  r.shape = shape;
  r.strides.assign(shape.size(), 1);
  for (std::size_t d = shape.size(); d-- > 1;) r.strides[d - 1] = r.strides[d] * shape[d];
  return r;
}

std::vector<double> map1d(std::vector<double> data, std::vector<double> coords, InterpOptions o) {
  std::vector<double> out(coords.size());
  map_coordinates(ref(data, DType::f64, {static_cast<std::int64_t>(data.size())}),
                  ref(coords, DType::f64, {1, static_cast<std::int64_t>(coords.size())}),
                  ref(out, DType::f64, {static_cast<std::int64_t>(coords.size())}), o);
  return out;
}

TEST(ResampleBoundary, coordinates_fold_into_the_array_per_mode) {
  EXPECT_EQ(map_coordinate(-1.0, 4, InterpMode::mirror), 1.0);
  EXPECT_EQ(map_coordinate(4.0, 4, InterpMode::mirror), 2.0);
  EXPECT_EQ(map_coordinate(-1.0, 4, InterpMode::reflect), 0.0);
  EXPECT_EQ(map_coordinate(-1.5, 4, InterpMode::reflect), 0.5);
  EXPECT_EQ(map_coordinate(4.0, 4, InterpMode::reflect), 3.0);
  EXPECT_EQ(map_coordinate(-1.0, 4, InterpMode::wrap), 2.0);
  EXPECT_EQ(map_coordinate(3.5, 4, InterpMode::wrap), 0.5);
  EXPECT_EQ(map_coordinate(-1.0, 4, InterpMode::grid_wrap), 3.0);
  EXPECT_EQ(map_coordinate(4.0, 4, InterpMode::grid_wrap), 0.0);
  EXPECT_EQ(map_coordinate(-5.0, 4, InterpMode::nearest), 0.0);
  EXPECT_EQ(map_coordinate(-0.1, 4, InterpMode::constant), -1.0);
  EXPECT_EQ(map_coordinate(3.0, 4, InterpMode::constant), 3.0);
  EXPECT_TRUE(std::isnan(map_coordinate(std::nan(""), 4, InterpMode::mirror)));
  EXPECT_EQ(map_coordinate(7.3, 1, InterpMode::mirror), 0.0);
}

TEST(ResampleBoundary, taps_beyond_the_edge_read_the_mode_s_sample) {
  EXPECT_EQ(map_tap(-2, 4, InterpMode::mirror), 2);
  EXPECT_EQ(map_tap(5, 4, InterpMode::mirror), 1);
  EXPECT_EQ(map_tap(-2, 4, InterpMode::reflect), 1);
  EXPECT_EQ(map_tap(5, 4, InterpMode::reflect), 2);
  EXPECT_EQ(map_tap(-2, 4, InterpMode::grid_wrap), 2);
  EXPECT_EQ(map_tap(5, 4, InterpMode::grid_wrap), 1);
  EXPECT_EQ(map_tap(7, 4, InterpMode::nearest), 3);
  EXPECT_EQ(map_tap(4, 4, InterpMode::grid_constant), -1);
  EXPECT_EQ(map_tap(-1, 4, InterpMode::grid_constant), -1);
  EXPECT_EQ(resample::tap_mode(InterpMode::constant), InterpMode::mirror);
  EXPECT_EQ(resample::tap_mode(InterpMode::wrap), InterpMode::mirror);
  EXPECT_EQ(resample::tap_mode(InterpMode::reflect), InterpMode::reflect);
}

TEST(ResampleBspline, weights_sum_to_one_and_match_the_cubic_formula) {
  for (int order = 1; order <= 5; ++order) {
    double w[6];
    resample::spline_weights(2.3, order, w);
    EXPECT_NEAR(std::accumulate(w, w + order + 1, 0.0), 1.0, 1e-15) << order;
  }
  double w[4];
  resample::spline_weights(0.0, 3, w);  // taps -1, 0, 1, 2 at an integer: 1/6, 2/3, 1/6, 0
  EXPECT_NEAR(w[0], 1.0 / 6, 1e-16);
  EXPECT_NEAR(w[1], 2.0 / 3, 1e-16);
  EXPECT_NEAR(w[2], 1.0 / 6, 1e-16);
  EXPECT_NEAR(w[3], 0.0, 1e-16);
}

TEST(ResampleBspline, coefficients_of_a_constant_are_the_constant) {
  for (int order = 2; order <= 5; ++order) {
    for (InterpMode mode : {InterpMode::mirror, InterpMode::grid_wrap, InterpMode::constant}) {
      std::vector<double> line(17, 3.5);
      resample::spline_filter_lines(line.data(), 17, 1, 1, order, mode);
      for (double c : line) EXPECT_NEAR(c, 3.5, 1e-13) << order;
    }
  }
}

TEST(ResampleBspline, coefficients_of_a_ramp_are_the_ramp_away_from_the_edges) {
  // A cubic B-spline reproduces linear functions with coefficients equal to the samples; the
  // edges (mirror extension) perturb them by pole^distance, below 1e-13 after 24 samples.
  std::vector<double> line(64);
  std::iota(line.begin(), line.end(), 0.0);
  resample::spline_filter_lines(line.data(), 64, 1, 1, 3, InterpMode::mirror);
  for (int i = 24; i < 40; ++i) EXPECT_NEAR(line[i], i, 1e-12);
}

TEST(ResampleBspline, lanes_filter_like_single_lines) {
  // 3 lanes x 9 samples, interleaved, equal the lines filtered one by one.
  std::vector<double> lanes(27), single(27);
  for (int i = 0; i < 27; ++i) lanes[i] = std::sin(i * 0.7);
  for (int j = 0; j < 3; ++j)
    for (int i = 0; i < 9; ++i) single[j * 9 + i] = lanes[i * 3 + j];
  resample::spline_filter_lines(lanes.data(), 9, 3, 3, 5, InterpMode::reflect);
  for (int j = 0; j < 3; ++j) {
    resample::spline_filter_lines(single.data() + j * 9, 9, 1, 1, 5, InterpMode::reflect);
    for (int i = 0; i < 9; ++i) EXPECT_EQ(lanes[i * 3 + j], single[j * 9 + i]);
  }
}

TEST(ResampleInterpolate, linear_interpolation_between_samples) {
  InterpOptions o;
  o.order = 1;
  auto v = map1d({0, 10, 20, 40}, {1.25, 2.5, 0.0, 3.0}, o);
  EXPECT_DOUBLE_EQ(v[0], 12.5);
  EXPECT_DOUBLE_EQ(v[1], 30.0);
  EXPECT_DOUBLE_EQ(v[2], 0.0);
  EXPECT_DOUBLE_EQ(v[3], 40.0);
}

TEST(ResampleInterpolate, constant_mode_gives_cval_just_outside_the_samples) {
  InterpOptions o;
  o.order = 1;
  o.cval = -7;
  auto v = map1d({1, 2, 3}, {-1e-9, 2.0 + 1e-9, std::nan("")}, o);
  EXPECT_EQ(v[0], -7);
  EXPECT_EQ(v[1], -7);
  EXPECT_EQ(v[2], -7);
}

TEST(ResampleInterpolate, order0_rounds_half_up) {
  InterpOptions o;
  o.order = 0;
  o.mode = InterpMode::nearest;
  auto v = map1d({1, 2}, {0.5, 0.49999999, -0.5, 1.5}, o);
  EXPECT_EQ(v, (std::vector<double>{2, 1, 1, 2}));
}

TEST(ResampleInterpolate, cubic_with_prefilter_reproduces_the_samples) {
  InterpOptions o;
  o.order = 3;
  o.mode = InterpMode::mirror;
  auto v = map1d({1, 4, 2, 8, 5}, {0, 1, 2, 3, 4}, o);
  std::vector<double> want{1, 4, 2, 8, 5};
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(v[i], want[i], 1e-13);
}

TEST(ResampleInterpolate, bilinear_in_two_dimensions) {
  std::vector<double> data{0, 1, 2, 3};  // [[0, 1], [2, 3]]
  std::vector<double> coords{0.5, 0.25, 0.5, 1.0};  // points (0.5, 0.5), (0.25, 1)
  std::vector<double> out(2);
  InterpOptions o;
  o.order = 1;
  map_coordinates(ref(data, DType::f64, {2, 2}), ref(coords, DType::f64, {2, 2}),
                  ref(out, DType::f64, {2}), o);
  EXPECT_DOUBLE_EQ(out[0], 1.5);
  EXPECT_DOUBLE_EQ(out[1], 1.5);
}

TEST(ResampleInterpolate, integer_outputs_round_half_away_from_zero_and_clip) {
  std::vector<double> data{2.5, -2.5, -3.0, 300.0, 1.49};
  std::vector<double> coords{0, 1, 2, 3, 4};
  InterpOptions o;
  o.order = 1;
  std::vector<std::int8_t> s(5);
  map_coordinates(ref(data, DType::f64, {5}), ref(coords, DType::f64, {1, 5}), ref(s, DType::i8, {5}), o);
  EXPECT_EQ(s, (std::vector<std::int8_t>{3, -3, -3, 127, 1}));
  std::vector<std::uint8_t> u(5);
  map_coordinates(ref(data, DType::f64, {5}), ref(coords, DType::f64, {1, 5}), ref(u, DType::u8, {5}), o);
  EXPECT_EQ(u, (std::vector<std::uint8_t>{3, 0, 0, 255, 1}));
}

TEST(ResampleInterpolate, fortran_layout_and_threads_give_the_same_values) {
  // 5 x 6 x 7 volume in C order and the same values in Fortran order.
  const std::int64_t a = 5, b = 6, c = 7;
  std::vector<float> cdata(a * b * c), fdata(a * b * c);
  for (std::int64_t i = 0; i < a; ++i)
    for (std::int64_t j = 0; j < b; ++j)
      for (std::int64_t k = 0; k < c; ++k) {
        const float v = static_cast<float>(std::cos(0.3 * i + 0.7 * j - 0.2 * k) * 100);
        cdata[(i * b + j) * c + k] = v;
        fdata[i + a * (j + b * k)] = v;
      }
  ArrayRef cin = ref(cdata, DType::f32, {a, b, c});
  ArrayRef fin = cin;
  fin.data = fdata.data();
  fin.strides = {1, a, a * b};
  const double m[9] = {0.98, -0.17, 0.0, 0.17, 0.98, 0.05, 0.0, -0.05, 1.0};
  const double off[3] = {0.4, -0.3, 0.2};
  for (int order = 0; order <= 5; ++order) {
    InterpOptions o;
    o.order = order;
    o.mode = InterpMode::nearest;
    std::vector<double> r1(a * b * c), r2(a * b * c);
    o.threads = 1;
    affine_transform(cin, m, false, off, ref(r1, DType::f64, {a, b, c}), o);
    o.threads = 3;
    affine_transform(fin, m, false, off, ref(r2, DType::f64, {a, b, c}), o);
    EXPECT_EQ(r1, r2) << order;
  }
}

TEST(ResampleInterpolate, identity_affine_returns_the_input) {
  std::vector<double> data(24);
  std::iota(data.begin(), data.end(), 1.0);
  std::vector<double> out(24);
  const double m[2] = {1, 1};
  const double off[2] = {0, 0};
  InterpOptions o;
  o.order = 1;
  affine_transform(ref(data, DType::f64, {4, 6}), m, true, off, ref(out, DType::f64, {4, 6}), o);
  EXPECT_EQ(out, data);
}

TEST(ResampleInterpolate, hostile_arguments_are_invalid_argument_errors) {
  std::vector<double> data(4, 1.0), coords(4, 0.0), out(4);
  InterpOptions o;
  o.order = 6;
  auto expect_invalid = [](auto&& fn) {
    try {
      fn();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
    }
  };
  expect_invalid([&] {
    map_coordinates(ref(data, DType::f64, {4}), ref(coords, DType::f64, {1, 4}), ref(out, DType::f64, {4}), o);
  });
  o.order = 1;
  expect_invalid([&] {  // coordinates for a 2-D input
    map_coordinates(ref(data, DType::f64, {4}), ref(coords, DType::f64, {2, 2}), ref(out, DType::f64, {2}), o);
  });
  expect_invalid([&] {  // output shape differs from coordinates.shape[1:]
    map_coordinates(ref(data, DType::f64, {4}), ref(coords, DType::f64, {1, 4}), ref(out, DType::f64, {2, 2}), o);
  });
  expect_invalid([&] {
    const double m[3] = {1, 2, 3};
    const double off[1] = {0};
    affine_transform(ref(data, DType::f64, {4}), m, false, off, ref(out, DType::f64, {4}), o);
  });
  std::vector<std::uint8_t> rgb(12);
  expect_invalid([&] {
    map_coordinates(ref(rgb, DType::rgb24, {4}), ref(coords, DType::f64, {1, 4}), ref(out, DType::f64, {4}), o);
  });
  EXPECT_FALSE(interp_mode_from_name("bogus").has_value());
  EXPECT_EQ(interp_mode_from_name("grid-mirror"), InterpMode::reflect);
  // A shape whose size overflows 64 bits is refused before anything is allocated.
  ArrayRef huge = ref(out, DType::f64, {4});
  huge.shape = {std::int64_t{1} << 40, std::int64_t{1} << 40};
  huge.strides = {1, 1};
  try {
    const double m[2] = {1, 1};
    const double off[1] = {0};
    affine_transform(ref(data, DType::f64, {4}), m, false, off, huge, o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::limit);
  }
}

}  // namespace
