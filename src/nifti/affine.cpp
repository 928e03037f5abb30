// Affines exactly as nibabel computes them (nibabel/nifti1.py get_qform/get_sform/
// get_best_affine, quaternions.py fillpositive/quat2mat, volumeutils.py shape_zoom_affine).
//
// nibabel does the quaternion maths in np.longdouble (x87 80-bit on x86-64 Linux); we use
// `long double` with the same operation order so that the rounded float64 results are
// bit-identical there. On platforms where long double is double, both sides use double.
#include <cmath>
#include <limits>
#include <string>

#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"

namespace voxpipe {

namespace {
using Mat = std::array<double, 16>;

Mat identity() {
  Mat m{};
  m[0] = m[5] = m[10] = m[15] = 1.0;
  return m;
}

// Round to the precision the header stores (NIfTI-1: float32), so values behave as nibabel's.
long double stored(const NiftiHeader& h, double v) {
  return h.version == 1 ? static_cast<long double>(static_cast<float>(v))
                        : static_cast<long double>(v);
}
}  // namespace

Mat nifti_qform(const NiftiHeader& h, const std::string& path) {
  const long double b = stored(h, h.quatern_b), c = stored(h, h.quatern_c),
                    d = stored(h, h.quatern_d);
  // fillpositive: w2 = 1 - xyz @ xyz, the dot product summed left to right.
  long double dot = 0.0L;
  dot += b * b;
  dot += c * c;
  dot += d * d;
  const long double w2 = 1.0L - dot;
  const long double thresh = h.version == 1
                                 ? 3.0L * std::numeric_limits<float>::epsilon()
                                 : 3.0L * std::numeric_limits<double>::epsilon();
  long double w;
  if (std::fabs(w2) < thresh) {
    w = 0.0L;
  } else if (w2 < 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%e", static_cast<double>(w2));
    throw Error(ErrorCode::format, path, "quatern_b/c/d",
                std::string("w2 should be positive, but is ") + buf);
  } else {
    w = std::sqrt(w2);
  }
  // quat2mat(w, b, c, d)
  long double R[3][3];
  const long double Nq = w * w + b * b + c * c + d * d;
  if (Nq < static_cast<long double>(std::numeric_limits<double>::epsilon())) {
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) R[i][j] = i == j ? 1.0L : 0.0L;
  } else {
    const long double s = 2.0L / Nq;
    const long double X = b * s, Y = c * s, Z = d * s;
    const long double wX = w * X, wY = w * Y, wZ = w * Z;
    const long double xX = b * X, xY = b * Y, xZ = b * Z;
    const long double yY = c * Y, yZ = c * Z, zZ = d * Z;
    R[0][0] = 1.0L - (yY + zZ); R[0][1] = xY - wZ;          R[0][2] = xZ + wY;
    R[1][0] = xY + wZ;          R[1][1] = 1.0L - (xX + zZ); R[1][2] = yZ - wX;
    R[2][0] = xZ - wY;          R[2][1] = yZ + wX;          R[2][2] = 1.0L - (xX + yY);
  }
  // vox = pixdim[1:4] (already made non-negative by the load fixes); vox[2] *= qfac.
  long double vox[3] = {stored(h, h.pixdim[1]), stored(h, h.pixdim[2]),
                        stored(h, h.pixdim[3]) * stored(h, h.pixdim[0])};
  if (h.version == 1) vox[2] = static_cast<float>(vox[2]);
  // M = R @ diag(vox), each element summed over k as numpy's dot does (zeros included).
  Mat out = identity();
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) {
      long double acc = 0.0L;
      for (int k = 0; k < 3; ++k) acc += R[i][k] * (k == j ? vox[j] : 0.0L);
      out[i * 4 + j] = static_cast<double>(acc);
    }
  }
  out[3] = static_cast<double>(stored(h, h.qoffset_x));
  out[7] = static_cast<double>(stored(h, h.qoffset_y));
  out[11] = static_cast<double>(stored(h, h.qoffset_z));
  return out;
}

Mat nifti_sform(const NiftiHeader& h) {
  Mat out = identity();
  for (int j = 0; j < 4; ++j) {
    out[0 * 4 + j] = h.srow_x[j];
    out[1 * 4 + j] = h.srow_y[j];
    out[2 * 4 + j] = h.srow_z[j];
  }
  return out;
}

Mat nifti_base_affine(const NiftiHeader& h) {
  // shape_zoom_affine(dim[1:ndim+1], pixdim[1:ndim+1], x_flip=True), on the raw dims.
  const auto ndim = static_cast<int>(h.dim[0]);
  double shape[3] = {1, 1, 1}, zooms[3] = {1, 1, 1};
  for (int i = 0; i < 3 && i < ndim; ++i) {
    shape[i] = static_cast<double>(h.dim[i + 1]);
    zooms[i] = h.pixdim[i + 1];
  }
  zooms[0] = -zooms[0];
  Mat out = identity();
  for (int i = 0; i < 3; ++i) {
    out[i * 4 + i] = zooms[i];
    const double origin = (shape[i] - 1.0) / 2.0;
    out[i * 4 + 3] = -origin * zooms[i];
  }
  return out;
}

Mat nifti_best_affine(const NiftiHeader& h, const std::string& path) {
  if (h.sform_code != 0) return nifti_sform(h);
  if (h.qform_code != 0) return nifti_qform(h, path);
  return nifti_base_affine(h);
}

}  // namespace voxpipe
