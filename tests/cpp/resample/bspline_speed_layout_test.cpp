// The prefilter's faster layouts give the plain one-line-at-a-time coefficients bit for bit:
// the last axis's lines transposed into blocks and filtered in lockstep (spline_filter_contiguous,
// whole and partial blocks, lines of 2 samples and more, lengths that are and are not multiples
// of 4), the baseline and the AVX2 kernels, and spline_coefficients on whole arrays. Bit for
// bit, not nearly: the single-line filter is scipy's arithmetic, which the Python tests compare
// with scipy itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "resample/boundary.hpp"
#include "resample/bspline.hpp"
#include "voxpipe/resample.hpp"

namespace {

using namespace voxpipe;
using resample::SplineSimd;

constexpr InterpMode kModes[] = {InterpMode::constant, InterpMode::grid_constant,
                                 InterpMode::nearest,  InterpMode::reflect,
                                 InterpMode::mirror,   InterpMode::wrap,
                                 InterpMode::grid_wrap};

std::vector<double> random_values(std::size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(20.0, 100.0);
  std::vector<double> v(n);
  for (double& x : v) x = normal(rng);
  return v;
}

// Same bits, or both NaN (a NaN's sign and payload depend on operand order, not on the value).
::testing::AssertionResult same_bits(const std::vector<double>& got,
                                     const std::vector<double>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;
    if (std::memcmp(&got[i], &want[i], sizeof(double)) != 0)
      return ::testing::AssertionFailure()
             << "element " << i << ": " << got[i] << " != " << want[i] << " (differ by "
             << got[i] - want[i] << ")";
  }
  return ::testing::AssertionSuccess();
}

// Every line filtered alone: spline_filter_lines with one lane, baseline instructions.
std::vector<double> one_by_one(std::vector<double> v, std::int64_t count, std::int64_t len,
                               int order, InterpMode mode) {
  for (std::int64_t l = 0; l < count; ++l)
    resample::spline_filter_lines(v.data() + l * len, len, 1, 1, order, mode,
                                  SplineSimd::baseline);
  return v;
}

TEST(ResampleBsplineLayout, contiguous_blocks_equal_single_lines) {
  unsigned seed = 1;
  for (int order = 2; order <= 5; ++order) {
    for (InterpMode mode : kModes) {
      for (std::int64_t len : {2, 3, 4, 5, 7, 8, 13, 60, 61}) {
        for (std::int64_t count : {1, 3, 15, 16, 17, 32, 33, 64, 70}) {
          const auto v = random_values(static_cast<std::size_t>(count * len), seed++);
          const auto want = one_by_one(v, count, len, order, mode);
          for (SplineSimd simd : {SplineSimd::best, SplineSimd::baseline}) {
            auto got = v;
            resample::spline_filter_contiguous(got.data(), count, len, order, mode, simd);
            EXPECT_TRUE(same_bits(got, want))
                << "order " << order << " mode " << interp_mode_name(mode) << " len " << len
                << " count " << count << (simd == SplineSimd::best ? " best" : " baseline");
          }
        }
      }
    }
  }
}

TEST(ResampleBsplineLayout, orders_without_poles_and_single_samples_are_left_alone) {
  const auto v = random_values(40, 7);
  for (int order : {0, 1}) {
    auto got = v;
    resample::spline_filter_contiguous(got.data(), 8, 5, order, InterpMode::mirror);
    EXPECT_TRUE(same_bits(got, v));
  }
  auto got = v;
  resample::spline_filter_contiguous(got.data(), 40, 1, 3, InterpMode::mirror);
  EXPECT_TRUE(same_bits(got, v));
}

TEST(ResampleBsplineLayout, strided_lanes_equal_single_lines_with_either_instruction_set) {
  unsigned seed = 1000;
  for (int order = 2; order <= 5; ++order) {
    for (InterpMode mode : kModes) {
      for (std::int64_t len : {2, 3, 9, 30}) {
        for (std::int64_t lanes : {1, 3, 4, 5, 16, 64, 70}) {
          const std::int64_t stride = lanes + 3;  // rows wider than the lanes filtered
          const auto v = random_values(static_cast<std::size_t>(len * stride), seed++);
          // Reference: each lane gathered into a line of its own and filtered alone.
          auto want = v;
          for (std::int64_t j = 0; j < lanes; ++j) {
            std::vector<double> line(static_cast<std::size_t>(len));
            for (std::int64_t i = 0; i < len; ++i) line[i] = v[i * stride + j];
            resample::spline_filter_lines(line.data(), len, 1, 1, order, mode,
                                          SplineSimd::baseline);
            for (std::int64_t i = 0; i < len; ++i) want[i * stride + j] = line[i];
          }
          for (SplineSimd simd : {SplineSimd::best, SplineSimd::baseline}) {
            auto got = v;
            resample::spline_filter_lines(got.data(), len, stride, lanes, order, mode, simd);
            EXPECT_TRUE(same_bits(got, want))
                << "order " << order << " mode " << interp_mode_name(mode) << " len " << len
                << " lanes " << lanes << (simd == SplineSimd::best ? " best" : " baseline");
          }
        }
      }
    }
  }
}

TEST(ResampleBsplineLayout, lanes_stay_independent_of_infinities_and_nans) {
  // One lane of a block holds an infinity, another a NaN: the others filter as if alone.
  const std::int64_t count = 16, len = 11;
  auto v = random_values(static_cast<std::size_t>(count * len), 99);
  v[3 * len + 4] = INFINITY;
  v[9 * len] = NAN;
  const auto want = one_by_one(v, count, len, 3, InterpMode::mirror);
  auto got = v;
  resample::spline_filter_contiguous(got.data(), count, len, 3, InterpMode::mirror);
  EXPECT_TRUE(same_bits(got, want));
  for (std::int64_t i = 0; i < len; ++i) EXPECT_TRUE(std::isfinite(got[i])) << i;
}

// spline_coefficients against each axis filtered line by line, in scipy's order (first axis
// first), for modes without padding; the float32 input is converted first, as the library does.
// Where the last axis is long enough the array carries a margin, which must hold the taps'
// coefficients (map_tap along every axis), corners included.
TEST(ResampleBsplineLayout, coefficients_equal_every_axis_filtered_line_by_line) {
  const std::vector<std::vector<std::int64_t>> shapes = {
      {7}, {2, 3}, {5, 17}, {3, 1, 9}, {4, 6, 2}, {6, 5, 23}, {2, 40, 33}, {19}, {1, 2, 16},
      {3, 1, 17}};
  unsigned seed = 5000;
  for (const auto& shape : shapes) {
    std::int64_t total = 1;
    for (auto n : shape) total *= n;
    const auto d64 = random_values(static_cast<std::size_t>(total), seed++);
    std::vector<float> input(d64.begin(), d64.end());
    ArrayRef in;
    in.data = input.data();
    in.dtype = DType::f32;
    in.shape = shape;
    in.strides.assign(shape.size(), 1);
    for (std::size_t d = shape.size(); d-- > 1;) in.strides[d - 1] = in.strides[d] * shape[d];
    for (int order = 2; order <= 5; ++order) {
      for (InterpMode mode : {InterpMode::mirror, InterpMode::reflect, InterpMode::wrap,
                              InterpMode::grid_wrap}) {
        std::vector<double> want(input.begin(), input.end());
        for (std::size_t d = 0; d < shape.size(); ++d) {
          const std::int64_t len = shape[d], s = in.strides[d];
          for (std::int64_t start = 0; start < total; ++start) {
            if ((start / s) % len != 0) continue;  // one line per start at index 0 along d
            std::vector<double> line(static_cast<std::size_t>(len));
            for (std::int64_t i = 0; i < len; ++i) line[i] = want[start + i * s];
            resample::spline_filter_lines(line.data(), len, 1, 1, order, mode,
                                          SplineSimd::baseline);
            for (std::int64_t i = 0; i < len; ++i) want[start + i * s] = line[i];
          }
        }
        for (unsigned threads : {1u, 3u}) {
          const auto c = resample::spline_coefficients(in, order, mode, 0.0, threads);
          ASSERT_EQ(c.npad, 0);
          ASSERT_EQ(c.margin, shape.back() >= 16 ? order / 2 + 1 : 0);
          // Every element of the stored array, margin included: coefficient i along each axis
          // is the filtered sample at map_tap(i) (i itself inside).
          const std::int64_t m = c.margin;
          const std::size_t nd = shape.size();
          std::vector<std::int64_t> idx(nd);
          for (std::size_t d = 0; d < nd; ++d) idx[d] = -m;
          std::vector<double> got, expect;
          for (;;) {
            std::int64_t at = 0, from = 0;
            for (std::size_t d = 0; d < nd; ++d) {
              at += idx[d] * c.strides[d];
              std::int64_t i = idx[d];
              if (i < 0 || i >= shape[d]) i = resample::map_tap(i, shape[d], resample::tap_mode(mode));
              from += i * in.strides[d];
            }
            got.push_back(c.origin[at]);
            expect.push_back(want[static_cast<std::size_t>(from)]);
            std::size_t d = nd;
            while (d-- > 0 && ++idx[d] == shape[d] + m) idx[d] = -m;
            if (d == static_cast<std::size_t>(-1)) break;
          }
          EXPECT_TRUE(same_bits(got, expect))
              << "shape " << ::testing::PrintToString(shape) << " order " << order << " mode "
              << interp_mode_name(mode) << " threads " << threads;
        }
      }
    }
  }
}

}  // namespace

// spline_coefficients into a reused array (its memory full of NaN from before) gives the same
// coefficients as into a fresh one, bit for bit, margin and padding included, in that memory;
// an array too small for the input is replaced.
TEST(ResampleBsplineLayout, coefficients_in_reused_memory_equal_fresh_ones) {
  const std::vector<std::int64_t> big = {6, 7, 40}, shape = {5, 6, 33};
  std::int64_t total = 1;
  for (auto n : shape) total *= n;
  const auto values = random_values(static_cast<std::size_t>(total), 77);
  ArrayRef in;
  in.data = const_cast<double*>(values.data());
  in.dtype = DType::f64;
  in.shape = shape;
  in.strides = {shape[1] * shape[2], shape[2], 1};
  const auto stored = [](const resample::Coefficients& c) {
    std::int64_t n = 1;
    for (std::size_t d = 0; d < c.shape.size(); ++d) n *= c.shape[d] + 2 * c.margin;
    const double* first = c.origin;
    for (std::size_t d = 0; d < c.shape.size(); ++d) first -= c.margin * c.strides[d];
    return std::vector<double>(first, first + n);
  };
  std::vector<double> bigger(6 * 7 * 40, 1.0);
  ArrayRef large = in;
  large.data = bigger.data();
  large.shape = big;
  large.strides = {7 * 40, 40, 1};
  for (InterpMode mode : {InterpMode::mirror, InterpMode::constant, InterpMode::nearest,
                          InterpMode::grid_constant}) {
    for (int order : {2, 3, 5}) {
      const auto fresh = resample::spline_coefficients(in, order, mode, 1.5, 2);
      auto old = resample::spline_coefficients(large, order, mode, 1.5, 2);
      std::fill(old.data.get(), old.data.get() + old.capacity, std::nan(""));
      const double* memory = old.data.get();
      const auto reused = resample::spline_coefficients(in, order, mode, 1.5, 2, std::move(old));
      EXPECT_EQ(reused.data.get(), memory);
      EXPECT_EQ(reused.margin, fresh.margin);
      EXPECT_EQ(reused.strides, fresh.strides);
      EXPECT_TRUE(same_bits(stored(reused), stored(fresh)))
          << "order " << order << " mode " << interp_mode_name(mode);
      // The other way round: the small array cannot hold the large input's coefficients.
      auto small = resample::spline_coefficients(in, order, mode, 1.5, 2);
      const auto grown = resample::spline_coefficients(large, order, mode, 1.5, 2, std::move(small));
      EXPECT_GE(grown.capacity, stored(grown).size());
      EXPECT_TRUE(same_bits(stored(grown),
                            stored(resample::spline_coefficients(large, order, mode, 1.5, 2))));
    }
  }
}

namespace {

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, std::int16_t>) return DType::i16;
  if constexpr (std::is_same_v<T, std::uint8_t>) return DType::u8;
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  return DType::f64;
}

// `values` (C order over `shape`) laid out in a buffer of its own: axis order[0] closest in
// memory, order[1] next and so on, axis d every |step[d]| elements, reversed where step[d] < 0.
// The elements between those used hold NaN (or the type's lowest value) so that a read of the
// wrong element shows.
template <class T>
ArrayRef strided_view(const std::vector<T>& values, const std::vector<std::int64_t>& shape,
                      const std::vector<std::size_t>& order, const std::vector<std::int64_t>& step,
                      std::vector<T>& buffer) {
  const std::size_t nd = shape.size();
  std::vector<std::int64_t> strides(nd);
  std::int64_t extent = 1;
  for (std::size_t d : order) {
    strides[d] = extent * std::abs(step[d]);
    extent *= shape[d] * std::abs(step[d]);
  }
  buffer.assign(static_cast<std::size_t>(extent), std::numeric_limits<T>::has_quiet_NaN
                                                      ? std::numeric_limits<T>::quiet_NaN()
                                                      : std::numeric_limits<T>::lowest());
  std::int64_t origin = 0;
  for (std::size_t d = 0; d < nd; ++d) {
    if (step[d] < 0) {
      origin += (shape[d] - 1) * strides[d];
      strides[d] = -strides[d];
    }
  }
  std::vector<std::int64_t> idx(nd, 0);
  for (const T& v : values) {
    std::int64_t at = origin;
    for (std::size_t d = 0; d < nd; ++d) at += idx[d] * strides[d];
    buffer[static_cast<std::size_t>(at)] = v;
    for (std::size_t d = nd; d-- > 0 && ++idx[d] == shape[d];) idx[d] = 0;
  }
  ArrayRef a;
  a.data = buffer.data() + origin;
  a.dtype = dtype_of<T>();
  a.shape = shape;
  a.strides = strides;
  return a;
}

// Every stored element of `c`, margin included.
std::vector<double> stored(const resample::Coefficients& c) {
  std::int64_t n = 1;
  for (std::size_t d = 0; d < c.shape.size(); ++d) n *= c.shape[d] + 2 * c.margin;
  const double* first = c.origin;
  for (std::size_t d = 0; d < c.shape.size(); ++d) first -= c.margin * c.strides[d];
  return std::vector<double>(first, first + n);
}

template <class T>
void expect_layouts_agree(unsigned seed) {
  struct Layout {
    std::vector<std::int64_t> shape;
    std::vector<std::size_t> order;  // fastest axis first
    std::vector<std::int64_t> step;
  };
  // Fortran order (the NIfTI case) with the close axis longer than one tile (64 elements, 128
  // for 1-byte types) and not a multiple of it; a last axis longer than one tile (256); 2-D and
  // 4-D; negative and odd steps; the close axis in the middle; an axis of one element; a last
  // axis too short for a margin.
  const std::vector<Layout> layouts = {
      {{70, 5, 37}, {0, 1, 2}, {1, 1, 1}},     {{67, 35}, {0, 1}, {1, 1}},
      {{5, 3, 4, 33}, {0, 1, 2, 3}, {1, 1, 1, 1}}, {{70, 5, 37}, {0, 1, 2}, {-1, 1, 1}},
      {{66, 4, 19}, {0, 1, 2}, {3, 1, -2}},    {{3, 130, 17}, {1, 0, 2}, {1, 1, 1}},
      {{90, 1, 20}, {0, 1, 2}, {1, 1, 1}},      {{66, 7}, {0, 1}, {-1, 1}},
      {{1, 40, 30}, {0, 1, 2}, {1, -1, 1}},     {{40, 2, 263}, {0, 1, 2}, {1, 1, 1}},
      {{131, 3, 5}, {0, 1, 2}, {1, 1, 1}}};
  for (const Layout& l : layouts) {
    std::int64_t total = 1;
    for (auto n : l.shape) total *= n;
    const auto d64 = random_values(static_cast<std::size_t>(total), seed++);
    std::vector<T> values;
    for (double x : d64) {
      if constexpr (std::is_integral_v<T>)  // through int64: uint8 wraps the negative values
        values.push_back(static_cast<T>(static_cast<std::int64_t>(x)));
      else
        values.push_back(static_cast<T>(x));
    }
    ArrayRef c_order;
    c_order.data = values.data();
    c_order.dtype = dtype_of<T>();
    c_order.shape = l.shape;
    c_order.strides.assign(l.shape.size(), 1);
    for (std::size_t d = l.shape.size(); d-- > 1;)
      c_order.strides[d - 1] = c_order.strides[d] * l.shape[d];
    std::vector<T> buffer;
    const ArrayRef view = strided_view(values, l.shape, l.order, l.step, buffer);
    for (int order : {2, 3, 5}) {
      for (InterpMode mode : kModes) {
        const auto want = resample::spline_coefficients(c_order, order, mode, 7.0, 1);
        for (unsigned threads : {1u, 3u}) {
          const auto got = resample::spline_coefficients(view, order, mode, 7.0, threads);
          EXPECT_EQ(got.strides, want.strides);
          EXPECT_TRUE(same_bits(stored(got), stored(want)))
              << dtype_name(dtype_of<T>()) << " shape " << ::testing::PrintToString(l.shape)
              << " order " << ::testing::PrintToString(l.order) << " step "
              << ::testing::PrintToString(l.step) << " spline order " << order << " mode "
              << interp_mode_name(mode) << " threads " << threads;
        }
      }
    }
  }
}

}  // namespace

// The copy into float64 reads Fortran-ordered and strided inputs in tiles rather than a row at a
// time: the coefficients are those of the same values in C order, bit for bit, padding (nearest,
// grid-constant) and margin included, for integer and float inputs.
TEST(ResampleBsplineLayout, fortran_and_strided_inputs_give_the_c_order_coefficients) {
  expect_layouts_agree<std::int16_t>(9000);
  expect_layouts_agree<float>(9100);
  expect_layouts_agree<std::uint8_t>(9200);
  expect_layouts_agree<double>(9300);
}
