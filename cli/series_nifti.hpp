// A scanned DICOM series as the NIfTI image `voxpipe dcm2nii` writes of it, for dcm2nii and for
// `voxpipe info` and `voxpipe convert` of a DICOM folder, so that the three commands describe
// and write one image (series_nifti.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "voxpipe/dicom_series.hpp"
#include "voxpipe/dtype.hpp"
#include "voxpipe/nifti.hpp"

namespace voxpipe::cli {

// The values of a series' first file, for the header and the sidecar: a tag at the top level,
// else in the enhanced multi-frame functional groups (the shared ones (5200,9229), then the
// first frame's (5200,9230)), where Siemens XA and Philips enhanced files keep EchoTime,
// RepetitionTime, FlipAngle, PixelSpacing, ImageOrientationPatient and the rest. A malformed
// value reads as missing: the sidecar leaves it out, the conversion goes on.
class SeriesMeta {
 public:
  explicit SeriesMeta(const DicomSeries& s);
  const DicomDataset& dataset() const noexcept { return ds_; }
  const DicomElement* find(DicomTag t) const noexcept;
  std::optional<std::string> str(DicomTag t) const;  // nullopt for an empty value
  std::vector<std::string> strs(DicomTag t) const;
  std::optional<double> num(DicomTag t) const;
  std::vector<double> nums(DicomTag t) const;

 private:
  const DicomDataset* holder(DicomTag t) const noexcept;
  const DicomDataset& ds_;
  std::vector<const DicomDataset*> groups_;  // the functional group macros' items, in search order
};

// `s` as the commands name it: "series 3 \"T1 MPRAGE\" (echo 2)" (its number, description and
// split, those it has).
std::string series_name(const DicomSeries& s);

// Philips' three scalings of a series (PMC3998685): stored value R, displayed D = R * RS + RI
// (RescaleSlope/Intercept), precise floating point P = D / (RS * SS), SS the private scale slope
// (2005,100E).
struct PhilipsScale {
  double rs = 1, ri = 0, ss = 0;
  bool precise = false;  // the plan's values are P (dcm2niix -p y), else D (-p n)
};

// How dcm2nii stores the values of a series.
struct SeriesPlan {
  DType dtype = DType::f32;
  bool scaled = false;  // the stored values, with the shared rescale as scl_slope/scl_inter
  double slope = 1, inter = 0;
  // Float output (not scaled): multiply the values read_dicom_series gives (the images' own
  // rescale applied) by this; 1 but for Philips precise scaling of float output, 1 / (RS * SS).
  double float_factor = 1;
  // Set for a Philips series with a scale slope shared by every image (the sidecar's
  // PhilipsRescaleSlope, ...).
  std::optional<PhilipsScale> philips;
};

// The stored dtype with the shared rescale (scaled) when every image of `s` shares one and no
// `float_type` is asked for; else `float_type` (f32 or f64), or f32, with the rescaled values.
// A Philips series with a private scale slope (2005,100E) shared by its images gets Philips'
// precise floating-point values when `philips_precise` (dcm2niix's default, -p y), its display
// values otherwise (-p n); docs/dicom.md "Philips scaling".
SeriesPlan series_plan(const DicomSeries& s, std::optional<DType> float_type,
                       bool philips_precise = true);

// The voxel frame an image of the series is written in, for what depends on it (the sign of
// PhaseEncodingDirection). voxpipe writes the series' own affine (DicomSeries::affine): i along
// DICOM's rows (columns increasing), j along its columns (rows increasing, top to bottom).
// dcm2niix writes j the other way (rows bottom to top): rows_flipped.
struct SeriesFrame {
  bool rows_flipped = false;
  // The written image's shape when it is not s.shape() (dcm2niix's turned 3D acquisitions, whose
  // sidecar keys otherwise stay the acquired grid's): the sidecar's Dimensions. Empty: s.shape().
  std::vector<std::uint64_t> written_shape;
};

// Largest shear (radians, the largest difference between the affine's unit axes and the nearest
// rotation) a qform is written for: rounding in ImageOrientationPatient, not gantry tilt
// (docs/dicom.md "qform").
inline constexpr double kQformShearTolerance = 1e-4;

// The NIfTI-1 header dcm2nii writes for `s` stored as `plan`: qform and sform (code 1),
// dim_info, slice_code as dcm2niix sets them (slice_duration 0, as dcm2niix). Appends what the
// header cannot hold to `warnings` (a gantry tilt's shear, qform_code 0).
NiftiHeader series_header(const DicomSeries& s, const SeriesPlan& plan, std::vector<std::string>& warnings,
                          const SeriesFrame& frame = {});

// Slice acquisition times (seconds from the first) of the series' slices in its slice order, as
// dcm2niix's SliceTiming: Siemens' CSA MosaicRefAcqTimes for a mosaic, else the first volume's
// AcquisitionTimes; empty when unknown, a 3D acquisition or a single slice.
std::vector<double> series_slice_timing(const DicomSeries& s);

// The JSON sidecar dcm2nii writes beside that image (series_sidecar.cpp): every key dcm2niix
// writes for an MR series from the first file's standard, enhanced functional group, Siemens
// CSA and Phoenix and Philips private values, in dcm2niix's order and with its values, then
// voxpipe's own (Dimensions, SeriesSplit, RescaleSlope/RescaleIntercept of a scaled plan,
// GantryTiltDegrees, Warnings). `frame` is the written image's voxel frame. Differences from
// dcm2niix: docs/dicom.md "JSON sidecar".
std::string series_sidecar(const DicomSeries& s, const SeriesPlan& plan,
                           const std::vector<std::string>& warnings, const SeriesFrame& frame = {});

// Reads `s` into `data` (Fortran order, plan.dtype, s.shape()) with the plan's values: the
// stored ones for a scaled plan, else float with each image's rescale and the plan's
// float_factor (Philips precise scaling) applied. Returns read_dicom_series' warnings; throws
// what it throws.
std::vector<std::string> read_series_values(const DicomSeries& s, const SeriesPlan& plan,
                                            std::span<std::uint8_t> data, unsigned threads,
                                            DicomOnCorrupt on_corrupt = DicomOnCorrupt::raise);

// Writes the .bval and .bvec files of a diffusion series next to `base` (a path without
// extension) for an image written with `affine` (dicom_gradient_table; numbers as dcm2niix
// prints them, %g), each through a temporary name. Returns false, writing nothing, when the
// series has no diffusion encoding. Throws Error(io) when a file cannot be written, and what
// dicom_gradient_table throws.
bool write_gradient_files(const DicomSeries& s, const std::array<double, 16>& affine,
                          const std::string& base);

// Reads `s` and writes it to `path` as dcm2nii does (series_plan, series_header; no sidecar). Returns the
// series' warnings, the header's and the decoders'. Throws what read_dicom_series and
// write_nifti throw.
std::vector<std::string> write_dicom_series(const DicomSeries& s, const std::string& path,
                                            std::optional<DType> float_type,
                                            const WriteOptions& options, unsigned threads);

}  // namespace voxpipe::cli
