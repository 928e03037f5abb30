// The transform readers' parsers, over bytes in memory (transform_io.cpp reads the files; the unit
// tests and fuzz_transform call these directly). `path` only names the file in errors; every
// failure is a voxpipe::Error whose field names the line ("line 3: Parameters").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "resample/matrix4.hpp"
#include "voxpipe/transform.hpp"

namespace voxpipe::resample {

// Text transform files are read whole; none written by a registration tool comes near this (an
// ITK file of 10,000 head-motion transforms is about 1.5 MiB).
inline constexpr std::uint64_t kMaxTransformTextBytes = std::uint64_t{64} << 20;

// What a file holds. ITK's binary MATLAB v4 files by their first 4 bytes (a double or float
// numeric-matrix type code, either byte order: no text file starts so); text files from their
// first line that is neither blank nor a '#' comment (ITK's header line is recognised before
// that): numbers, or else a list of transform files.
enum class TransformText : std::uint8_t { itk, itk_matlab, numbers, list };
TransformText classify_transform_text(std::string_view text);

// An ITK text transform file ("#Insight Transform File V1.0"): every transform, in file order,
// converted to RAS (a CompositeTransform's own header block holds no parameters and is skipped).
std::vector<Matrix4> parse_itk_text(std::string_view text, const std::string& path);

// An ITK binary MATLAB v4 file (.mat, as antsRegistration and nitransforms write): its one
// transform variable (AffineTransform_{double,float}_3_3 or MatrixOffsetTransformBase_..., 12
// values) and `fixed` (the centre), converted to RAS as ITK text.
Matrix4 parse_itk_matlab(std::string_view bytes, const std::string& path);

// Rows of numbers separated by blanks or commas, '#' starting a comment: exactly 4 rows of 4
// (or, with allow_3x4, 3 rows and the implicit 0 0 0 1). The last row must be 0 0 0 1.
Matrix4 parse_matrix_text(std::string_view text, const std::string& path, bool allow_3x4);

// FLIRT's matrix (as parse_matrix_text read it, 4x4) to RAS with nitransforms' arithmetic
// (io/fsl.py: FSLLinearTransform.to_ras and _fsl_aff_adapt). Error(format) when a matrix on the
// way is singular.
Matrix4 fsl_to_ras(const Matrix4& fsl, const Grid& reference, const Grid& moving,
                   const std::string& path);

// The entries of a list file: the paths as written (not yet joined to the list's folder), with
// their line numbers; blank lines and lines starting with '#' are skipped.
struct ListEntry {
  std::string path;
  std::size_t line = 0;
};
std::vector<ListEntry> parse_transform_list(std::string_view text, const std::string& path);

// What read_affines does with the content of one file that is not a list (the list case needs
// the file system): the format resolved as documented in transform.hpp, the matrices in RAS.
std::vector<Matrix4> parse_affines_text(std::string_view text, const std::string& path,
                                        const AffineReadOptions& options);

// try_inverse4 (matrix4.hpp), with Error(format) naming `field` when the matrix is singular or
// its inverse overflows.
Matrix4 inverse4(const Matrix4& m, const std::string& path, const std::string& field);

}  // namespace voxpipe::resample
