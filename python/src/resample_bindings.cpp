// voxpipe._core's interpolation: map_coordinates and affine_transform over NumPy arrays of any
// layout (strided views, no copies), with the GIL released while they run. The scipy-shaped
// signatures, output allocation and argument normalisation live in voxpipe/_foundation/interpolate.py.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "gil.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/resample.hpp"

namespace nb = nanobind;
using namespace voxpipe;

namespace {

using InArray = nb::ndarray<nb::ro, nb::device::cpu>;
using OutArray = nb::ndarray<nb::device::cpu>;

DType dtype_of(const nb::dlpack::dtype& t, const char* field) {
  using nb::dlpack::dtype_code;
  const auto code = static_cast<dtype_code>(t.code);
  if (t.lanes == 1) {
    if (code == dtype_code::Float && t.bits == 32) return DType::f32;
    if (code == dtype_code::Float && t.bits == 64) return DType::f64;
    if (code == dtype_code::Int || code == dtype_code::UInt) {
      const bool u = code == dtype_code::UInt;
      switch (t.bits) {
        case 8: return u ? DType::u8 : DType::i8;
        case 16: return u ? DType::u16 : DType::i16;
        case 32: return u ? DType::u32 : DType::i32;
        case 64: return u ? DType::u64 : DType::i64;
      }
    }
  }
  throw Error(ErrorCode::invalid_argument, "", field,
              "expected an integer, float32 or float64 array, but received dtype code " +
                  std::to_string(t.code) + " of " + std::to_string(t.bits) + " bits");
}

template <typename A>
ArrayRef view(const A& a, const char* field) {
  ArrayRef r;
  r.data = const_cast<void*>(static_cast<const void*>(a.data()));
  r.dtype = dtype_of(a.dtype(), field);
  for (std::size_t i = 0; i < a.ndim(); ++i) {
    r.shape.push_back(static_cast<std::int64_t>(a.shape(i)));
    r.strides.push_back(static_cast<std::int64_t>(a.stride(i)));
  }
  return r;
}

InterpOptions options(int order, const std::string& mode, double cval, bool prefilter,
                      unsigned threads, std::optional<double> pad_value, bool fast) {
  InterpOptions o;
  o.order = order;
  const auto m = interp_mode_from_name(mode);
  if (!m)
    throw Error(ErrorCode::invalid_argument, "", "mode",
                "expected one of constant, grid-constant, nearest, reflect, grid-mirror, mirror, "
                "wrap, grid-wrap, but received '" + mode + "'");
  o.mode = *m;
  o.cval = cval;
  o.prefilter = prefilter;
  o.threads = threads;
  o.pad_value = pad_value;
  o.fast = fast;
  return o;
}

}  // namespace

void bind_resample(nb::module_& m) {
  m.def(
      "resample_map_coordinates",
      [](InArray input, InArray coordinates, OutArray output, int order, const std::string& mode,
         double cval, bool prefilter, unsigned threads, std::optional<double> pad_value,
         bool fast) {
        const ArrayRef in = view(input, "input");
        const ArrayRef co = view(coordinates, "coordinates");
        const ArrayRef out = view(output, "output");
        const InterpOptions o = options(order, mode, cval, prefilter, threads, pad_value, fast);
        python::GilRelease release;
        map_coordinates(in, co, out, o);
      },
      nb::arg("input"), nb::arg("coordinates"), nb::arg("output"), nb::arg("order"),
      nb::arg("mode"), nb::arg("cval"), nb::arg("prefilter"), nb::arg("threads") = 0, nb::arg("pad_value") = nb::none(), nb::arg("fast") = false,
      "Fill `output` with `input` interpolated at `coordinates` (scipy.ndimage.map_coordinates).");

  m.def(
      "resample_affine_transform",
      [](InArray input, const std::vector<double>& matrix, bool diagonal,
         const std::vector<double>& offset, OutArray output, int order, const std::string& mode,
         double cval, bool prefilter, unsigned threads, std::optional<double> pad_value,
         bool fast) {
        const ArrayRef in = view(input, "input");
        const ArrayRef out = view(output, "output");
        const InterpOptions o = options(order, mode, cval, prefilter, threads, pad_value, fast);
        python::GilRelease release;
        affine_transform(in, matrix, diagonal, offset, out, o);
      },
      nb::arg("input"), nb::arg("matrix"), nb::arg("diagonal"), nb::arg("offset"),
      nb::arg("output"), nb::arg("order"), nb::arg("mode"), nb::arg("cval"),
      nb::arg("prefilter"), nb::arg("threads") = 0, nb::arg("pad_value") = nb::none(), nb::arg("fast") = false,
      "Fill `output` with `input` interpolated at matrix @ index + offset "
      "(scipy.ndimage.affine_transform; `matrix` row-major input.ndim x output.ndim, or its "
      "diagonal).");
}
