// A scanned DICOM series as the NIfTI image `voxpipe dcm2nii` writes of it, for `voxpipe info`
// and `voxpipe convert` of a DICOM folder. Defined in dcm2nii.cpp, beside the header dcm2nii
// builds, so that the three commands describe and write one image.
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

// The NIfTI-1 header dcm2nii writes for `s`: the stored dtype with the shared rescale as
// scl_slope/scl_inter, or `float_type` (f32 or f64; also f32 when the rescale varies between
// images) with the rescaled values. Appends what the header cannot hold to `warnings` (a
// gantry tilt's shear, qform_code 0).
NiftiHeader dicom_series_header(const DicomSeries& s, std::optional<DType> float_type,
                                std::vector<std::string>& warnings);

// Reads `s` and writes it to `path` with that header, as dcm2nii does (no sidecar). Returns the
// series' warnings, the header's and the decoders'. Throws what read_dicom_series and
// write_nifti throw.
std::vector<std::string> write_dicom_series(const DicomSeries& s, const std::string& path,
                                            std::optional<DType> float_type,
                                            const WriteOptions& options, unsigned threads);

}  // namespace voxpipe::cli
