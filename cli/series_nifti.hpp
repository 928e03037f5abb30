// A scanned DICOM series as the NIfTI image `voxpipe dcm2nii` writes of it, for dcm2nii and for
// `voxpipe info` and `voxpipe convert` of a DICOM folder, so that the three commands describe
// and write one image (series_nifti.cpp).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "voxpipe/dicom_series.hpp"
#include "voxpipe/dtype.hpp"
#include "voxpipe/nifti.hpp"

namespace voxpipe::cli {

// `s` as the commands name it: "series 3 \"T1 MPRAGE\" (echo 2)" (its number, description and
// split, those it has).
std::string series_name(const DicomSeries& s);

// How dcm2nii stores the values of a series.
struct SeriesPlan {
  DType dtype = DType::f32;
  bool scaled = false;  // the stored values, with the shared rescale as scl_slope/scl_inter
  double slope = 1, inter = 0;
};

// The stored dtype with the shared rescale (scaled) when every image of `s` shares one and no
// `float_type` is asked for; else `float_type` (f32 or f64), or f32, with the rescaled values.
SeriesPlan series_plan(const DicomSeries& s, std::optional<DType> float_type);

// The NIfTI-1 header dcm2nii writes for `s` stored as `plan`. Appends what the header cannot
// hold to `warnings` (a gantry tilt's shear, qform_code 0).
NiftiHeader series_header(const DicomSeries& s, const SeriesPlan& plan, std::vector<std::string>& warnings);

// The JSON sidecar dcm2nii writes beside that image: the BIDS fields dcm2niix writes, as far as
// the first file holds them, the rescale of a scaled plan and `warnings`.
std::string series_sidecar(const DicomSeries& s, const SeriesPlan& plan,
                           const std::vector<std::string>& warnings);

// Reads `s` and writes it to `path` as dcm2nii does (series_plan, series_header; no sidecar). Returns the
// series' warnings, the header's and the decoders'. Throws what read_dicom_series and
// write_nifti throw.
std::vector<std::string> write_dicom_series(const DicomSeries& s, const std::string& path,
                                            std::optional<DType> float_type,
                                            const WriteOptions& options, unsigned threads);

}  // namespace voxpipe::cli
