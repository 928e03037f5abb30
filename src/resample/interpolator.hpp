// The interpolation kernel behind map_coordinates and affine_transform, for callers inside the
// resampler that make their coordinates themselves: the streaming executor (a displacement-field
// chain's coordinates come from one shared array of points, per segment) and the field sampler
// (points given in batches). Same values as the public functions for the same coordinates.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "voxpipe/resample.hpp"

namespace voxpipe::resample {

struct Coefficients;  // bspline.hpp

// Writes the coordinates of the n output points from k0 along one row (the output indices of
// every axis but the last are row_index[0 .. ndim-2]) into buf[d * n + k], d < input.ndim.
using RowCoordinates =
    std::function<void(const std::int64_t* row_index, std::int64_t k0, std::int64_t n, double* buf)>;

// Holds what the kernel reads: the input itself, or its spline coefficients (computed by the
// constructor, on options.threads threads). The input must outlive the object when it is read
// directly (orders 0 and 1, or prefilter off). Const members may be called from several threads.
class Interpolator {
 public:
  // Checks the order, the mode and the input (Error(invalid_argument)) and prefilters.
  Interpolator(const ArrayRef& input, const InterpOptions& options);
  // The same, with the coefficients made in `storage` (in its memory when it holds enough:
  // spline_coefficients' `reuse`), which must outlive the object; they stay there after it.
  Interpolator(const ArrayRef& input, const InterpOptions& options, Coefficients& storage);
  ~Interpolator();
  Interpolator(const Interpolator&) = delete;
  Interpolator& operator=(const Interpolator&) = delete;

  // Fills every element of `output` (any real dtype, any strides) on `threads` threads of the
  // pool, asking `coords` for each segment's coordinates, as affine_transform does.
  void fill(const ArrayRef& output, unsigned threads, const RowCoordinates& coords) const;

  // Values at n points, coordinate d of point k at coords[d * n + k], into out[k] (float64,
  // before any output conversion). Runs on the calling thread.
  void evaluate(const double* coords, std::int64_t n, double* out) const;

 private:
  Interpolator(const ArrayRef& input, const InterpOptions& options, Coefficients* storage);

  struct State;
  std::unique_ptr<State> state_;
};

// voxpipe::affine_transform with the coefficients made in `storage`, as the constructor above
// (the streaming executor's slots keep theirs from volume to volume: the same pages, already
// faulted in).
void affine_transform(const ArrayRef& input, std::span<const double> matrix, bool diagonal,
                      std::span<const double> offset, const ArrayRef& output,
                      const InterpOptions& options, Coefficients& storage);

// Whether the kernels chosen from now on may use SIMD: core::simd_level() above scalar (see
// core/simd.hpp: the best level the CPU has unless VOXPIPE_SIMD asks for less; `scalar`, `0`
// or `off` turn it off). The taps' vector path is AVX2's at the avx2 and avx512 levels.
// set_simd_enabled(false) requests the scalar level, set_simd_enabled(true) the best one, for
// the whole core (the conversion kernels too). Tests compare the paths.
bool simd_enabled() noexcept;
void set_simd_enabled(bool on) noexcept;

}  // namespace voxpipe::resample
