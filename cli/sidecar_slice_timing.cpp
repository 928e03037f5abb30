// SliceTiming as dcm2niix writes it (series_slice_timing, series_nifti.hpp): Siemens' mosaic
// tile times from the CSA image header (MosaicRefAcqTimes), or single-slice files'
// AcquisitionTimes.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "dicom/csa.hpp"
#include "series_nifti.hpp"
#include "sidecar_internal.hpp"
#include "voxpipe/dicom.hpp"

namespace voxpipe::cli {

using sidecar::is_siemens;
using sidecar::kMRAcquisitionType;
using sidecar::kRepetitionTime;
using sidecar::kSeriesDescription;
using sidecar::upper;

namespace {

// A mosaic volume's MosaicRefAcqTimes (ms, as stored) by tile, in the series' slice order, from
// the CSA image header of the file of image `first` (the volume's first slice); empty when
// missing or short.
std::vector<double> mosaic_times(const DicomSeries& s, std::size_t first) {
  if (first + s.slices > s.images.size()) return {};
  const DicomSlice& im = s.images[first];
  if (!im.file) return {};
  std::optional<dicom::CsaHeader> csa;
  try {
    if (im.file == s.images.front().file) {
      csa = dicom::series_csa_header(s, dicom::CsaKind::image);
    } else {
      // The scan keeps only the tags it needs: the file is read again in full.
      const DicomFile full = im.buffer ? parse_dicom(im.buffer->bytes, im.file->path) : read_dicom(im.file->path);
      std::span<const std::uint8_t> bytes;
      if (im.buffer) bytes = im.buffer->bytes;
      csa = dicom::csa_header(full.dataset, dicom::CsaKind::image, full.path, bytes,
                              full.offsets_in_inflated_stream);
    }
  } catch (const Error&) {
    return {};
  }
  if (!csa) return {};
  const std::vector<double> ref = csa->numbers("MosaicRefAcqTimes");
  if (ref.size() < 2) return {};
  std::vector<double> t;
  for (std::uint64_t k = 0; k < s.slices; ++k) {
    const std::uint32_t tile = s.images[first + k].tile;
    if (tile >= ref.size()) return {};
    t.push_back(ref[tile]);
  }
  return t;
}

}  // namespace

// dcm2niix's rules (nii_dicom_batch.cpp sliceTimingCore: sliceTimingSiemens2D, checkSliceTiming),
// for Siemens; dcm2niix reads none from Philips, and GE's and UIH's own sources are not read here.
std::vector<double> series_slice_timing(const DicomSeries& s) {
  const SeriesMeta m(s);
  if (s.slices < 2 || s.images.size() < s.slices) return {};
  const auto acq = m.str(kMRAcquisitionType);
  if (acq && upper(*acq) == "3D") return {};
  if (!is_siemens(m)) return {};
  std::vector<double> t;
  if (s.images.front().tile_grid > 0) {
    // Mosaic: each tile's time from the CSA image header, by tile (ms). dcm2niix compares the
    // first volume's range with the second's (a CMRR sequence can write bogus times into the
    // first volume, dcm2niix issue 870): when they differ and the second's are valid (not
    // negative, spread, within a TR) the second volume's times are used.
    t = mosaic_times(s, 0);
    if (t.empty()) return {};
    const auto tr = m.num(kRepetitionTime).value_or(0);
    const auto [lo0, hi0] = std::minmax_element(t.begin(), t.end());
    const double min0 = *lo0, max0 = *hi0;
    std::vector<double> t1 = s.volumes > 1 ? mosaic_times(s, s.slices) : std::vector<double>{};
    bool second_differs = false;
    double min1 = -1, max1 = -1;
    if (!t1.empty()) {
      const auto [lo1, hi1] = std::minmax_element(t1.begin(), t1.end());
      min1 = *lo1;
      max1 = *hi1;
      second_differs = std::fabs((max0 - min0) - (max1 - min1)) > 1e-4;
    }
    const auto description = m.str(kSeriesDescription).value_or("");
    const bool fine = (min0 != max0 && max0 <= tr && !second_differs) ||
                      description.find("SBRef") != std::string::npos || t1.empty();
    if (!fine && min1 >= 0 && min1 < max1 && max1 - min1 <= tr) {
      for (double& v : t1) v -= min1;
      t = t1;
    }
    const double lo = *std::min_element(t.begin(), t.end());
    for (double& v : t) v = (v - lo) / 1000.0;
  } else {
    // Single-slice files (each file one image, as dcm2niix requires): the first volume's
    // AcquisitionTimes, seconds from the earliest, a volume that crosses midnight unwrapped (a
    // span over 12 hours: the times after noon are a day earlier). No check against the TR, as
    // dcm2niix.
    std::set<const DicomFile*> files;
    for (const DicomSlice& im : s.images) files.insert(im.file.get());
    if (files.size() != s.images.size()) return {};
    for (std::uint64_t k = 0; k < s.slices; ++k) t.push_back(s.images[k].acquisition_time);
    double lo = *std::min_element(t.begin(), t.end());
    const double hi = *std::max_element(t.begin(), t.end());
    if (hi - lo > 43200) {
      for (double& v : t)
        if (v > 43200) v -= 86400;
      lo = *std::min_element(t.begin(), t.end());
    }
    for (double& v : t) v = std::round((v - lo) * 1e6) / 1e6;
  }
  // Times all equal: none (dcm2niix).
  if (std::all_of(t.begin(), t.end(), [&](double v) { return std::fabs(v - t.front()) <= 1e-7; })) return {};
  return t;
}

}  // namespace voxpipe::cli
