// The closest canonical (RAS+) orientation of a voxel grid, as nibabel's io_orientation and
// as_closest_canonical compute it, and a strided view of a volume in that orientation (no copy,
// no interpolation). Internal to the viewer (include/voxpipe/view.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace voxpipe::view {

// Where one voxel axis goes: the world axis (0 R, 1 A, 2 S) and whether it runs against it.
struct AxisOrientation {
  int world_axis = 0;
  bool flipped = false;
};

// nibabel's io_orientation(affine): per voxel axis, the world axis its direction is closest to
// and its sign, read from the polar (orthogonal) factor of the 3x3 part with columns normalised,
// taking for each voxel axis in turn the largest remaining entry (first on ties). A row-major
// 4x4 affine. Error(invalid_argument) naming `name` when the affine is not finite or its 3x3
// part is singular.
std::array<AxisOrientation, 3> io_orientation(const std::array<double, 16>& affine,
                                              const std::string& name);

// A Fortran-ordered volume seen in canonical orientation: canonical voxel (r, a, s), each
// index increasing towards Right, Anterior, Superior, is element
// origin + r * stride[0] + a * stride[1] + s * stride[2] of the data.
struct CanonicalGrid {
  std::array<std::int64_t, 3> shape{};
  std::array<std::int64_t, 3> stride{};  // in elements; negative along flipped axes
  std::int64_t origin = 0;
  std::array<double, 3> zooms{};  // voxel size (mm) along R, A, S: the affine's column norms

  std::int64_t offset(std::int64_t r, std::int64_t a, std::int64_t s) const noexcept {
    return origin + r * stride[0] + a * stride[1] + s * stride[2];
  }
};

// The canonical view of a volume of `shape` (Fortran order) with `affine`.
CanonicalGrid canonical_grid(const std::array<std::int64_t, 3>& shape,
                             const std::array<double, 16>& affine, const std::string& name);

}  // namespace voxpipe::view
