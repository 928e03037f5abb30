// 4x4 matrix arithmetic shared by the transform readers (transform_io.cpp) and the executor
// (series.cpp), so that every affine is composed and inverted the same way. Internal.
#pragma once

#include <array>
#include <optional>

#include "voxpipe/transform.hpp"

namespace voxpipe::resample {

// a @ b, row-major, each entry summed in k order.
Matrix4 matmul4(const Matrix4& a, const Matrix4& b);

// LU factorisation with partial pivoting in place (the row with the largest magnitude, first on
// ties, as LAPACK's getrf); false when a pivot is exactly zero. `perm_sign` gets the
// permutation's sign.
bool lu4(Matrix4& a, std::array<int, 4>& piv, double& perm_sign);

// The determinant from lu4 (0 for a singular matrix).
double det4(const Matrix4& m);

// The inverse: LU with partial pivoting, then the identity solved for column by column
// (LAPACK's gesv, as NumPy's inv does; not its blocked code, so the last bits may differ).
// nullopt when the matrix is singular (`singular` set) or its inverse overflows (cleared).
std::optional<Matrix4> try_inverse4(const Matrix4& m, bool* singular = nullptr);

}  // namespace voxpipe::resample
