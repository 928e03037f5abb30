// voxpipe._core's bindings of the transform readers (voxpipe/transforms.py): matrices come back
// as one (N, 4, 4) float64 array, a displacement field as an (X, Y, Z, 3) Fortran-ordered view
// of the reader's own buffer (no copy). Grids arrive as (shape, affine) from the Python layer,
// which accepts paths and image objects. The GIL is released while files are read.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gil.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/transform.hpp"

namespace nb = nanobind;
using namespace voxpipe;

namespace {

using GridArgs = std::tuple<std::vector<std::int64_t>, std::vector<double>>;

Grid to_grid(const GridArgs& g, const char* field) {
  const auto& [shape, affine] = g;
  if (shape.size() < 3 || affine.size() != 16)
    throw Error(ErrorCode::invalid_argument, "", field,
                "expected a shape of at least 3 axes and a 4x4 affine, but received " +
                    std::to_string(shape.size()) + " axes and " + std::to_string(affine.size()) +
                    " affine values");
  Grid out;
  for (int i = 0; i < 3; ++i) out.shape[i] = shape[i];
  for (int i = 0; i < 16; ++i) out.affine[i] = affine[i];
  return out;
}

AffineFormat affine_format(const std::string& name) {
  if (name == "auto" || name.empty()) return AffineFormat::automatic;
  if (name == "itk") return AffineFormat::itk;
  if (name == "fsl") return AffineFormat::fsl;
  if (name == "matrix") return AffineFormat::matrix;
  throw Error(ErrorCode::invalid_argument, "", "format",
              "expected None, 'itk', 'fsl' or 'matrix', but received '" + name + "'");
}

template <typename T>
nb::capsule owner_of(T* p) {
  return nb::capsule(p, [](void* q) noexcept { delete static_cast<T*>(q); });
}

}  // namespace

void bind_transforms(nb::module_& m) {
  m.def(
      "transform_read_affines",
      [](const std::string& path, const std::string& format, std::optional<GridArgs> reference,
         std::optional<GridArgs> moving) {
        AffineReadOptions o;
        o.format = affine_format(format);
        std::optional<Grid> ref, mov;
        if (reference) ref = to_grid(*reference, "reference");
        if (moving) mov = to_grid(*moving, "moving");
        o.reference = ref ? &*ref : nullptr;
        o.moving = mov ? &*mov : nullptr;
        auto* matrices = new std::vector<Matrix4>;
        nb::capsule owner = owner_of(matrices);
        {
          python::GilRelease release;
          *matrices = read_affines(path, o);
        }
        return nb::ndarray<nb::numpy, double, nb::ndim<3>>(
            matrices->data()->data(), {matrices->size(), 4, 4}, owner);
      },
      nb::arg("path"), nb::arg("format"), nb::arg("reference").none(), nb::arg("moving").none(),
      "Every linear transform of a file as an (N, 4, 4) float64 array, reference RAS -> moving "
      "RAS; grids are (shape, affine as 16 row-major values).");

  m.def(
      "transform_read_field",
      [](const std::string& path, const std::string& format) {
        FieldFormat f;
        if (format == "itk")
          f = FieldFormat::itk;
        else if (format == "ras")
          f = FieldFormat::ras;
        else
          throw Error(ErrorCode::invalid_argument, path, "format",
                      "expected 'itk' or 'ras', but received '" + format + "'");
        auto* field = new DisplacementField;
        nb::capsule owner = owner_of(field);
        {
          python::GilRelease release;
          *field = read_displacement_field(path, f);
        }
        const auto& s = field->grid.shape;
        const std::array<std::size_t, 4> shape{static_cast<std::size_t>(s[0]),
                                               static_cast<std::size_t>(s[1]),
                                               static_cast<std::size_t>(s[2]), 3};
        // Fortran order: three volumes one after the other, component last (and slowest).
        const std::array<std::int64_t, 4> strides{1, s[0], s[0] * s[1], s[0] * s[1] * s[2]};
        nb::ndarray<nb::numpy, double, nb::ndim<4>> data(field->data.data(), 4, shape.data(),
                                                        owner, strides.data());
        auto* affine = new Matrix4(field->grid.affine);
        nb::ndarray<nb::numpy, double, nb::ndim<2>> aff(affine->data(), {4, 4}, owner_of(affine));
        return nb::make_tuple(data, aff);
      },
      nb::arg("path"), nb::arg("format"),
      "A displacement field NIfTI as ((X, Y, Z, 3) float64 RAS mm, its 4x4 affine).");
}
