// B-splines of orders 0 to 5: the interpolation weights and the prefilter that turns samples into
// spline coefficients, both as scipy.ndimage computes them (ni_splines.c), so that the
// coefficients and weights, not only the final values, agree with scipy's.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "resample/spline_weights.hpp"
#include "voxpipe/resample.hpp"

namespace voxpipe::resample {

// floor(x) without the libm call (x86-64's baseline has no rounding instruction): the same
// value, signed zeros included, by truncation for |x| < 2^62.
inline double fast_floor(double x) {
  if (!(std::fabs(x) < 4611686018427387904.0)) return std::floor(x);
  const double d = static_cast<double>(static_cast<std::int64_t>(x));
  if (d == x) return x;
  return d > x ? d - 1.0 : d;
}

// Weights of the order + 1 taps around coordinate x (order 1 to 5). The first tap is at
// floor(x) - order / 2 for odd orders and floor(x + 0.5) - order / 2 for even ones. As in scipy,
// the last weight is 1 minus the others, so that the weights sum to 1 up to one rounding.
inline void spline_weights(double x, int order, double* w) {
  const double offset = x - fast_floor((order & 1) ? x : x + 0.5);  // from the central knot
  switch (order) {
    case 1: spline_weights_at<1>(offset, w); break;
    case 2: spline_weights_at<2>(offset, w); break;
    case 3: spline_weights_at<3>(offset, w); break;
    case 4: spline_weights_at<4>(offset, w); break;
    case 5: spline_weights_at<5>(offset, w); break;
    default: break;
  }
}

// Poles of the order's prefilter (1 for orders 2 and 3, 2 for orders 4 and 5); returns their
// number, 0 for orders 0 and 1 (no prefilter).
int spline_poles(int order, double poles[2]);

// Prefilters `lanes` lines of `len` samples in place, in lockstep: sample i of lane j is
// line[i * stride + j] (lanes = 1, stride = 1: one contiguous line). The boundary initialisation
// is scipy's for `mode`: mirror for constant, grid-constant, mirror and wrap; reflect for reflect
// and nearest; periodic for grid-wrap. Lines of one sample are left as they are.
void spline_filter_lines(double* line, std::int64_t len, std::int64_t stride, std::int64_t lanes,
                         int order, InterpMode mode);

// The vector instructions the prefilter may use: the best of the level in use (core/simd.hpp:
// AVX2 at the avx2 and avx512 levels, chosen at run time; VOXPIPE_SIMD=scalar gives the
// baseline) or the baseline x86-64's. Every choice gives the same coefficients, bit for
// bit (the tests compare them); `baseline` is there for those tests.
enum class SplineSimd { best, baseline };

// spline_filter_lines with the choice of instructions.
void spline_filter_lines(double* line, std::int64_t len, std::int64_t stride, std::int64_t lanes,
                         int order, InterpMode mode, SplineSimd simd);

// Prefilters the `count` contiguous lines of `len` samples at `p` (line l is p[l * len, (l + 1)
// * len)) in place, with the same result as spline_filter_lines(p + l * len, len, 1, 1, ...) on
// each, bit for bit: blocks of lines are transposed so that they filter in lockstep.
void spline_filter_contiguous(double* p, std::int64_t count, std::int64_t len, int order,
                              InterpMode mode, SplineSimd simd = SplineSimd::best);
// The same for lines `pitch` >= len apart (line l is p[l * pitch, l * pitch + len)).
void spline_filter_contiguous(double* p, std::int64_t count, std::int64_t len, std::int64_t pitch,
                              int order, InterpMode mode, SplineSimd simd = SplineSimd::best);

// The float64 spline coefficients of `input` (C order), as scipy's map_coordinates computes them
// before interpolating: for nearest and grid-constant the input is first padded by `npad` = 12
// samples on each side of every axis (edge values, or cval), as _prepad_for_spline_filter does;
// then every axis is prefiltered in turn. Lines are filtered in parallel on `threads` threads.
//
// For the other modes, whose taps beyond an edge read the coefficient map_tap names, the array
// is stored with a `margin` of order / 2 + 1 samples on each side of every axis holding exactly
// those coefficients (coefficient index i at map_tap(i) along each axis). A point whose
// coordinate lies inside [0, n - 1] on every axis then finds all its taps in memory, at their
// plain offsets, and the interpolation kernel treats it as an interior point: the same values,
// read without the per-tap boundary logic.
struct Coefficients {
  struct Free {
    void operator()(double* p) const noexcept;
  };
  // Uninitialised until filled (the tasks that fill a region touch it first), 2 MiB-aligned
  // with transparent huge pages when large: fresh 4 KiB pages cost ~13 us each on first touch
  // here (DESIGN.md), more than the filter itself.
  std::unique_ptr<double[], Free> data;
  std::size_t capacity = 0;           // doubles allocated at data
  double* origin = nullptr;           // coefficient (0, ..., 0), margin samples into data
  std::vector<std::int64_t> shape;    // input.shape + 2 * npad
  std::vector<std::int64_t> strides;  // C order over shape + 2 * margin, elements
  std::int64_t npad = 0;
  std::int64_t margin = 0;
};
// The margin spline_coefficients gives an array of `shape` (input.shape + 2 * npad).
std::int64_t spline_margin(const std::vector<std::int64_t>& shape, int order, InterpMode mode);
// `cval` is the padding value of grid-constant (InterpOptions::pad_value, resolved).
// `reuse`: coefficients no longer needed (of an earlier call, or empty) whose memory the result
// takes when it holds enough, already faulted in; otherwise it is freed before the new array is
// allocated, so that no more than one array is held at a time.
Coefficients spline_coefficients(const ArrayRef& input, int order, InterpMode mode, double cval,
                                 unsigned threads, Coefficients reuse = {});

// cval cast to the element type `t` as NumPy's unsafe cast does (see InterpOptions::pad_value).
double cast_to_dtype(double cval, DType t);

}  // namespace voxpipe::resample
