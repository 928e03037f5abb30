#include "view/orientation.hpp"

#include <cmath>

#include "core/mat3.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::view {

namespace {

using core::det3;
using core::Mat3;
using core::polar_factor;

std::array<double, 3> column_norms(const std::array<double, 16>& a) {
  std::array<double, 3> z{};
  for (int j = 0; j < 3; ++j)
    z[j] = std::sqrt(a[j] * a[j] + a[4 + j] * a[4 + j] + a[8 + j] * a[8 + j]);
  return z;
}

}  // namespace

std::array<AxisOrientation, 3> io_orientation(const std::array<double, 16>& affine,
                                              const std::string& name) {
  for (double v : affine)
    if (!std::isfinite(v))
      throw Error(ErrorCode::invalid_argument, name, "affine",
                  "expected finite values, but found " + std::to_string(v));
  const std::array<double, 3> zooms = column_norms(affine);
  Mat3 rs;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) rs[i][j] = zooms[j] > 0 ? affine[i * 4 + j] / zooms[j] : 0.0;
  // Columns have unit norm, so |det| <= 1; below this no axis direction can be trusted (nibabel
  // would leave such an axis without orientation and as_closest_canonical would fail).
  if (!(std::abs(det3(rs)) > 1e-10))
    throw Error(ErrorCode::invalid_argument, name, "affine",
                "expected a 3x3 part of full rank, but found a singular one");
  Mat3 r = polar_factor(rs);
  std::array<AxisOrientation, 3> out{};
  for (int in_ax = 0; in_ax < 3; ++in_ax) {
    int best = 0;
    for (int w = 1; w < 3; ++w)
      if (std::abs(r[w][in_ax]) > std::abs(r[best][in_ax])) best = w;
    out[in_ax] = {best, r[best][in_ax] < 0};
    r[best] = {0.0, 0.0, 0.0};  // that world axis is taken
  }
  return out;
}

CanonicalGrid canonical_grid(const std::array<std::int64_t, 3>& shape,
                             const std::array<double, 16>& affine, const std::string& name) {
  const std::array<AxisOrientation, 3> o = io_orientation(affine, name);
  const std::array<double, 3> zooms = column_norms(affine);
  const std::array<std::int64_t, 3> f_stride{1, shape[0], shape[0] * shape[1]};
  CanonicalGrid g;
  for (int i = 0; i < 3; ++i) {
    const int w = o[i].world_axis;
    g.shape[w] = shape[i];
    g.zooms[w] = zooms[i];
    if (o[i].flipped) {
      g.stride[w] = -f_stride[i];
      g.origin += (shape[i] - 1) * f_stride[i];
    } else {
      g.stride[w] = f_stride[i];
    }
  }
  return g;
}

}  // namespace voxpipe::view
