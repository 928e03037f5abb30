#include "inputs.hpp"

#include <filesystem>

#include "foreign_formats.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/remote.hpp"
#include "voxpipe/threads.hpp"

namespace voxpipe::cli {

bool is_local_folder(const std::string& path) {
  if (is_object_url(path) || is_zarr_path(path)) return false;
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}

DicomScanResult scan_folder(const std::string& path) {
  DicomScanOptions options;
  options.threads = resolve_threads(0);
  DicomScanResult scan = scan_dicom_series({path}, options);
  if (!scan.series.empty()) return scan;
  std::error_code ec;
  for (const char* meta : {"zarr.json", ".zgroup", ".zattrs", ".zarray"})
    if (std::filesystem::exists(std::filesystem::path(path) / meta, ec))
      throw Error(ErrorCode::format, path, "",
                  std::string("a Zarr store (it holds ") + meta +
                      ") whose name does not end in .zarr: voxpipe knows NIfTI-Zarr stores by "
                      "their name (rename it NAME.nii.zarr)");
  throw Error(ErrorCode::format, path, "",
              "neither a folder of DICOM images (" + std::to_string(scan.skipped.size()) +
                  " files, none a DICOM image) nor a NIfTI-Zarr store (NAME.nii.zarr); info and "
                  "convert take a DICOM series folder, a NIfTI-Zarr store or a NIfTI or DICOM file");
}

NiftiImage open_input(const std::string& path) {
  try {
    return open_nifti(path);
  } catch (const Error&) {
    if (auto foreign = foreign_format_error(path)) throw *foreign;
    throw;
  }
}

}  // namespace voxpipe::cli
