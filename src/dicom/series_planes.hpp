// A DICOM series' values pushed plane by plane, for consumers that stream them instead of
// holding the whole volume (the device load's staging ring). Internal.
#pragma once

#include <string>

#include "core/file.hpp"
#include "voxpipe/dicom_series.hpp"

namespace voxpipe::dicom {

// read_dicom_series's checks before anything is read: Error(format) with series.problem,
// Error(invalid_argument) for an out_type other than the stored type, float32 and float64.
// Returns the name its errors carry (the first image's path).
std::string check_series_read(const DicomSeries& series, DType out_type);

// The bytes read_dicom_series(series, out, out_type, threads) writes, image by image: each
// image's plane (rows x columns values of out_type), decoded on `threads` (resolved by the
// public call; 0 is taken as 1), is handed to deliver(n * plane bytes, plane) from the decoding
// thread once complete, in any order and concurrently (ByteSink's contract). Memory: a frame
// and a plane per thread.
// read_dicom_series's errors (series.problem, an out_type it refuses, the decoders').
void decode_dicom_series(const DicomSeries& series, DType out_type, unsigned threads,
                         const core::ByteSink& deliver);

}  // namespace voxpipe::dicom
