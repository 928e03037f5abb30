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
enum class AffineFormat : std::uint8_t {
  automatic,  // from the content (ITK's "#Insight Transform File" header) and the extension
  itk,        // ITK text (.tfm/.txt): AffineTransform / MatrixOffsetTransformBase / Euler3D ...
  fsl,        // FSL FLIRT / MCFLIRT .mat: needs the reference and moving grids
  matrix,     // plain text 4x4 (or 3x4) RAS matrix, reference -> moving, as given
};

struct AffineReadOptions {
  AffineFormat format = AffineFormat::automatic;
  const Grid* reference = nullptr;  // FSL: the grid FLIRT's -ref had; required
  const Grid* moving = nullptr;     // FSL: the grid FLIRT's -in had; the reference when null
};

// Reads every linear transform a file holds, in file order: one for most files, one per volume
// for an ITK file with several transforms (MCFLIRT/fMRIPrep head-motion files), or for a text
// file listing one transform file per line (relative paths from the list's folder). Throws
// Error(format) naming the file, line and field for anything it cannot read exactly.
std::vector<Matrix4> read_affines(const std::string& path, const AffineReadOptions& options = {});

// Reads one linear transform; Error(format) when the file holds more or fewer than one.
Matrix4 read_affine(const std::string& path, const AffineReadOptions& options = {});

enum class FieldFormat : std::uint8_t {
  itk,  // ITK/ANTs displacement field NIfTI: (X, Y, Z, 1, 3) vectors in LPS mm
  ras,  // nitransforms' own: (X, Y, Z, 3) vectors in RAS mm
};

// Reads a displacement field NIfTI (.nii / .nii.gz) into RAS mm.
DisplacementField read_displacement_field(const std::string& path,
                                          FieldFormat format = FieldFormat::itk);

}  // namespace voxpipe
