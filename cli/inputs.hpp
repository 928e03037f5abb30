// The inputs `voxpipe info` and `voxpipe convert` take besides NIfTI files and stores: folders
// of DICOM series, and formats voxpipe does not read, named as such.
#pragma once

#include <string>

#include "voxpipe/dicom_series.hpp"
#include "voxpipe/nifti.hpp"

namespace voxpipe::cli {

// Whether `path` is a folder on this machine (not a URL, not a NIfTI-Zarr store).
bool is_local_folder(const std::string& path);

// The series of the folder at `path`, scanned as dcm2nii scans (scan_dicom_series). Error(format)
// when it has none: a folder that is neither a DICOM series folder nor a NIfTI-Zarr store (named
// as the store it may be).
DicomScanResult scan_folder(const std::string& path);

// The NIfTI image at `path` (open_nifti), or, when it cannot be opened and is a format voxpipe
// does not read (Analyze, MGH/MGZ, MINC), the error that names that format.
NiftiImage open_input(const std::string& path);

}  // namespace voxpipe::cli
