// voxpipe._core's viewer (voxpipe/_integrations/view.py): render_view over a Fortran-ordered float32 volume,
// to PNG bytes or to a file. The Python layer reads the image (dataobj, one volume) and passes
// the array and its affine; the GIL is released while the picture is drawn and encoded.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <array>
#include <string>
#include <vector>

#include "conversions.hpp"
#include "gil.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/view.hpp"

namespace nb = nanobind;
using namespace voxpipe;

namespace {

using Volume = nb::ndarray<const float, nb::ndim<3>, nb::f_contig, nb::device::cpu>;

ViewVolume to_volume(const Volume& data, const std::vector<double>& affine) {
  if (affine.size() != 16)
    throw Error(ErrorCode::invalid_argument, "", "affine",
                "expected 16 values (a 4x4 matrix), but received " + std::to_string(affine.size()));
  ViewVolume v;
  v.data = std::span(data.data(), data.size());
  for (int k = 0; k < 3; ++k) v.shape[k] = static_cast<std::int64_t>(data.shape(k));
  std::copy(affine.begin(), affine.end(), v.affine.begin());
  return v;
}

ViewOptions options(bool mosaic) {
  ViewOptions o;
  o.layout = mosaic ? ViewLayout::mosaic : ViewLayout::orthogonal;
  return o;
}

}  // namespace

void bind_view(nb::module_& m) {
  m.def(
      "view_png",
      [](const Volume& data, const std::vector<double>& affine, bool mosaic,
         const std::string& name) {
        std::vector<std::uint8_t> png;
        {
          python::GilRelease release;
          png = encode_png(render_view(to_volume(data, affine), options(mosaic), name));
        }
        return python::to_bytes(png);
      },
      nb::arg("data"), nb::arg("affine"), nb::arg("mosaic"), nb::arg("name"),
      "The PNG bytes of render_view(data, affine): data a Fortran-ordered float32 3-D array.");
  m.def(
      "view_write",
      [](const Volume& data, const std::vector<double>& affine, bool mosaic,
         const std::string& name, const std::string& path) {
        write_png(path, render_view(to_volume(data, affine), options(mosaic), name));
      },
      nb::arg("data"), nb::arg("affine"), nb::arg("mosaic"), nb::arg("name"), nb::arg("path"),
      nb::call_guard<python::GilRelease>(),
      "Writes render_view(data, affine) as a PNG file at path (atomically, replacing it).");
}
