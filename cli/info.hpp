// What the two halves of `voxpipe info` share: NIfTI files and the command (info.cpp), DICOM
// files and folders (info_dicom.cpp). Each FILE is described in full (a text block or a JSON
// line) or as one row of the nib-ls table.
#pragma once

#include <array>
#include <ostream>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "voxpipe/dicom.hpp"
#include "voxpipe/dicom_series.hpp"

namespace voxpipe::cli::info {

// A number as text ("%.9g"; nan, inf, -inf) and as JSON ("%.17g"; null when not finite).
std::string num(double v);
std::string json_num(double v);

// `v` as a Python tuple "(4, 5, 6)" ("(4,)" for one) or, with `json`, a JSON array.
template <class T>
std::string tuple(const std::vector<T>& v, bool json) {
  std::ostringstream o;
  o << (json ? "[" : "(");
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) o << ", ";
    if constexpr (std::is_floating_point_v<T>)
      o << (json ? json_num(v[i]) : num(v[i]));
    else
      o << v[i];
  }
  if (!json && v.size() == 1) o << ",";
  o << (json ? "]" : ")");
  return o.str();
}

// A row-major 4x4 affine as a JSON array of its four rows.
std::string affine_json(const std::array<double, 16>& affine);

// Strings as a JSON array.
std::string json_strings(const std::vector<std::string>& items);

// ---- the row per file (as nibabel's nib-ls): path, dtype, shape, zooms, scaling, #exts, xform
// codes (the modality for DICOM), format.
using InfoRow = std::vector<std::string>;

// Zooms as nib-ls shows them, "1.50x2.00x2.50"; "-" for none.
std::string zooms_text(const std::vector<double>& z);

// Scale factors as nib-ls shows them, "*2+10".
std::string scaling_text(double slope, double inter);

// ---- DICOM (info_dicom.cpp)

// "DICM" at byte 128 (Part 10), or a .dcm name (files without the preamble).
bool is_dicom_file(const std::string& path);

// One DICOM file: its JSON object on one line (JSON Lines), or its text block.
void info_dicom(const std::string& path, const DicomFile& f, bool json, std::ostream& out);

// One DICOM file's row.
InfoRow dicom_row(const std::string& path, const DicomFile& f);

// Each series of the folder `path` (scanned into `scan`) as JSON Lines, a text block (`detailed`),
// or rows appended to `rows`: the image dcm2nii writes of it (dtype, shape, zooms, scale factors
// and affine of its NIfTI header).
void info_dicom_folder(const std::string& path, const DicomScanResult& scan, bool json, bool detailed,
                       std::ostream& out, std::vector<InfoRow>& rows);

}  // namespace voxpipe::cli::info
