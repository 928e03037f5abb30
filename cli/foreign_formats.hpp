// Image formats voxpipe does not read (Analyze 7.5, MGH/MGZ, MINC), recognised so that `info` and
// `convert` name them, and nibabel as the tool that reads them, instead of failing on them as
// broken NIfTI headers.
#pragma once

#include <optional>
#include <string>

#include "voxpipe/error.hpp"

namespace voxpipe::cli {

// The error to report for `path` when it is one of those formats: Error(unsupported) of the form
// "x.mgz: MGH/MGZ (FreeSurfer) is not read by voxpipe; nibabel reads it: nibabel.load('x.mgz')",
// or Error(not_found) for an .img whose .hdr is missing. nullopt when `path` is none of them
// (NIfTI, or a file it cannot tell): the caller's own error stands.
// By content first: the first bytes (inflated when the file is gzip) hold an MGH header (version
// 1, a known type), a netCDF ("CDF\1", MINC1) or HDF5 (MINC2) signature, or a 348-byte header
// without NIfTI's magic (Analyze). Then by name, for files whose content says nothing (a .mgz
// that is not gzip, a .mnc too short to sniff): .mgh, .mgz, .mnc (+ .gz). URLs and stores are
// judged by name only. Reads at most 64 KiB of the file; never throws.
std::optional<Error> foreign_format_error(const std::string& path);

}  // namespace voxpipe::cli
