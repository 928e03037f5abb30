// 3x3 matrix helpers shared by the orientation code (src/view) and the DICOM-to-NIfTI writer
// (cli/dcm2nii.cpp): both take nibabel's polar factor of an affine's 3x3 part.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>

namespace voxpipe::core {

using Mat3 = std::array<std::array<double, 3>, 3>;

inline double det3(const Mat3& m) {
  return m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) -
         m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
         m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
}

// The orthogonal polar factor of a matrix of full rank, the orthogonal matrix nearest it (what
// nibabel takes from the SVD, P @ Qs), by Newton's iteration X <- (X + X^-T) / 2, which
// converges quadratically to it. A singular matrix is returned as the iteration left it.
inline Mat3 polar_factor(Mat3 x) {
  for (int it = 0; it < 100; ++it) {
    const double d = det3(x);
    if (d == 0) break;
    Mat3 inv_t;  // X^-T = cofactor(X) / det
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) {
        const int i1 = (i + 1) % 3, i2 = (i + 2) % 3, j1 = (j + 1) % 3, j2 = (j + 2) % 3;
        inv_t[i][j] = (x[i1][j1] * x[i2][j2] - x[i1][j2] * x[i2][j1]) / d;
      }
    double change = 0;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) {
        const double v = (x[i][j] + inv_t[i][j]) / 2;
        change = std::max(change, std::abs(v - x[i][j]));
        x[i][j] = v;
      }
    if (change < 1e-15) break;
  }
  return x;
}

}  // namespace voxpipe::core
