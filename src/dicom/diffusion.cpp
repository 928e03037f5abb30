// A diffusion series' gradient table in FSL's convention (include/voxpipe/dicom_series.hpp).
//
// dcm2niix expresses each direction in the written image's voxel axes (read, phase and slice
// directions: siemensPhilipsCorrectBvecs in nii_dicom_batch.cpp) and negates x when the image's
// determinant is positive (FSL reads .bvec in a frame whose x is flipped for such images). The
// same is done here for any affine the caller writes, so that the vectors stay right whatever
// axes it flips or permutes: the direction, taken from LPS to RAS, is projected on the affine's
// unit column directions (the slice axis as the normal of the first two, on the side of the third
// column: a gantry tilt's shear does not tilt the gradient, as dcm2niix uses the normal).
#include <cmath>
#include <string>

#include "voxpipe/dicom_series.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe {
namespace {

using Vec3 = std::array<double, 3>;

double dot(const Vec3& a, const Vec3& b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }
Vec3 cross(const Vec3& a, const Vec3& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}
bool normalise(Vec3& v) {
  const double n = std::sqrt(dot(v, v));
  if (!(n > 0) || !std::isfinite(n)) return false;
  for (double& x : v) x /= n;
  return true;
}

std::string where(const DicomSeries& s, const DicomSlice& im) {
  return im.file ? im.file->path + (im.frame ? " frame " + std::to_string(im.frame) : "")
                 : s.series_instance_uid;
}

}  // namespace

std::optional<DicomGradientTable> dicom_gradient_table(const DicomSeries& series,
                                                       const std::array<double, 16>& affine) {
  bool any = false;
  for (const DicomSlice& im : series.images) any |= im.diffusion.has_value();
  // A series with a problem has its images in file order, not volume by volume.
  if (!any || !series.problem.empty() || series.slices == 0 ||
      series.images.size() != series.slices * std::max<std::uint64_t>(series.volumes, 1))
    return std::nullopt;
  const std::string name = series.images.front().file ? series.images.front().file->path
                                                      : series.series_instance_uid;
  Vec3 columns[3];
  for (int c = 0; c < 3; ++c)
    columns[c] = {affine[0 * 4 + c], affine[1 * 4 + c], affine[2 * 4 + c]};
  const double det = dot(columns[0], cross(columns[1], columns[2]));
  Vec3 u = columns[0], v = columns[1];
  if (!normalise(u) || !normalise(v) || !std::isfinite(det))
    throw Error(ErrorCode::invalid_argument, name, "affine",
                "has a zero or non-finite column: no voxel axes to express gradients in");
  Vec3 w = cross(u, v);
  if (!normalise(w))
    throw Error(ErrorCode::invalid_argument, name, "affine", "its first two columns are parallel");
  if (dot(w, columns[2]) < 0)
    for (double& x : w) x = -x;

  DicomGradientTable table;
  const std::uint64_t volumes = std::max<std::uint64_t>(series.volumes, 1);
  for (std::uint64_t vol = 0; vol < volumes; ++vol) {
    const DicomSlice& first = series.images[vol * series.slices];
    // Every slice of a volume must state the same encoding: an image without one counts as
    // b = 0 (GE leaves (0018,9087) out of b = 0 images).
    const auto b_of = [](const DicomSlice& im) { return im.diffusion ? im.diffusion->b_value : 0.0; };
    const double b = b_of(first);
    for (std::uint64_t k = 1; k < series.slices; ++k) {
      const DicomSlice& im = series.images[vol * series.slices + k];
      const double bk = b_of(im);
      const bool same_direction =
          (im.diffusion && im.diffusion->direction) == (first.diffusion && first.diffusion->direction) &&
          (!(im.diffusion && im.diffusion->direction) ||
           dot(*im.diffusion->direction, *first.diffusion->direction) > 1 - 1e-6);
      if (std::abs(bk - b) > 1e-3 * std::max(1.0, b) || !same_direction)
        throw Error(ErrorCode::format, where(series, im), "diffusion encoding",
                    "differs within volume " + std::to_string(vol) + " (b = " +
                        std::to_string(bk) + " here, " + std::to_string(b) + " in " +
                        where(series, first) + ")");
    }
    table.bvals.push_back(b);
    Vec3 out{0, 0, 0};
    if (b > 0 && first.diffusion && first.diffusion->direction) {
      const Vec3& lps = *first.diffusion->direction;
      const Vec3 ras{-lps[0], -lps[1], lps[2]};
      out = {dot(ras, u), dot(ras, v), dot(ras, w)};
      if (!normalise(out)) out = {0, 0, 0};
      if (det > 0) out[0] = -out[0];
      for (double& x : out)
        if (x == 0) x = 0;  // no -0 in the written table
    }
    table.bvecs.push_back(out);
  }
  return table;
}

}  // namespace voxpipe
