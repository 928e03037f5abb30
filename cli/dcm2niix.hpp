// What `voxpipe dcm2niix` and `voxpipe dcm2nii` share: dcm2niix's file names (its -f tokens, the
// suffixes it appends and its character rules) and its row order (dcm2niix.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "voxpipe/dicom_series.hpp"
#include "voxpipe/dtype.hpp"

namespace voxpipe::cli {

// How dcm2niix_name expands a template.
struct NameRules {
  // The name of the input folder (%f).
  std::string folder;
  // Append the suffixes dcm2niix appends (_e2, _ph, _real, _imaginary, _i00001, _t30, ...);
  // false: dcm2niix's --terse.
  bool post_fixes = true;
  // dcm2niix's character rules for the whole name (its masked characters, ISO 8859-1 letters
  // to ASCII, other bytes and control characters to '_', runs of '_' collapsed, '/' in the
  // template a folder); false: dcm2nii's rule for each value (anything but A-Z a-z 0-9 - to
  // '_', runs collapsed and trimmed), the series' other splits appended, no folders.
  bool dcm2niix_characters = true;
};

// The file name (without extension; '/' separates folders with dcm2niix's characters) that the
// -f template `format` gives to `s`, as dcm2niix names it: %a coil, %b first file's name,
// %c ImageComments, %d SeriesDescription, %e echo number, %f the input folder, %g
// AccessionNumber, %i PatientID, %j SeriesInstanceUID, %k StudyInstanceUID, %l
// PerformedProcedureStepDescription, %m manufacturer (2 letters), %n PatientName, %o
// MediaStorageSOPInstanceUID, %p ProtocolName (else SeriesDescription), %q ScanningSequence,
// %r InstanceNumber, %s SeriesNumber, %t study date and time, %u AcquisitionNumber, %v vendor,
// %x StudyID, %y GE's run number, %z SequenceName, %2s (any width 1-9) zero-padded series,
// instance or run number. dcm2niix ignores other letters; with `unknown` set they are refused:
// nullopt, and `*unknown` is the token.
std::optional<std::string> dcm2niix_name(const std::string& format, const DicomSeries& s,
                                         const NameRules& rules, std::string* unknown = nullptr);

// dcm2niix's default template, "%f_%p_%t_%s".
inline constexpr const char* kDcm2niixDefaultFormat = "%f_%p_%t_%s";

// `s` with the rows of its images in dcm2niix's order (reversed: dcm2niix flips the rows so that
// the NIfTI's j axis points up): the affine's second column negated and its origin moved to the
// last row. The data: flip_rows.
DicomSeries rows_flipped(const DicomSeries& s);

// Reverses the rows (the second axis) of every plane of `data`, Fortran order with `shape`
// (columns, rows, ...) and elements of `element_size` bytes.
void flip_rows(std::span<std::uint8_t> data, const std::vector<std::uint64_t>& shape,
               std::size_t element_size);

// The objects URLs name (an object, or those under a prefix), fetched whole through the URL
// handlers (voxpipe's Python package) as buffers to scan (dcm2nii.cpp). Error(unsupported)
// without the package; the handlers' errors as they raise them.
std::vector<DicomBuffer> fetch_dicom_objects(const std::vector<std::string>& urls);

}  // namespace voxpipe::cli
