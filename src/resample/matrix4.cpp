// 4x4 matrix arithmetic (matrix4.hpp).
#include "resample/matrix4.hpp"

#include <cmath>
#include <utility>

namespace voxpipe::resample {

Matrix4 matmul4(const Matrix4& a, const Matrix4& b) {
  Matrix4 r{};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      double s = 0;
      for (int k = 0; k < 4; ++k) s += a[i * 4 + k] * b[k * 4 + j];
      r[i * 4 + j] = s;
    }
  return r;
}

bool lu4(Matrix4& a, std::array<int, 4>& piv, double& perm_sign) {
  perm_sign = 1;
  for (int k = 0; k < 4; ++k) {
    int p = k;
    for (int i = k + 1; i < 4; ++i)
      if (std::fabs(a[i * 4 + k]) > std::fabs(a[p * 4 + k])) p = i;
    piv[k] = p;
    if (a[p * 4 + k] == 0.0) return false;
    if (p != k) {
      for (int j = 0; j < 4; ++j) std::swap(a[k * 4 + j], a[p * 4 + j]);
      perm_sign = -perm_sign;
    }
    for (int i = k + 1; i < 4; ++i) {
      const double l = a[i * 4 + k] / a[k * 4 + k];
      a[i * 4 + k] = l;
      for (int j = k + 1; j < 4; ++j) a[i * 4 + j] -= l * a[k * 4 + j];
    }
  }
  return true;
}

double det4(const Matrix4& m) {
  Matrix4 a = m;
  std::array<int, 4> piv{};
  double sign = 1;
  if (!lu4(a, piv, sign)) return 0.0;
  double d = sign;
  for (int k = 0; k < 4; ++k) d *= a[k * 4 + k];
  return d;
}

std::optional<Matrix4> try_inverse4(const Matrix4& m, bool* singular) {
  if (singular) *singular = false;
  Matrix4 a = m;
  std::array<int, 4> piv{};
  double sign = 1;
  if (!lu4(a, piv, sign)) {
    if (singular) *singular = true;
    return std::nullopt;
  }
  // Solve A X = I column by column with the factors (getrs after getrf).
  Matrix4 x{};
  for (int col = 0; col < 4; ++col) {
    std::array<double, 4> b{};
    b[col] = 1.0;
    for (int k = 0; k < 4; ++k) std::swap(b[k], b[piv[k]]);
    for (int i = 1; i < 4; ++i)
      for (int k = 0; k < i; ++k) b[i] -= a[i * 4 + k] * b[k];
    for (int i = 3; i >= 0; --i) {
      for (int k = i + 1; k < 4; ++k) b[i] -= a[i * 4 + k] * b[k];
      b[i] /= a[i * 4 + i];
    }
    for (int i = 0; i < 4; ++i) x[i * 4 + col] = b[i];
  }
  for (double v : x)
    if (!std::isfinite(v)) return std::nullopt;
  return x;
}

}  // namespace voxpipe::resample
