// Series assembly's internals, shared by its parts: the tags it reads, the geometry helpers, the
// image one parsed file yields before grouping (series_images.cpp makes it, series.cpp groups,
// sorts and checks it), and the diffusion encoding reads (series_diffusion.cpp). Internal.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dicom/csa.hpp"
#include "voxpipe/dicom_series.hpp"

namespace voxpipe::dicom::series_detail {

inline constexpr DicomTag kSOPInstanceUID = 0x00080018, kModality = 0x00080060,
                          kSeriesDescription = 0x0008103E, kAcquisitionTime = 0x00080032,
                          kSliceThickness = 0x00180050, kSpacingBetweenSlices = 0x00180088,
                          kTriggerTime = 0x00181060, kEchoNumbers = 0x00180086,
                          kSeriesInstanceUID = 0x0020000E, kSeriesNumber = 0x00200011,
                          kAcquisitionNumber = 0x00200012, kInstanceNumber = 0x00200013,
                          kImagePosition = 0x00200032, kImageOrientation = 0x00200037,
                          kTemporalPositionIdentifier = 0x00200100, kPixelSpacing = 0x00280030,
                          kRescaleIntercept = 0x00281052, kRescaleSlope = 0x00281053,
                          kSharedGroups = 0x52009229, kPerFrameGroups = 0x52009230,
                          kFrameContent = 0x00209111, kPlanePosition = 0x00209113,
                          kPlaneOrientation = 0x00209116, kPixelMeasures = 0x00289110,
                          kPixelValueTransformation = 0x00289145, kStackID = 0x00209056,
                          kTemporalPositionIndex = 0x00209128, kFrameAcquisitionNumber = 0x00209156,
                          kFrameAcquisitionDateTime = 0x00189074, kMREchoSequence = 0x00189114,
                          kEffectiveEchoTime = 0x00189082, kImageType = 0x00080008,
                          kSequenceName = 0x00180024, kDiffusionBValue = 0x00189087,
                          kDiffusionGradientOrientation = 0x00189089,
                          kDiffusionDirectionality = 0x00189075, kMRDiffusionSequence = 0x00189117,
                          kDiffusionGradientDirectionSequence = 0x00189076,
                          kComplexImageComponent = 0x00089208, kMRImageFrameType = 0x00189226,
                          kInPlanePhaseEncodingDirection = 0x00181312;

using Vec3 = std::array<double, 3>;

inline Vec3 cross(const Vec3& a, const Vec3& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}
inline double dot(const Vec3& a, const Vec3& b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }
inline double norm(const Vec3& a) { return std::sqrt(dot(a, a)); }

template <std::size_t N>
bool fill(std::array<double, N>& dst, const std::vector<double>& v) {
  if (v.size() < N) return false;
  std::copy_n(v.begin(), N, dst.begin());
  return true;
}

// One image as parsed, before grouping.
struct Image {
  DicomSlice slice;
  std::string series_uid, sop_uid, description, modality, echo, stack;
  std::string component;         // DicomSeries::image_component
  std::int64_t echo_number = 0;  // the first of EchoNumbers
  std::int64_t series_number = 0;
  std::array<double, 6> orientation{};
  std::array<double, 2> spacing{};
  double thickness = 0, between = 0;
  std::uint32_t rows = 0, columns = 0, samples = 1;
  DType dtype = DType::u16;
  bool has_position = false, has_orientation = false;
  std::string file_problem;  // set for images that cannot be placed (no per-frame positions)
  std::string file_warning;  // a CSA image header that could not be read: why
  // The number of frames of its multi-frame file when that file has no functional groups (its
  // frames are stacked in frame order); 0 otherwise.
  std::uint64_t frame_stack = 0;
};

// The bytes of a file held in memory; empty: read it from its path.
inline std::span<const std::uint8_t> bytes_of(const std::shared_ptr<const DicomBuffer>& buffer) {
  return buffer ? buffer->bytes : std::span<const std::uint8_t>{};
}

// The images of one parsed file (one per frame for enhanced multi-frame files and frame stacks,
// one per tile for a Siemens mosaic); `buffer`: the file's bytes when it is held in memory, null
// when it is read from parsed.path. series_images.cpp.
std::vector<Image> images_of(DicomFile&& parsed, const DicomScanOptions& options,
                             const std::shared_ptr<const DicomBuffer>& buffer);

// The standard attributes of `d` (the dataset, or an item of MR Diffusion Sequence): b-value,
// and the direction unless DiffusionDirectionality says the image has none (ISOTROPIC, NONE).
// series_diffusion.cpp.
std::optional<DicomDiffusion> standard_diffusion(const DicomDataset& d);

// The diffusion encoding stated at the top level of a single-frame file; `csa`: its CSA image
// header when the caller read it. series_diffusion.cpp.
std::optional<DicomDiffusion> file_diffusion(const DicomDataset& ds, const dicom::CsaHeader* csa);

}  // namespace voxpipe::dicom::series_detail
