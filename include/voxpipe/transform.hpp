// voxpipe/transform.hpp: spatial transforms for resampling, and readers of the files that hold
// them.
//
// Convention (nitransforms', which is ITK's for fixed/moving): a transform maps a point of the
// *reference* space (the output grid) to the point of the *moving* image (the input) whose value
// lands there. Points are RAS+ millimetres (the scanner space NIfTI affines map to). A chain
// applies its steps in order, as nitransforms' TransformChain: y = steps[n-1](...steps[0](x)).
// Resampling a moving image onto a reference grid then reads the moving image at voxel
//   inverse(moving.affine) @ chain(reference.affine @ i)   for every reference voxel i.
//
// Files store other conventions (ITK: LPS; FSL: scaled voxel coordinates, mapping moving to
// reference); the readers convert to this one, with nitransforms' arithmetic, so a matrix read
// here equals nitransforms' `.matrix` of the same file.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace voxpipe {

// A 4x4 matrix, row-major.
using Matrix4 = std::array<double, 16>;

inline constexpr Matrix4 kIdentity4{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};

// A voxel grid: the first three axes of an image (shape) and its voxel-to-RAS affine.
struct Grid {
  std::array<std::int64_t, 3> shape{};
  Matrix4 affine = kIdentity4;
};

// A dense displacement field on its own grid: the step maps x to x + d(x), d in RAS+ mm, d(x)
// interpolated in the field grid as nitransforms' DenseFieldTransform does (the sample itself on
// grid points; cubic B-spline elsewhere, no displacement outside the grid).
struct DisplacementField {
  Grid grid;
  // Component c (0: R, 1: A, 2: S) of voxel (i, j, k) at
  // data[i + shape[0] * (j + shape[1] * (k + shape[2] * c))]: three Fortran-ordered volumes.
  std::vector<double> data;
};

struct TransformStep {
  enum class Kind : std::uint8_t { affine, field };
  Kind kind = Kind::affine;
  Matrix4 matrix = kIdentity4;                      // affine: reference-side RAS -> moving-side RAS
  std::shared_ptr<const DisplacementField> field;  // field
};

using TransformChain = std::vector<TransformStep>;

// Formats of linear transform files.
//
// The automatic rule: a file starting with a MATLAB v4 double/float matrix header is ITK's
// binary .mat. Otherwise the first line that is neither blank nor a '#' comment decides: the
// "#Insight Transform File" line means ITK text; a line starting with a digit, sign or '.' means
// numbers, which are FSL's when a reference grid is given and the file name ends in .mat (any
// case) or starts with MAT_ (MCFLIRT), else a plain matrix; anything else is a list of files.
// An explicit format that the content contradicts is Error(format).
enum class AffineFormat : std::uint8_t {
  automatic,  // from the content and the name, as above
  itk,        // ITK text (.tfm/.txt; AffineTransform, MatrixOffsetTransformBase, Euler3D,
              // VersorRigid3D, Translation, Identity, _double_3_3 or _float_3_3) or ITK's binary
              // MATLAB .mat (AffineTransform / MatrixOffsetTransformBase)
  fsl,        // FSL FLIRT / MCFLIRT .mat: needs the reference and moving grids
  matrix,     // plain text 4x4 (or 3x4) RAS matrix, reference -> moving, as given
};

struct AffineReadOptions {
  AffineFormat format = AffineFormat::automatic;
  const Grid* reference = nullptr;  // FSL: the grid FLIRT's -ref had; required
  const Grid* moving = nullptr;     // FSL: the grid FLIRT's -in had; the reference when null
};

// Reads every linear transform a file holds, in file order: one for most files, one per volume
// for an ITK file with several transforms (MCFLIRT/fMRIPrep head-motion files), for a text
// file listing one transform file per line (relative paths from the list's folder; blank and
// '#' lines skipped; no lists of lists), or for a folder (MCFLIRT's MAT_0000, MAT_0001 ...: one
// per file, in name order). The format applies to every file read. A CompositeTransform's
// transforms come back in file order, not composed (ITK applies the last one first). Throws
// Error(format) naming the file, line and field for anything it cannot read exactly;
// Error(unsupported) for an ITK transform type not read; Error(invalid_argument) for an FSL
// matrix without a reference grid; Error(not_found) for a missing file, naming the list and
// line for a listed one; Error(limit) for a text file over 64 MiB. Thread-safe (no shared
// state).
std::vector<Matrix4> read_affines(const std::string& path, const AffineReadOptions& options = {});

// Reads one linear transform; Error(format) when the file holds more or fewer than one.
Matrix4 read_affine(const std::string& path, const AffineReadOptions& options = {});

enum class FieldFormat : std::uint8_t {
  itk,  // ITK/ANTs displacement field NIfTI: (X, Y, Z, 1, 3) vectors in LPS mm
  ras,  // nitransforms' own: (X, Y, Z, 3) vectors in RAS mm
};

// Reads a displacement field NIfTI (.nii / .nii.gz) into RAS mm, float64 with the file's
// scaling applied; the grid is the image's first three axes and its affine. ITK: (X, Y, Z, 1, 3)
// only, the first two components negated (LPS -> RAS); RAS: (X, Y, Z, 3) or (X, Y, Z, 1, 3).
// Error(format) for another shape, the NIfTI reader's errors otherwise.
DisplacementField read_displacement_field(const std::string& path,
                                          FieldFormat format = FieldFormat::itk);

}  // namespace voxpipe
