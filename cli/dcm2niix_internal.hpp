// What the files of `voxpipe dcm2niix` share (dcm2niix.cpp the command, dcm2niix_series.cpp
// what dcm2niix reads of a series, dcm2niix_names.cpp its file names, dcm2niix_convert.cpp the
// conversion of an input, dcm2niix_overlays.cpp the overlay images): its exit codes, its
// options, and the series' values as dcm2niix reads them. Internal to the command.
#pragma once

#include <array>
#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "dcm2niix.hpp"
#include "voxpipe/dicom_series.hpp"
#include "voxpipe/nifti.hpp"

namespace voxpipe::cli::dcm2niix {

// dcm2niix's exit codes (nii_dicom.h).
constexpr int kExitNoValidFiles = 2;
constexpr int kExitReportVersion = 3;
constexpr int kExitInputFolderInvalid = 5;
constexpr int kExitOutputFolderInvalid = 6;
constexpr int kExitOutputFolderReadOnly = 7;
constexpr int kExitSomeOkSomeBad = 8;
constexpr int kExitInvalidParam = 12;

// The command's options, as cmd_dcm2niix reads them from dcm2niix's letters.
struct Options {
  int gz_level = 1;
  bool bids = true, nifti = true, anonymize = true, ignore_derived = false, single_file = false;
  bool flip = true, gzip = false, post_fixes = true, philips_precise = true;
  bool rotate_3d = true;  // 3D acquisitions reoriented (not -x i)
  int depth = 5, verbose = 0, conflict = 2;
  std::string comment, format = kDcm2niixDefaultFormat, out_dir;
  bool comment_set = false;
  std::vector<double> series_numbers;
  bool list_series_only = false, search_only = false;
  std::vector<std::string> notes;  // options accepted without effect, for -v
  std::vector<std::string> warnings;  // options that would change what dcm2niix writes
  // Where each converted series' file name (without extension) is recorded (cmd_dcm2niix's
  // `written`), or null.
  std::vector<std::string>* written = nullptr;
};

// ---- Values of the first file, as dcm2niix reads them (dcm2niix_series.cpp).

// The value of (group,element) of the first file (its dataset, or its meta group for group 2)
// as its bytes: the whole value (backslashes included), without the NUL or space padding at
// its end; "" when the element is missing or not read.
std::string value(const DicomSeries& s, std::uint16_t group, std::uint16_t element);

// dcm2niix's manufacturer from the first two letters of Manufacturer (0008,0070).
enum class Vendor {
  unknown, siemens, ge, hitachi, mediso, philips, toshiba, canon, uih, bruker, mrsolutions,
  hyperfine
};

Vendor vendor(const DicomSeries& s);
// dcm2niix's names of a vendor: %m (two letters), %v (the whole name).
std::string vendor_short(Vendor v);
std::string vendor_long(Vendor v);

// atoi of an IS value, as dcm2niix's dcmStrInt.
long integer_value(const std::string& v);

// ImageType of the first file, backslashes read as '_'.
std::string image_type(const DicomSeries& s);

// dcm2niix's ProtocolName: (0018,1030), else SeriesDescription, else (not Siemens) the
// SequenceName; "_MoCo" appended for Siemens' motion-corrected series.
std::string protocol_name(const DicomSeries& s);

// The echo number of the series, as dcm2niix reads it: EchoNumbers of the first file.
std::int64_t echo_number(const DicomSeries& s);

// The series number dcm2niix names a series with (%s): the stated one, or when it is below 1
// (0, empty or absent) the CRC-32 of the SeriesInstanceUID (dcm2niix issue 218), which is 0
// without a UID: "_843266141" for SeriesNumber 0, "_0" for neither.
std::int64_t name_series_number(const DicomSeries& s);

// The image components dcm2niix finds in ImageType (backslashes read as '_'): "_R_" or "_REAL_"
// real, "_I_" or "_IMAGINARY_" imaginary, "_P_" or "PHASE" phase, "_M_" or "_MAGNITUDE_"
// magnitude.
struct Components {
  bool real = false, imaginary = false, phase = false, magnitude = false;
};

Components components(const DicomSeries& s);

// Whether dcm2niix reorients `s` (nii_setOrtho, unless -x i) instead of flipping its rows: a 3D
// volume (one volume of more than one slice) of a 3D acquisition that is not EPI
// (MRAcquisitionType 3D; ScanningSequence without EP, EchoPlanarPulseSequence not YES).
bool reoriented_by_dcm2niix(const DicomSeries& s);

// Whether dcm2niix keeps the rows of `s` as stored when it reorients 3D acquisitions: such a
// series in no patient frame (DicomSeries::no_geometry) or of colour images (rgb24), which
// nii_setOrtho leaves as they are, neither turned nor flipped. A placed image needs no such rule
// for its world: the affine says where its rows go either way.
bool rows_kept_by_dcm2niix(const DicomSeries& s);

// dcm2niix's reorientation of a 3D acquisition (nii_setOrtho): output axis w (x, y, z of RAS)
// is the voxel axis source[w] of the series, reversed when it points the other way, so that
// each axis runs toward +x, +y, +z (nibabel's as_closest_canonical).
struct Reorientation {
  std::array<int, 3> source{0, 1, 2};
  std::array<bool, 3> reversed{false, false, false};
  bool identity = true;
};

// The reorientation that takes `s` (its affine) to the orthogonal axes nearest RAS.
Reorientation nearest_orthogonal(const DicomSeries& s);

// `s` with its grid reoriented: columns, rows and slices, pixel and slice spacing and affine
// those of the reoriented image; every other field (images, files, values) as in `s`.
DicomSeries reoriented(const DicomSeries& s, const Reorientation& r);

// The 3D image `data` (Fortran order, `shape`, elements of `element_size` bytes) reoriented.
std::vector<std::uint8_t> reoriented_data(std::span<const std::uint8_t> data,
                                          const std::vector<std::uint64_t>& shape,
                                          std::size_t element_size, const Reorientation& r);

// dcm2niix's number for a series (-n, and the order in which it converts series): the CRC-32 of
// its SeriesInstanceUID (without one: its SeriesNumber, 1 when below 1), plus a tenth of its
// echo number from the second echo on.
std::uint32_t uid_crc(const DicomSeries& s);
double series_crc_number(const DicomSeries& s);

// Whether dcm2niix's -i y leaves `s` out, and why.
std::string ignored_by_i(const DicomSeries& s);

// ---- Overlays (dcm2niix_overlays.cpp).

// Writes `base`_ROI<n> for each overlay n of series `s` (its images in the written order, rows
// as stored) as dcm2niix writes it: an 8-bit image of 0 and 1 on the image's grid, with the
// image's header `h` (its type uint8, unscaled), a plane per slice from the overlay of that
// slice's file (or frame: a multi-frame file's overlay covers its frames in turn), rows flipped
// as the image's, then turned as the image is (`turn`; `h` the turned grid's). Series of one
// volume only: dcm2niix fills the ROI of a 4D series of several files with zeros. Returns what
// was left out, and why, for the warnings.
std::vector<std::string> write_overlays(const DicomSeries& s, const NiftiHeader& h,
                                        const std::string& base, const Options& opts,
                                        unsigned threads, const Reorientation& turn);

// ---- Conversion (dcm2niix_convert.cpp).

// Converts the DICOM images of one input as dcm2niix's nii_loadDir does. Returns the exit code.
int convert_input(const std::string& input, Options opts, std::ostream& out, std::ostream& err);

}  // namespace voxpipe::cli::dcm2niix
