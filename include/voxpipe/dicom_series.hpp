// voxpipe/dicom_series.hpp: DICOM series: files (or the frames of enhanced multi-frame files)
// grouped into series, sorted in space and time, checked, and read into one volume with the
// NIfTI (RAS) affine.
//
// Conventions:
//  - Voxel axes are (column, row, slice[, volume]): i runs along a row (the first direction
//    cosine of ImageOrientationPatient), j down the columns (the second), k along the slice
//    normal, in increasing position. The data are Fortran-ordered with that shape, so each
//    decoded frame (rows x columns, C order) is one contiguous k-plane. This is dcm2niix's axis
//    order without its row flip; nibabel.nicom's (row, column, slice) is the transpose of the
//    first two axes.
//  - The affine maps (i, j, k) to RAS millimetres (DICOM's LPS with x and y negated), row-major
//    4x4: column i = row cosine * column spacing (PixelSpacing[1]), column j = column cosine *
//    row spacing (PixelSpacing[0]), column k = (last position - first position) / (slices - 1)
//    (nibabel.nicom's formula: it keeps a gantry tilt as shear), or for one slice the normal
//    times SpacingBetweenSlices (else SliceThickness, else 1), translation = the first slice's
//    ImagePositionPatient.
// Thread-safety: scan_dicom_series and read_dicom_series are re-entrant.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "voxpipe/dicom.hpp"
#include "voxpipe/dtype.hpp"

namespace voxpipe {

// A DICOM file held in memory (an object fetched from a store, say): `name` stands for its path
// in errors and in the series it joins (its URL); `bytes` stay valid, unchanged, while `owner`
// lives.
struct DicomBuffer {
  std::string name;
  std::span<const std::uint8_t> bytes;
  std::shared_ptr<const void> owner;
};

// The diffusion encoding of one image as the scanner stored it: Siemens' CSA image header
// (B_value, DiffusionGradientDirection), the standard attributes (0018,9087) and (0018,9089) at
// the top level or in an enhanced file's MR Diffusion Sequence (0018,9117), GE's (0043,1039) and
// (0019,10BB..BD), Philips' (2001,1003) and (2005,10B0..B2).
struct DicomDiffusion {
  double b_value = 0;  // s/mm^2
  // Unit gradient direction in the patient frame (DICOM LPS); nullopt for b = 0, isotropic
  // (trace) images and directions the file does not give. GE's (0019,10BB..BD), stated in the
  // frame of the encoding directions, are converted as dcm2niix converts them (its world
  // directions, polarity included), and need InPlanePhaseEncodingDirection ROW or COL.
  std::optional<std::array<double, 3>> direction;
  // Where the values came from: "standard", "CSA" (Siemens: the CSA image header, or its copies
  // (0019,xx0C) and (0019,xx0E)), "Philips", "GE". A file stating several gives the first of
  // these. Siemens' CSA image header of a file that is not a mosaic is read only when the file
  // can be diffusion-weighted (ImageType DIFFUSION, or SequenceName ep_b*, re_b*, ez_b*) and
  // states no cheaper copy.
  std::string source;
};

// One 2D image of a series: a single-frame file, or one frame of a multi-frame file.
struct DicomSlice {
  // The parsed file, trimmed to what decoding needs (the Image Pixel module, the pixel data
  // location, the transfer syntax); shared by the frames of a multi-frame file.
  std::shared_ptr<const DicomFile> file;
  // The file's bytes when it was scanned from memory (scan_dicom_buffers): its pixel data are
  // decoded from them. Null: they are read from file->path.
  std::shared_ptr<const DicomBuffer> buffer;
  std::shared_ptr<const DicomPixelInfo> pixel;  // the file's checked Image Pixel module
  std::uint64_t frame = 0;
  // Siemens mosaic: this image is tile `tile` (row-major) of a grid of tile_grid x tile_grid
  // tiles of the frame; tile_grid 0: the image is the whole frame.
  std::uint32_t tile = 0, tile_grid = 0;
  std::array<double, 3> position{};  // ImagePositionPatient (LPS mm)
  double distance = 0;               // position along the slice normal
  double slope = 1, intercept = 0;   // Rescale Slope / Intercept (per frame for enhanced files)
  // Ordering keys within one position (the volume order of a 4D series).
  std::int64_t temporal_index = 0;   // TemporalPositionIdentifier / TemporalPositionIndex
  std::int64_t acquisition_number = 0;
  double acquisition_time = 0;       // AcquisitionTime (or FrameAcquisitionDateTime) in seconds
  double trigger_time = 0;
  std::int64_t instance_number = 0;
  // The image's diffusion encoding; nullopt when its file states none.
  std::optional<DicomDiffusion> diffusion;
};

struct DicomSeries {
  std::string series_instance_uid;
  std::int64_t series_number = 0;
  std::string series_description;
  std::string modality;
  // What sets this part apart from other parts of the same SeriesInstanceUID ("" when the
  // series is whole), e.g. "echo 2", "orientation 2", "256x256", "stack 2", "phase"
  // ("magnitude", "real", "imaginary").
  std::string split;
  std::int64_t echo_number = 0;  // EchoNumbers of its images (0: not stated)
  // "PHASE", "REAL" or "IMAGINARY" when ImageType says the images hold that component (series are
  // split by it; dcm2niix names them _ph, _real, _imaginary); "" for magnitude or unstated.
  std::string image_component;
  std::uint32_t rows = 0, columns = 0;
  std::array<double, 6> orientation{};     // ImageOrientationPatient (row cosines, column cosines)
  std::array<double, 2> pixel_spacing{};   // (row spacing, column spacing), PixelSpacing order
  std::uint64_t slices = 0;                // per volume
  std::uint64_t volumes = 0;
  // Volume-major: volume v's slices, in increasing position, are
  // images[v * slices, (v + 1) * slices).
  std::vector<DicomSlice> images;
  std::array<double, 16> affine{};         // (i, j, k) -> RAS mm, row-major
  double slice_spacing = 0;                // mean distance between positions along the normal
  bool gantry_tilt = false;                // positions step off the normal (kept as shear)
  double tilt_degrees = 0;
  // The stored values' dtype (pixel_array's; rgb24 for colour images of 8-bit samples, decoded
  // to RGB as pydicom does) and the rescale shared by every image, when it is
  // (uniform_rescale); else the data need float to be exact.
  DType stored_dtype = DType::u16;
  bool uniform_rescale = true;
  double slope = 1, intercept = 0;
  // Empty when the series can be read; else why it cannot (read_dicom_series throws
  // Error(format) with it): uneven slice spacing (a missing slice), positions with different
  // numbers of images (a missing or duplicated slice in 4D), several images at one position of
  // a 3D series.
  std::string problem;
  // True when no image states ImagePositionPatient and ImageOrientationPatient (secondary
  // capture, CR/DX, ultrasound, a multi-frame file without positions): the images are stacked in
  // time order (a file's frames in frame order), rows along +x (LPS), columns along +y, slices
  // along +z, PixelSpacing (1 where absent or zero) and SpacingBetweenSlices (else
  // SliceThickness, else 1) apart, centred on the origin (the affine nibabel gives dcm2niix's
  // image of it), with a warning. Such an image is in no patient frame: NIfTI writers give it
  // qform and sform code 0, as dcm2niix does.
  bool no_geometry = false;
  std::vector<std::string> warnings;  // e.g. duplicate files dropped, gantry tilt
  // The first image's full dataset, for metadata (the JSON sidecar); shared. Its values longer
  // than DicomReadOptions' default max_value_size are located, not read: they are in the first
  // image's file, or its buffer (images.front().buffer).
  std::shared_ptr<const DicomFile> first_file;

  // (columns, rows, slices) or (columns, rows, slices, volumes).
  std::vector<std::uint64_t> shape() const;
};

struct DicomScanOptions {
  unsigned threads = 0;     // files parsed in parallel (0: the default, voxpipe/threads.hpp)
  bool recursive = true;    // folders: their subfolders too
  // Positions closer than this (mm) along the normal are the same position.
  double position_tolerance = 0.01;
  // Spacing between consecutive positions may vary by this much (mm) (dcm2niix: 0.2).
  double spacing_tolerance = 0.2;
  // Files that are not DICOM (or have no pixel data) are skipped; true: the first is an error.
  bool strict = false;
  // A Siemens mosaic whose NumberOfImagesInMosaic is larger is Error(limit): each tile becomes
  // an image of the scan, and a few hundred bytes of RLE can claim millions. Scanners write a
  // few hundred; (0019,xx0A) holds at most 65535.
  std::uint32_t max_mosaic_images = 65535;
};

struct DicomScanResult {
  std::vector<DicomSeries> series;  // by SeriesNumber, then SeriesInstanceUID, then split
  // Files skipped, each with why ("not DICOM", "no pixel data", the error's message).
  std::vector<std::pair<std::string, std::string>> skipped;
};

// Parses every file under `paths` (files, or folders) in parallel, up to the pixel data, and
// assembles the series. Siemens mosaics (ImageType MOSAIC, NumberOfImagesInMosaic from the CSA
// image header or (0019,xx0A)) are split into their slices, placed as nibabel.nicom's
// MosaicWrapper places them. Series are split by SeriesInstanceUID, then by orientation, image size,
// EchoNumbers, StackID, samples per pixel and image component (magnitude, phase, real,
// imaginary: DicomSeries::image_component). Images at the same position form a 4D series when
// every position has the same number of them, ordered by temporal index, acquisition number,
// acquisition time, trigger time and instance number; files with the same SOPInstanceUID are
// read once. A multi-frame file without functional groups (cine, ultrasound, RT dose) is a
// stack of its frames in frame order, from its ImagePositionPatient along the normal
// SpacingBetweenSlices (else SliceThickness, else 1 mm) apart, as dcm2niix stacks them;
// without a position or orientation, the series has no geometry (DicomSeries::no_geometry).
// Memory: a trimmed dataset per file.
DicomScanResult scan_dicom_series(const std::vector<std::string>& paths,
                                  const DicomScanOptions& options = {});

// scan_dicom_series over files held in memory, taken in the order given (`recursive` does not
// apply): the same parsing, grouping, checks and errors, each naming the buffer's `name`. Every
// image keeps its file's buffer (DicomSlice::buffer, sharing `owner`), from which
// read_dicom_series decodes it: a series keeps the buffers of its own files alive, and never
// copies their bytes. Thread-safe as scan_dicom_series; `owner`s may be released on any thread.
DicomScanResult scan_dicom_buffers(const std::vector<DicomBuffer>& buffers,
                                   const DicomScanOptions& options = {});

// Reads a series into `out` (from its files, or the buffers it was scanned from), Fortran order
// with series.shape(): `out_type` stored_dtype (the values of pixel_array, every image must share
// one rescale to be meaningful), or f32/f64 (each image's Rescale Slope and Intercept applied in
// float64, then rounded to f32); a colour series (rgb24) reads as rgb24 only. Images are
// decoded in parallel on `threads` (0: the default, resolve_threads in voxpipe/threads.hpp);
// memory beyond `out` is a frame per thread.
// Error(format) when series.problem is set; Error(invalid_argument) for an `out` of the wrong
// size or type; the decoders' errors as decode_dicom_frames has them (`on_corrupt` as there).
// Returns decode_dicom_frames' warnings, image by image.
std::vector<std::string> read_dicom_series(const DicomSeries& series, std::span<std::uint8_t> out,
                                           DType out_type, unsigned threads = 0,
                                           DicomOnCorrupt on_corrupt = DicomOnCorrupt::raise);

// A diffusion series' gradient table, one entry per volume.
struct DicomGradientTable {
  std::vector<double> bvals;                 // s/mm^2
  std::vector<std::array<double, 3>> bvecs;  // FSL's convention (dicom_gradient_table)
};

// The gradient table of `series` for an image of it written with `affine` (row-major 4x4, voxel
// -> RAS mm: the series' own affine, or one with axes flipped or permuted): each volume's
// direction in the image's voxel axes, with x negated when the determinant of the affine's 3x3
// is positive, as FSL reads .bvec and dcm2niix writes it; (0, 0, 0) for b = 0 and for images
// without a direction. An image without an encoding in a series where others have one counts as
// b = 0. nullopt when no image of the series has a diffusion encoding, or when the series has a
// problem (its images are not in volume order). Error(format) naming the image when the slices
// of one volume disagree (different b-values or directions); Error(invalid_argument) for an
// affine with a zero or non-finite column.
std::optional<DicomGradientTable> dicom_gradient_table(const DicomSeries& series,
                                                       const std::array<double, 16>& affine);

}  // namespace voxpipe
