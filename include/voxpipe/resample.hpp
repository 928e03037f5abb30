// voxpipe/resample.hpp: spline interpolation with scipy.ndimage's values.
//
// map_coordinates and affine_transform compute what scipy.ndimage's functions of the same names
// compute (scipy 1.6 and later semantics, checked against 1.17): B-spline orders 0 to 5, the
// optional prefilter, and every boundary mode, in float64, with integer outputs rounded half
// away from zero and clipped to the type's range. Coordinates are array indices: sample k of
// axis d sits at coordinate k, whatever the memory layout (strides) of the array.
//
// Arrays are passed as strided views: the caller owns the memory, which must stay valid for
// the call. Strides are in elements (not bytes) and may be negative; any layout (C order,
// Fortran order, slices) is read and written in place. Output elements must not overlap each
// other or the input.
//
// Threads: every function splits its output over at most `threads` threads of the process's
// pool (0: the default, resolve_threads in voxpipe/threads.hpp); the prefilter splits over
// lines. Calls on different outputs may run concurrently. Errors: a voxpipe::Error with code
// invalid_argument (bad order, mode, shape or dtype) or limit (a size that overflows 64 bits),
// thrown before any output is written.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "voxpipe/dtype.hpp"

namespace voxpipe {

// Boundary modes, as scipy.ndimage names them ("grid-mirror" is another name of reflect).
enum class InterpMode : std::uint8_t {
  constant,       // cval outside [0, n-1]; inside, spline taps beyond the edge mirror
  grid_constant,  // the input continues with cval forever; interpolation crosses the edge
  nearest,        // the edge sample repeats
  reflect,        // half-sample symmetric: d c b a | a b c d | d c b a  (= grid-mirror)
  mirror,         // whole-sample symmetric: d c b | a b c d | c b a
  wrap,           // periodic with the first and last samples overlapping (scipy's "wrap")
  grid_wrap,      // periodic with period n: a b c d | a b c d | a b c d
};

// scipy's name of a mode ("grid-constant", ...); interp_mode_from_name also accepts
// "grid-mirror" and returns nullopt for an unknown name.
std::string_view interp_mode_name(InterpMode mode) noexcept;
std::optional<InterpMode> interp_mode_from_name(std::string_view name) noexcept;

// A strided N-D array the caller owns. shape and strides have one entry per axis; strides
// count elements. dtype: any integer type, float32 or float64 (not complex, not RGB).
struct ArrayRef {
  void* data = nullptr;
  DType dtype = DType::f64;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
};

struct InterpOptions {
  int order = 3;                   // B-spline order, 0 to 5
  InterpMode mode = InterpMode::constant;
  double cval = 0.0;               // value outside the input for constant and grid-constant
  bool prefilter = true;           // B-spline prefilter of the input when order > 1
  unsigned threads = 0;            // 0: the default (resolve_threads)
  // The value of grid-constant's 12-sample prefilter padding (order > 1 with prefilter). scipy
  // pads with np.pad on the input's dtype, so cval arrives there cast to that dtype (7.5 is 7 in
  // an integer input) while taps beyond the padding read cval itself. Unset: cval cast to the
  // input's dtype (integers: truncated toward zero, wrapped to the type's width as NumPy's cast
  // does on x86-64; NaN and values beyond 64 bits give 0).
  std::optional<double> pad_value;
  // Allows the kernel to sum the taps in another order, with fused multiply-adds, where that is
  // faster (orders 3 to 5 on float64/float32 data or coefficients, AVX2 and FMA). Values then
  // differ from scipy's by a few ulps (about 1e-15 of the data range) instead of being equal bit
  // for bit, and an integer output can differ by one where the value lies that close to a half.
  bool fast = false;
};

// output[p] = input interpolated at coordinates[:, p], for every index p of output.shape.
// coordinates: float32 or float64, shape (input.ndim, *output.shape). Same values as
// scipy.ndimage.map_coordinates(input, coordinates, output, order, mode, cval, prefilter).
// Coordinates that are NaN give cval, except in nearest and grid-constant modes where, as in
// scipy, they give NaN (order >= 1) or the first sample / cval (order 0); infinite coordinates
// and finite ones beyond +-2^62, where scipy's result is undefined behaviour, follow NaN's rule.
void map_coordinates(const ArrayRef& input, const ArrayRef& coordinates, const ArrayRef& output,
                     const InterpOptions& options);

// output[o] = input interpolated at matrix @ o + offset, for every index o of output.shape,
// without materialising the coordinates (they are made per output row). matrix: row-major,
// input.ndim rows by output.ndim columns, or (diagonal = true) the input.ndim entries of a
// diagonal, which needs output.ndim == input.ndim and follows scipy's zoom path (coordinate
// (o + offset / m) * m). offset: input.ndim entries. Same values as
// scipy.ndimage.affine_transform with a 2-D (or 1-D) matrix.
void affine_transform(const ArrayRef& input, std::span<const double> matrix, bool diagonal,
                      std::span<const double> offset, const ArrayRef& output,
                      const InterpOptions& options);

}  // namespace voxpipe
