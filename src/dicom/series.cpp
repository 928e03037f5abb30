// Series assembly: files parsed in parallel, grouped (SeriesInstanceUID, then the fields that
// split a series), sorted along the slice normal (never by InstanceNumber alone), 4D detected
// from repeated positions, checked (spacing, counts, tilt), and the NIfTI RAS affine computed as
// nibabel.nicom does. include/voxpipe/dicom_series.hpp states the conventions.
#include "voxpipe/dicom_series.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <sstream>
#include <tuple>

#include "dicom/csa.hpp"
#include "dicom/modality.hpp"
#include "dicom/series_planes.hpp"
#include "core/file.hpp"
#include "core/thread_pool.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/threads.hpp"

namespace voxpipe {
namespace {

using dicom::apply_modality;
using dicom::Modality;

namespace fs = std::filesystem;

constexpr DicomTag kSOPInstanceUID = 0x00080018, kModality = 0x00080060,
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

Vec3 cross(const Vec3& a, const Vec3& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}
double dot(const Vec3& a, const Vec3& b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }
double norm(const Vec3& a) { return std::sqrt(dot(a, a)); }

// "HHMMSS.FFFFFF" (or with colons, older files) in seconds; 0 when absent or unreadable.
double dicom_time_seconds(const std::string& s) {
  std::string t;
  for (char c : s)
    if (c != ':') t.push_back(c);
  if (t.size() < 2) return 0;
  const auto num = [&](std::size_t at, std::size_t n) {
    return at + n <= t.size() ? std::atof(t.substr(at, n).c_str()) : 0.0;
  };
  return num(0, 2) * 3600 + num(2, 2) * 60 + (t.size() > 4 ? std::atof(t.substr(4).c_str()) : 0);
}

// A value from a functional group: the per-frame item's, else the shared one's.
struct Groups {
  const DicomDataset* per_frame = nullptr;
  const DicomDataset* shared = nullptr;
  const DicomDataset* find(DicomTag sequence) const {
    for (const DicomDataset* g : {per_frame, shared}) {
      if (!g) continue;
      const auto& items = g->items(sequence);
      if (!items.empty()) return &items.front();
    }
    return nullptr;
  }
};

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

// The file reduced to what decoding needs: meta, transfer syntax, pixel data location and the
// group 0028 elements (Image Pixel, Modality LUT).
std::shared_ptr<const DicomFile> trimmed(DicomFile&& f) {
  std::vector<DicomElement> keep;
  for (const DicomElement& e : f.dataset.elements())
    if (dicom_group(e.tag) == 0x0028 || dicom_group(e.tag) == 0x7FE0) keep.push_back(e);
  auto out = std::make_shared<DicomFile>();
  out->path = std::move(f.path);
  out->has_preamble = f.has_preamble;
  out->transfer_syntax = std::move(f.transfer_syntax);
  out->implicit_vr = f.implicit_vr;
  out->big_endian = f.big_endian;
  out->dataset_offset = f.dataset_offset;
  out->offsets_in_inflated_stream = f.offsets_in_inflated_stream;
  out->pixel_data = std::move(f.pixel_data);
  out->identity = f.identity;
  out->dataset = DicomDataset(std::move(keep), f.dataset.big_endian());
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : "\\") + x;
  return s;
}

template <std::size_t N>
bool fill(std::array<double, N>& dst, const std::vector<double>& v) {
  if (v.size() < N) return false;
  std::copy_n(v.begin(), N, dst.begin());
  return true;
}


// ---- Siemens mosaic --------------------------------------------------------------------------

using dicom::private_element;

// The CSA image header of a single-frame Siemens file, for the scan: nullopt when it has none,
// or when its value is over 1 MiB (usually 10-20 KiB; the scan keeps values under 1 KiB, so it
// is read here from the file or its bytes).
std::optional<dicom::CsaHeader> scan_csa(const DicomDataset& ds, const std::string& path,
                                         std::span<const std::uint8_t> bytes,
                                         bool offsets_in_inflated_stream) {
  const DicomElement* e = private_element(ds, 0x0029, "SIEMENS CSA HEADER", 0x10);
  if (!e || (!e->value_read && e->length > (std::uint64_t{1} << 20))) return std::nullopt;
  return dicom::csa_header(ds, dicom::CsaKind::image, path, bytes, offsets_in_inflated_stream);
}

bool image_type_has(const DicomDataset& ds, std::string_view value) {
  for (const std::string& v : ds.strings(kImageType))
    if (v == value) return true;
  return false;
}

// The number of images of a Siemens mosaic, and the slice normal its CSA header (`csa`, read by
// the caller for mosaics) gives; nullopt when the file is not a mosaic.
std::optional<std::pair<std::int64_t, std::optional<Vec3>>> mosaic_of(
    const DicomDataset& ds, const std::string& path, const dicom::CsaHeader* csa,
    std::int64_t max_images) {
  if (!image_type_has(ds, "MOSAIC")) return std::nullopt;
  std::optional<std::int64_t> images_in_mosaic;
  std::optional<Vec3> slice_normal;
  std::optional<std::uint64_t> offset;  // of the value that gave the number, for the error
  if (const DicomElement* e = private_element(ds, 0x0029, "SIEMENS CSA HEADER", 0x10)) {
    offset = e->value_offset;
    if (csa) {
      if (const auto n = csa->number("NumberOfImagesInMosaic"); n && std::isfinite(*n))
        images_in_mosaic = static_cast<std::int64_t>(std::clamp(*n, -1.0, 9.0e18));
      if (const auto v = csa->numbers("SliceNormalVector"); v.size() >= 3)
        slice_normal = Vec3{v[0], v[1], v[2]};
    }
  }
  if (!images_in_mosaic) {
    if (const DicomElement* e = private_element(ds, 0x0019, "SIEMENS MR HEADER", 0x0A);
        e && e->value_read && e->value.size() >= 2) {
      images_in_mosaic = ds.big_endian() ? (e->value[0] << 8 | e->value[1])
                                         : (e->value[0] | e->value[1] << 8);
      offset = e->value_offset;
    }
  }
  if (!images_in_mosaic || *images_in_mosaic < 1) return std::nullopt;
  // Each tile becomes an image of the scan (a few hundred bytes), and a compressed frame of
  // 256 Mi pixels can come from a few hundred bytes of RLE: without a cap, a small file could
  // claim gigabytes here (DicomScanOptions::max_mosaic_images).
  if (*images_in_mosaic > max_images)
    throw Error(ErrorCode::limit, path, "NumberOfImagesInMosaic",
                "is " + std::to_string(*images_in_mosaic) + "; at most " +
                    std::to_string(max_images) + " tiles are read (DicomScanOptions::max_mosaic_images)",
                offset);
  return std::pair{*images_in_mosaic, slice_normal};
}

// ---- Diffusion encoding ----------------------------------------------------------------------
// Where each vendor states it, as dcm2niix reads it (nii_dicom.cpp): directions in the patient
// frame (LPS) for the standard attributes, Siemens and Philips; b-values in s/mm^2.

// A unit direction from three numbers; nullopt for a zero (isotropic, trace) or non-finite one.
std::optional<Vec3> unit_direction(const std::vector<double>& v) {
  if (v.size() < 3) return std::nullopt;
  Vec3 d{v[0], v[1], v[2]};
  const double n = norm(d);
  if (!std::isfinite(n) || n < 1e-6) return std::nullopt;
  for (double& x : d) x /= n;
  return d;
}

std::optional<DicomDiffusion> diffusion(std::optional<double> b, std::optional<Vec3> direction,
                                        const char* source) {
  if (!b || !std::isfinite(*b) || *b < 0) return std::nullopt;
  DicomDiffusion d;
  d.b_value = *b;
  if (*b > 0) d.direction = direction;
  d.source = source;
  return d;
}

// The numbers of a private element whose VR the file may not state (implicit VR: UN): `text`
// values (IS, DS) split at '\', else binary float64 (`size` 8) or float32 (4) values.
std::vector<double> private_numbers(const DicomDataset& ds, const DicomElement* e, bool text,
                                    std::size_t size = 8) {
  if (!e || !e->value_read) return {};
  if (e->vr != DicomVR::UN && e->vr != DicomVR::unknown && e->vr != DicomVR::OB)
    return ds.numbers(e->tag);
  std::vector<double> out;
  if (text) {
    std::string s(e->value.begin(), e->value.end());
    std::size_t at = 0;
    while (at <= s.size()) {
      const std::size_t end = std::min(s.find('\\', at), s.size());
      const std::string part = s.substr(at, end - at);
      char* stop = nullptr;
      const double v = std::strtod(part.c_str(), &stop);
      if (stop == part.c_str()) break;
      out.push_back(v);
      at = end + 1;
    }
    return out;
  }
  for (std::size_t at = 0; at + size <= e->value.size(); at += size) {
    std::uint8_t b[8];
    for (std::size_t i = 0; i < size; ++i)
      b[i] = e->value[at + (ds.big_endian() ? size - 1 - i : i)];
    if (size == 8) {
      double v;
      std::memcpy(&v, b, 8);
      out.push_back(v);
    } else {
      float v;
      std::memcpy(&v, b, 4);
      out.push_back(v);
    }
  }
  return out;
}

// The standard attributes of `d` (the dataset, or an item of MR Diffusion Sequence): b-value,
// and the direction unless DiffusionDirectionality says the image has none (ISOTROPIC, NONE).
std::optional<DicomDiffusion> standard_diffusion(const DicomDataset& d) {
  const auto b = d.number(kDiffusionBValue);
  if (!b) return std::nullopt;
  std::optional<Vec3> direction;
  const std::string directionality = d.string(kDiffusionDirectionality).value_or("DIRECTIONAL");
  if (directionality == "DIRECTIONAL" || directionality == "BMATRIX") {
    direction = unit_direction(d.numbers(kDiffusionGradientOrientation));
    for (const DicomDataset& item : d.items(kDiffusionGradientDirectionSequence)) {
      if (!direction) direction = unit_direction(item.numbers(kDiffusionGradientOrientation));
      break;
    }
  }
  return diffusion(b, direction, "standard");
}

// ---- Image component ---------------------------------------------------------------------------
// Magnitude, phase, real and imaginary images of one acquisition share a SeriesInstanceUID on
// most scanners; dcm2niix writes them as separate images (_ph, _real, _imaginary), from the
// same evidence read here: ComplexImageComponent (0008,9208) where the file has it (enhanced
// files per frame, in MR Image Frame Type), else a value of ImageType ("P" or one holding
// "PHASE", "R" or "REAL", "I" or "IMAGINARY": Siemens and Philips), else GE's (0043,xx2F)
// (0 magnitude, 1 phase, 2 real, 3 imaginary). "" for magnitude and for images that state none.

std::string component_from_complex(const DicomDataset& d) {
  const std::string c = d.string(kComplexImageComponent).value_or("");
  if (c == "PHASE" || c == "REAL" || c == "IMAGINARY") return c;
  return "";
}

std::optional<std::string> image_component(const DicomDataset& ds) {
  if (ds.contains(kComplexImageComponent)) return component_from_complex(ds);
  for (const std::string& v : ds.strings(kImageType)) {
    if (v == "P" || v.find("PHASE") != std::string::npos) return "PHASE";
    if (v == "R" || v == "REAL") return "REAL";
    if (v == "I" || v == "IMAGINARY") return "IMAGINARY";
  }
  if (const DicomElement* e = private_element(ds, 0x0043, "GEMS_PARM_01", 0x2F)) {
    if (e->value_read && e->value.size() >= 2 && e->vr != DicomVR::IS) {
      const int v = ds.big_endian() ? (e->value[0] << 8 | e->value[1])
                                    : (e->value[0] | e->value[1] << 8);
      if (v == 1) return "PHASE";
      if (v == 2) return "REAL";
      if (v == 3) return "IMAGINARY";
    }
  }
  return std::nullopt;
}

// The first value of EchoNumbers, 0 when absent or not a number (some files write it as text
// that IS does not accept).
std::int64_t echo_number(const DicomDataset& ds) {
  const auto v = ds.strings(kEchoNumbers);
  if (v.empty()) return 0;
  return std::atoll(v.front().c_str());
}

// Whether a Siemens file can hold a diffusion-weighted image, so that its CSA image header is
// worth reading: ImageType DIFFUSION (Siemens writes it for every DWI image, b = 0 included), or
// a diffusion sequence name (ep_b*, re_b* for RESOLVE, ez_b* for ZOOMit). Other files keep the
// scan's cost: the header is some 10-20 KiB read per file, which would double the scan of a
// plain series.
bool siemens_diffusion_candidate(const DicomDataset& ds) {
  if (image_type_has(ds, "DIFFUSION")) return true;
  const std::string name = ds.string(kSequenceName).value_or("");
  for (const char* p : {"ep_b", "re_b", "ez_b"})
    if (name.find(p) != std::string::npos) return true;
  return false;
}

// GE's (0019,xxBB..BD) direction in the patient frame (LPS). GE states it in the frame of the
// encoding directions, with signs that depend on the slice orientation; this is dcm2niix's
// transform (geCorrectBvecs, from dicm2nii), whose result, in its image's axes (row direction,
// minus the column direction, slice normal), is taken back to LPS: for ROW phase encoding swap
// x and y and negate the new y; negate the components the slice orientation names (sagittal:
// x and y, coronal: y and z, axial: z, the orientation being the normal's largest component);
// negate y, then all three (and see the coronal ROW case below). nullopt when the phase
// encoding direction is not ROW or COL.
std::optional<Vec3> ge_direction(Vec3 g, const std::array<double, 6>& iop,
                                 const std::string& phase_encoding) {
  if (phase_encoding != "ROW" && phase_encoding != "COL") return std::nullopt;
  const Vec3 row{iop[0], iop[1], iop[2]}, col{iop[3], iop[4], iop[5]};
  const Vec3 normal = cross(row, col);
  if (phase_encoding == "ROW") g = {g[1], -g[0], g[2]};
  // The slice orientation as dcm2niix picks it (verify_slice_dir: ties go to the later axis).
  const double a0 = std::abs(normal[0]), a1 = std::abs(normal[1]), a2 = std::abs(normal[2]);
  int axis = 0;
  if (a1 >= a0 && a1 >= a2) axis = 1;
  if (a2 >= a0 && a2 >= a1) axis = 2;
  static constexpr bool kFlip[3][3] = {{true, true, false}, {false, true, true}, {false, false, true}};
  for (int i = 0; i < 3; ++i)
    if (kFlip[axis][i]) g[i] = -g[i];
  g[1] = -g[1];
  for (double& x : g) x = -x;
  // Coronal slices with ROW phase encoding: dcm2niix v1.0.20260724 writes the in-plane
  // components negated from what its published transform gives (observed on files made with
  // pydicom; dcm2niix warns that its ROW case is untested). Followed for parity.
  if (axis == 1 && phase_encoding == "ROW") g[0] = -g[0], g[1] = -g[1];
  Vec3 lps{};
  for (int r = 0; r < 3; ++r) lps[r] = g[0] * row[r] - g[1] * col[r] + g[2] * normal[r];
  return unit_direction({lps[0], lps[1], lps[2]});
}

// The diffusion encoding stated at the top level of a single-frame file; `csa`: its CSA image
// header when the caller read it.
std::optional<DicomDiffusion> file_diffusion(const DicomDataset& ds, const dicom::CsaHeader* csa) {
  if (auto d = standard_diffusion(ds)) return d;
  if (csa) {
    if (const auto b = csa->number("B_value"))
      return diffusion(b, unit_direction(csa->numbers("DiffusionGradientDirection")), "CSA");
  }
  // Siemens' copies of the CSA values in "SIEMENS MR HEADER": B_value (IS), and
  // DiffusionGradientDirection (FD x 3).
  if (const DicomElement* e = private_element(ds, 0x0019, "SIEMENS MR HEADER", 0x0C)) {
    const auto b = private_numbers(ds, e, true);
    if (!b.empty()) {
      const DicomElement* g = private_element(ds, 0x0019, "SIEMENS MR HEADER", 0x0E);
      return diffusion(b.front(), unit_direction(private_numbers(ds, g, false, 8)), "CSA");
    }
  }
  // Philips: (2001,xx03) b-value (FL); (2005,xxB0..B2) the direction's RL, AP, FH components
  // (FL), the patient frame (LPS) as the standard's.
  if (const DicomElement* e = private_element(ds, 0x2001, "Philips Imaging DD 001", 0x03)) {
    const auto b = private_numbers(ds, e, false, 4);
    if (!b.empty()) {
      std::vector<double> v;
      for (std::uint8_t el : {0xB0, 0xB1, 0xB2}) {
        const auto c = private_numbers(
            ds, private_element(ds, 0x2005, "Philips MR Imaging DD 001", el), false, 4);
        if (!c.empty()) v.push_back(c.front());
      }
      return diffusion(b.front(), unit_direction(v), "Philips");
    }
  }
  // GE: (0043,xx39) "Slop_int_6..9", the b-value first, plus 10^9 in some software versions
  // (dcm2niix issue 602); the direction in (0019,xxBB..BD), in the frame of the encoding
  // directions (ge_direction).
  if (const DicomElement* e = private_element(ds, 0x0043, "GEMS_PARM_01", 0x39)) {
    const auto v = private_numbers(ds, e, true);
    if (!v.empty() && std::isfinite(v.front())) {
      double b = std::fmod(v.front(), 1e9);
      std::vector<double> g;
      for (std::uint8_t el : {0xBB, 0xBC, 0xBD}) {
        const auto c = private_numbers(ds, private_element(ds, 0x0019, "GEMS_ACQU_01", el), true);
        if (!c.empty()) g.push_back(c.front());
      }
      std::optional<Vec3> direction;
      if (g.size() == 3 && b > 0) {
        // A vector shorter than 1 scales the b-value by its squared length (GE's multi-shell
        // tensor files; dcm2niix issues 163, 245): b rounded to 5, at least 5.
        const double len = norm(Vec3{g[0], g[1], g[2]});
        if (len > 0.03 && len < 0.97) {
          const double scaled = b * len * len;
          b = scaled < 5 ? 5 : std::floor((scaled + 2.5) / 5) * 5;
        }
        std::array<double, 6> iop{};
        if (fill(iop, ds.numbers(kImageOrientation)))
          direction = ge_direction({g[0], g[1], g[2]}, iop,
                                   ds.string(kInPlanePhaseEncodingDirection).value_or(""));
      }
      return diffusion(b, direction, "GE");
    }
  }
  return std::nullopt;
}

// The bytes of a file held in memory; empty: read it from its path.
std::span<const std::uint8_t> bytes_of(const std::shared_ptr<const DicomBuffer>& buffer) {
  return buffer ? buffer->bytes : std::span<const std::uint8_t>{};
}

// The images of one parsed file (one per frame for enhanced multi-frame files); `buffer`: the
// file's bytes when it is held in memory, null when it is read from parsed.path.
std::vector<Image> images_of(DicomFile&& parsed, const DicomScanOptions& options,
                             const std::shared_ptr<const DicomBuffer>& buffer) {
  const DicomDataset& ds = parsed.dataset;
  auto pixel = std::make_shared<const DicomPixelInfo>(dicom_pixel_info(parsed, bytes_of(buffer)));
  Image base;
  base.series_uid = ds.uid(kSeriesInstanceUID).value_or("");
  base.sop_uid = ds.uid(kSOPInstanceUID).value_or("");
  base.description = ds.string(kSeriesDescription).value_or("");
  base.modality = ds.string(kModality).value_or("");
  base.series_number = ds.integer(kSeriesNumber).value_or(0);
  base.echo = joined(ds.strings(kEchoNumbers));
  base.echo_number = echo_number(ds);
  base.component = image_component(ds).value_or("");
  base.rows = pixel->rows;
  base.columns = pixel->columns;
  base.samples = pixel->samples_per_pixel;
  base.dtype = pixel->dtype;
  // Colour images of 8-bit samples decoded to RGB (RGB, YBR_FULL and YBR_FULL_422 as pydicom
  // converts them, JPEG 2000's YBR_ICT/RCT) are read as rgb24, as dcm2niix writes them; other
  // colour images are refused (assemble).
  if (pixel->samples_per_pixel == 3 && pixel->dtype == DType::u8 && pixel->photometric_out == "RGB")
    base.dtype = DType::rgb24;
  base.has_orientation = fill(base.orientation, ds.numbers(kImageOrientation));
  fill(base.spacing, ds.numbers(kPixelSpacing));
  base.thickness = ds.number(kSliceThickness).value_or(0);
  base.between = ds.number(kSpacingBetweenSlices).value_or(0);
  base.slice.pixel = pixel;
  base.slice.buffer = buffer;
  base.has_position = fill(base.slice.position, ds.numbers(kImagePosition));
  if (ds.contains(kRescaleSlope) && ds.contains(kRescaleIntercept)) {
    base.slice.slope = ds.number(kRescaleSlope).value_or(1);
    base.slice.intercept = ds.number(kRescaleIntercept).value_or(0);
  }
  base.slice.temporal_index = ds.integer(kTemporalPositionIdentifier).value_or(0);
  base.slice.acquisition_number = ds.integer(kAcquisitionNumber).value_or(0);
  base.slice.acquisition_time = dicom_time_seconds(ds.string(kAcquisitionTime).value_or(""));
  base.slice.trigger_time = ds.number(kTriggerTime).value_or(0);
  base.slice.instance_number = ds.integer(kInstanceNumber).value_or(0);

  const auto& per_frame = ds.items(kPerFrameGroups);
  const auto& shared = ds.items(kSharedGroups);
  std::vector<Image> out;
  if (pixel->number_of_frames == 1 && per_frame.empty()) {
    // The CSA image header, read once: for a mosaic (its image count) and for the diffusion
    // encoding of a file that can be diffusion-weighted and has no cheaper statement of it.
    std::optional<dicom::CsaHeader> csa;
    if (image_type_has(ds, "MOSAIC") ||
        (!ds.contains(kDiffusionBValue) &&
         !private_element(ds, 0x0019, "SIEMENS MR HEADER", 0x0C) &&
         siemens_diffusion_candidate(ds))) {
      // A damaged CSA header (an anonymiser that cut it, a lying count) costs what it gives, not
      // the image: a mosaic falls back to (0019,xx0A) as before the header was parsed whole,
      // and the series says why (DicomSeries::warnings).
      try {
        csa = scan_csa(ds, parsed.path, bytes_of(buffer), parsed.offsets_in_inflated_stream);
      } catch (const Error& e) {
        if (e.code() != ErrorCode::format) throw;
        base.file_warning = e.what();
      }
    }
    base.slice.diffusion = file_diffusion(ds, csa ? &*csa : nullptr);
    if (const auto mosaic = mosaic_of(ds, parsed.path, csa ? &*csa : nullptr,
                                      options.max_mosaic_images)) {
      // Siemens mosaic: n slices tiled on a ceil(sqrt(n)) grid. The file's position is the
      // mosaic's corner: the first tile's is shifted by half the difference in size along the
      // column and row directions (nibabel.nicom's MosaicWrapper.image_position), and tile k
      // lies k slice spacings along the slice normal (the CSA header's when it has one).
      const std::int64_t n = mosaic->first;
      const auto grid = static_cast<std::uint32_t>(std::ceil(std::sqrt(double(n)) - 1e-9));
      // Tiles are Rows / grid by Columns / grid, rounded down (nibabel.nicom; a remainder is
      // left unused).
      if (grid == 0 || pixel->rows < grid || pixel->columns < grid ||
          std::int64_t(grid) * grid < n) {
        base.file_problem = "a mosaic of " + std::to_string(n) + " images does not tile " +
                            std::to_string(pixel->rows) + " x " + std::to_string(pixel->columns);
      } else {
        const Vec3 row{base.orientation[0], base.orientation[1], base.orientation[2]};
        const Vec3 col{base.orientation[3], base.orientation[4], base.orientation[5]};
        Vec3 normal = mosaic->second.value_or(cross(row, col));
        if (const double len = norm(normal); len > 0) for (double& x : normal) x /= len;
        const double step = base.between > 0 ? base.between : base.thickness > 0 ? base.thickness : 1.0;
        const std::uint32_t tile_rows = pixel->rows / grid, tile_columns = pixel->columns / grid;
        Vec3 origin = base.slice.position;
        for (int r = 0; r < 3; ++r)
          origin[r] += col[r] * base.spacing[0] * (double(pixel->rows) - tile_rows) / 2 +
                       row[r] * base.spacing[1] * (double(pixel->columns) - tile_columns) / 2;
        auto file = trimmed(std::move(parsed));
        for (std::int64_t k = 0; k < n; ++k) {
          Image im = base;
          im.rows = tile_rows;
          im.columns = tile_columns;
          im.slice.file = file;
          im.slice.tile = static_cast<std::uint32_t>(k);
          im.slice.tile_grid = grid;
          for (int r = 0; r < 3; ++r) im.slice.position[r] = origin[r] + double(k) * step * normal[r];
          out.push_back(std::move(im));
        }
        return out;
      }
    }
  }
  if (pixel->number_of_frames <= 1 && per_frame.empty()) {
    base.slice.file = trimmed(std::move(parsed));
    out.push_back(std::move(base));
    return out;
  }
  if (per_frame.empty()) {
    // A multi-frame file without functional groups (cine, US, NM, RT dose, a converted
    // enhanced file): its frames are the slices of one stack, in frame order, as dcm2niix stacks
    // them. With the file's ImagePositionPatient and ImageOrientationPatient, frame k lies k
    // steps (SpacingBetweenSlices, else SliceThickness, else 1 mm: dcm2niix's) along the normal
    // from that position; without them the stack has no geometry (assemble). One image per
    // frame (some hundred bytes each), so the frames must be backed by bytes: each needs at
    // least 8 bytes of pixel data (an encapsulated frame's item header; smaller native frames
    // are test patterns). 1-byte RLE frames would otherwise let a 500-byte file claim 256 Mi
    // images (found by fuzz_dicom_series).
    const std::uint64_t n = pixel->number_of_frames;
    const std::uint64_t backed = parsed.pixel_data ? parsed.pixel_data->length / 8 : 0;
    if (n > std::max<std::uint64_t>(backed, 1)) {
      base.file_problem = "a multi-frame file without per-frame positions (" + std::to_string(n) +
                          " frames) whose pixel data (" +
                          std::to_string(parsed.pixel_data ? parsed.pixel_data->length : 0) +
                          " bytes) cannot hold that many";
      base.slice.file = trimmed(std::move(parsed));
      out.push_back(std::move(base));
      return out;
    }
    const bool placed = base.has_position && base.has_orientation;
    Vec3 normal = cross(Vec3{base.orientation[0], base.orientation[1], base.orientation[2]},
                        Vec3{base.orientation[3], base.orientation[4], base.orientation[5]});
    if (const double len = norm(normal); len > 0) for (double& x : normal) x /= len;
    const double step = base.between > 0 ? base.between : base.thickness > 0 ? base.thickness : 1.0;
    auto file = trimmed(std::move(parsed));
    out.reserve(static_cast<std::size_t>(n));
    for (std::uint64_t i = 0; i < n; ++i) {
      Image im = base;
      im.slice.file = file;
      im.slice.frame = i;
      im.frame_stack = n;
      if (placed)
        for (int r = 0; r < 3; ++r) im.slice.position[r] += double(i) * step * normal[r];
      out.push_back(std::move(im));
    }
    return out;
  }
  if (per_frame.size() < pixel->number_of_frames) {
    base.file_problem = "a multi-frame file with per-frame functional groups for " +
                        std::to_string(per_frame.size()) + " of its " +
                        std::to_string(pixel->number_of_frames) + " frames";
    base.slice.file = trimmed(std::move(parsed));
    out.push_back(std::move(base));
    return out;
  }
  // Enhanced files: the diffusion encoding of each frame is in its MR Diffusion Sequence (per
  // frame, or shared), else at the top level.
  const std::optional<DicomDiffusion> top_diffusion = file_diffusion(ds, nullptr);
  auto file = trimmed(std::move(parsed));
  for (std::uint64_t i = 0; i < pixel->number_of_frames; ++i) {
    Image im = base;
    im.slice.file = file;
    im.slice.frame = i;
    Groups g{&per_frame[i], shared.empty() ? nullptr : &shared.front()};
    if (const DicomDataset* d = g.find(kMRDiffusionSequence))
      im.slice.diffusion = standard_diffusion(*d);
    else
      im.slice.diffusion = top_diffusion;
    if (const DicomDataset* p = g.find(kPlanePosition))
      im.has_position = fill(im.slice.position, p->numbers(kImagePosition));
    if (const DicomDataset* o = g.find(kPlaneOrientation))
      im.has_orientation = fill(im.orientation, o->numbers(kImageOrientation));
    if (const DicomDataset* m = g.find(kPixelMeasures)) {
      fill(im.spacing, m->numbers(kPixelSpacing));
      im.thickness = m->number(kSliceThickness).value_or(im.thickness);
      im.between = m->number(kSpacingBetweenSlices).value_or(im.between);
    }
    if (const DicomDataset* t = g.find(kPixelValueTransformation)) {
      im.slice.slope = t->number(kRescaleSlope).value_or(1);
      im.slice.intercept = t->number(kRescaleIntercept).value_or(0);
    }
    if (const DicomDataset* c = g.find(kFrameContent)) {
      im.slice.temporal_index = c->integer(kTemporalPositionIndex).value_or(0);
      im.slice.acquisition_number = c->integer(kFrameAcquisitionNumber).value_or(0);
      im.stack = c->string(kStackID).value_or("");
      const std::string when = c->string(kFrameAcquisitionDateTime).value_or("");
      if (when.size() > 8) im.slice.acquisition_time = dicom_time_seconds(when.substr(8));
    }
    if (const DicomDataset* t = g.find(kMRImageFrameType); t && t->contains(kComplexImageComponent))
      im.component = component_from_complex(*t);
    if (const DicomDataset* e = g.find(kMREchoSequence)) {
      if (auto te = e->number(kEffectiveEchoTime)) {
        std::ostringstream s;
        s << "TE " << *te;
        im.echo = s.str();
      }
    }
    im.slice.instance_number = static_cast<std::int64_t>(i);
    out.push_back(std::move(im));
  }
  return out;
}

std::vector<std::string> list_files(const std::vector<std::string>& paths, bool recursive,
                                    std::vector<std::pair<std::string, std::string>>& skipped) {
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    std::error_code ec;
    const fs::file_status st = fs::status(p, ec);
    if (ec || !fs::exists(st)) throw Error(ErrorCode::not_found, p, "", "no such file or folder");
    if (!fs::is_directory(st)) {
      files.push_back(p);
      continue;
    }
    std::vector<std::string> found;
    const auto add = [&](const fs::directory_entry& e) {
      std::error_code e2;
      if (e.is_regular_file(e2)) found.push_back(e.path().string());
    };
    if (recursive) {
      for (auto it = fs::recursive_directory_iterator(
               p, fs::directory_options::skip_permission_denied, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
        add(*it);
    } else {
      for (auto it = fs::directory_iterator(p, fs::directory_options::skip_permission_denied, ec);
           !ec && it != fs::directory_iterator(); it.increment(ec))
        add(*it);
    }
    if (ec) skipped.emplace_back(p, "the folder could not be listed: " + ec.message());
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

std::string fmt(double v, int precision = 4) {
  std::ostringstream s;
  s.precision(precision);
  s << v;
  return s.str();
}

// Sorts, checks and describes one group of images (one series part).
DicomSeries assemble(std::vector<Image> images, const DicomScanOptions& options) {
  DicomSeries s;
  // What the first image (in file order) decides, taken before `images` is replaced below: a
  // reference into it would dangle.
  double single_step = 1;  // the slice step of a series with one position
  {
    const Image& first = images.front();
    s.series_instance_uid = first.series_uid;
    s.series_number = first.series_number;
    s.series_description = first.description;
    s.modality = first.modality;
    s.rows = first.rows;
    s.columns = first.columns;
    s.orientation = first.orientation;
    s.pixel_spacing = first.spacing;
    s.stored_dtype = first.dtype;
    s.echo_number = first.echo_number;
    s.image_component = first.component;
    single_step = first.between > 0 ? first.between : first.thickness > 0 ? first.thickness : 1.0;
  }

  // The same file twice (copies under two names): read once.
  {
    std::set<std::tuple<std::string, std::uint64_t, std::uint32_t>> seen;
    std::vector<Image> unique;
    std::size_t dropped = 0;
    for (Image& im : images) {
      if (!im.sop_uid.empty() &&
          !seen.insert({im.sop_uid, im.slice.frame, im.slice.tile}).second) {
        ++dropped;
        continue;
      }
      unique.push_back(std::move(im));
    }
    if (dropped)
      s.warnings.push_back(std::to_string(dropped) +
                           " images with an SOPInstanceUID already seen were left out");
    images = std::move(unique);
  }
  {
    // One warning for the files whose CSA image header could not be read, naming the first.
    std::set<const DicomFile*> files;
    const Image* first_bad = nullptr;
    for (const Image& im : images)
      if (!im.file_warning.empty() && files.insert(im.slice.file.get()).second && !first_bad)
        first_bad = &im;
    if (first_bad)
      s.warnings.push_back(std::to_string(files.size()) +
                           " files' CSA image header could not be read (its values were not "
                           "used); the first: " + first_bad->file_warning);
  }
  for (const Image& im : images) {
    if (!im.file_problem.empty() && s.problem.empty()) s.problem = im.slice.file->path + ": " + im.file_problem;
    if (im.dtype != s.stored_dtype && s.problem.empty())
      s.problem = "the images' stored types differ (BitsAllocated or PixelRepresentation)";
    if (im.samples != 1 && im.dtype != DType::rgb24 && s.problem.empty())
      s.problem = "colour images (SamplesPerPixel " + std::to_string(im.samples) + ", " +
                  im.slice.pixel->photometric + ", " +
                  std::to_string(im.slice.pixel->bits_allocated) +
                  " bits) are read only as 8-bit RGB (RGB, YBR_FULL, YBR_FULL_422), as NIfTI's "
                  "RGB24 holds them (dcm2niix refuses 16-bit colour, and writes 32-bit colour "
                  "as one int32 per pixel that is not its colour)";
  }
  std::size_t placed = 0;
  for (const Image& im : images) placed += im.has_position && im.has_orientation;
  if (placed == 0 && s.problem.empty()) {
    // No image states where it is (secondary capture, CR/DX, ultrasound, a multi-frame file
    // without positions): the images are stacked in time order (a multi-frame file's in frame
    // order), as dcm2niix stacks them, on axes of its choosing: rows along +x (LPS), columns
    // along +y, slices along +z, PixelSpacing (1 where absent or zero) apart in plane, slices
    // SpacingBetweenSlices (else SliceThickness, else 1) apart, centred on the origin. That is
    // the affine nibabel makes of dcm2niix's image (sform and qform code 0, rows flipped).
    s.no_geometry = true;
    std::stable_sort(images.begin(), images.end(), [](const Image& a, const Image& b) {
      const DicomSlice &x = a.slice, &y = b.slice;
      return std::tie(x.temporal_index, x.acquisition_number, x.acquisition_time, x.trigger_time,
                      x.instance_number, x.file->path, x.frame) <
             std::tie(y.temporal_index, y.acquisition_number, y.acquisition_time, y.trigger_time,
                      y.instance_number, y.file->path, y.frame);
    });
    s.orientation = {1, 0, 0, 0, 1, 0};
    for (double& d : s.pixel_spacing)
      if (!(d > 0) || !std::isfinite(d)) d = 1;
    // A step the position tolerance would merge (or not a number) is taken as 1 mm.
    if (!(single_step > 10 * options.position_tolerance) || !std::isfinite(single_step))
      single_step = 1;
    const double k0 = -single_step * (double(images.size()) - 1) / 2;
    for (std::size_t k = 0; k < images.size(); ++k) {
      Image& im = images[k];
      im.orientation = s.orientation;
      im.spacing = s.pixel_spacing;
      im.slice.position = {-s.pixel_spacing[1] * (double(s.columns) - 1) / 2,
                           -s.pixel_spacing[0] * (double(s.rows) - 1) / 2,
                           k0 + double(k) * single_step};
      im.has_position = im.has_orientation = true;
    }
    s.warnings.push_back(
        "no ImagePositionPatient or ImageOrientationPatient: the image is not placed in the "
        "patient frame (qform and sform code 0); its affine is PixelSpacing and the slice step "
        "about the image centre, as dcm2niix writes it");
  } else if (placed < images.size() && s.problem.empty()) {
    s.problem = "some images have no ImagePositionPatient or ImageOrientationPatient";
  }
  if (!s.no_geometry && images.front().frame_stack > 1 && s.problem.empty())
    s.warnings.push_back(
        "a multi-frame file without per-frame positions: its " +
        std::to_string(images.front().frame_stack) +
        " frames are stacked from ImagePositionPatient along the normal, " + fmt(single_step) +
        " mm apart (SpacingBetweenSlices, else SliceThickness, else 1 mm, as dcm2niix)");

  // Non-finite geometry (DS accepts "nan" and "inf", FD any bits; 1e308 overflows the distance
  // along the normal) compares false with everything: such an image would join its neighbour's
  // position and turn a 3D series into 4D, or leave a NaN in the affine (found by
  // fuzz_dicom_series).
  const auto finite = [](const auto& v) {
    return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
  };
  const auto check_finite = [&](bool with_distance) {
    for (const Image& im : images) {
      if (!s.problem.empty()) return;
      const char* field = !finite(im.orientation) ? "ImageOrientationPatient (0020,0037)"
                          : !finite(im.spacing)     ? "PixelSpacing (0028,0030)"
                          : !finite(im.slice.position) ||
                                  (with_distance && !std::isfinite(im.slice.distance))
                              ? "ImagePositionPatient (0020,0032)"
                              : nullptr;
      if (field)
        s.problem = im.slice.file->path +
                    (im.slice.frame ? " frame " + std::to_string(im.slice.frame) : "") + ": " +
                    field + " is not finite, or its distance along the normal overflows";
    }
  };
  check_finite(false);

  Vec3 row{s.orientation[0], s.orientation[1], s.orientation[2]};
  Vec3 col{s.orientation[3], s.orientation[4], s.orientation[5]};
  Vec3 normal = cross(row, col);
  const double n = norm(normal);
  if (n > 0) for (double& x : normal) x /= n;
  else if (s.problem.empty()) s.problem = "ImageOrientationPatient is degenerate";
  for (Image& im : images) im.slice.distance = dot(im.slice.position, normal);
  check_finite(true);
  // Positions along the normal; the images at one position are the volumes, in time order. A
  // NaN distance (a problem already, above) sorts last, so that the order stays a strict weak
  // one, as std::stable_sort requires.
  std::stable_sort(images.begin(), images.end(), [](const Image& a, const Image& b) {
    const double x = a.slice.distance, y = b.slice.distance;
    if (std::isnan(x) || std::isnan(y)) return !std::isnan(x) && std::isnan(y);
    return x < y;
  });
  std::vector<std::vector<Image*>> positions;
  for (Image& im : images) {
    if (positions.empty() ||
        im.slice.distance - positions.back().front()->slice.distance > options.position_tolerance)
      positions.emplace_back();
    positions.back().push_back(&im);
  }
  const auto time_order = [](const Image* a, const Image* b) {
    const DicomSlice &x = a->slice, &y = b->slice;
    return std::tie(x.temporal_index, x.acquisition_number, x.acquisition_time, x.trigger_time,
                    x.instance_number, x.file->path, x.frame) <
           std::tie(y.temporal_index, y.acquisition_number, y.acquisition_time, y.trigger_time,
                    y.instance_number, y.file->path, y.frame);
  };
  for (auto& p : positions) std::stable_sort(p.begin(), p.end(), time_order);
  const std::size_t volumes = positions.empty() ? 0 : positions.front().size();
  s.slices = positions.size();
  s.volumes = volumes;
  for (std::size_t k = 0; k < positions.size() && s.problem.empty(); ++k) {
    if (positions[k].size() != volumes) {
      std::size_t most = 0;
      for (auto& p : positions) most = std::max(most, p.size());
      s.problem = "positions along the slice normal hold different numbers of images (" +
                  std::to_string(positions[k].size()) + " at " +
                  fmt(positions[k].front()->slice.distance) + " mm, " + std::to_string(volumes) +
                  " at the first; up to " + std::to_string(most) +
                  "): a slice is missing or duplicated";
    }
  }
  // Spacing along the normal must be even: a gap is a missing slice.
  if (positions.size() > 1) {
    double lo = 1e300, hi = -1e300;
    std::size_t at_lo = 0, at_hi = 0;
    for (std::size_t k = 1; k < positions.size(); ++k) {
      const double d = positions[k].front()->slice.distance - positions[k - 1].front()->slice.distance;
      if (d < lo) lo = d, at_lo = k;
      if (d > hi) hi = d, at_hi = k;
    }
    s.slice_spacing = (positions.back().front()->slice.distance -
                       positions.front().front()->slice.distance) / double(positions.size() - 1);
    if (hi - lo > options.spacing_tolerance && s.problem.empty())
      s.problem = "the slice spacing varies from " + fmt(lo) + " mm (before slice " +
                  std::to_string(at_lo) + ") to " + fmt(hi) + " mm (before slice " +
                  std::to_string(at_hi) + "): a slice is missing, or the series is not evenly spaced";
  }
  // Volume-major order.
  s.images.reserve(images.size());
  if (s.problem.empty()) {
    for (std::size_t v = 0; v < volumes; ++v)
      for (auto& p : positions) s.images.push_back(p[v]->slice);
  } else {
    for (Image& im : images) s.images.push_back(im.slice);
  }

  // The affine (nibabel.nicom's formula), LPS -> RAS.
  if (!s.images.empty()) {
    const DicomSlice& a = s.images.front();
    Vec3 kcol;
    if (positions.size() > 1) {
      const Vec3& p0 = positions.front().front()->slice.position;
      const Vec3& p1 = positions.back().front()->slice.position;
      for (int r = 0; r < 3; ++r) kcol[r] = (p1[r] - p0[r]) / double(positions.size() - 1);
      const double len = norm(kcol);
      if (len > 0) {
        const double c = std::min(1.0, std::abs(dot(kcol, normal)) / len);
        s.tilt_degrees = std::acos(c) * 180.0 / M_PI;
        if (s.tilt_degrees > 0.01) {
          s.gantry_tilt = true;
          s.warnings.push_back("the slices step off their normal by " + fmt(s.tilt_degrees) +
                               " degrees (gantry tilt): the affine keeps it as shear");
        }
      }
    } else {
      for (int r = 0; r < 3; ++r) kcol[r] = normal[r] * single_step;
      s.slice_spacing = single_step;
    }
    const double flip[3] = {-1, -1, 1};
    for (int r = 0; r < 3; ++r) {
      s.affine[r * 4 + 0] = flip[r] * row[r] * s.pixel_spacing[1];
      s.affine[r * 4 + 1] = flip[r] * col[r] * s.pixel_spacing[0];
      s.affine[r * 4 + 2] = flip[r] * kcol[r];
      s.affine[r * 4 + 3] = flip[r] * a.position[r];
    }
    s.affine[15] = 1;
    if (!finite(s.affine) && s.problem.empty())
      s.problem = "the affine overflows (positions or spacings too large)";
  }
  s.slope = s.images.empty() ? 1 : s.images.front().slope;
  s.intercept = s.images.empty() ? 0 : s.images.front().intercept;
  for (const DicomSlice& im : s.images)
    s.uniform_rescale &= im.slope == s.slope && im.intercept == s.intercept;
  return s;
}

// A file to scan: its path, or its name and its bytes in memory.
struct ScanInput {
  std::string name;
  std::shared_ptr<const DicomBuffer> buffer;  // null: read the file at `name`
};

DicomFile parse_input(const std::string& name, const std::shared_ptr<const DicomBuffer>& buffer,
                      const DicomReadOptions& options) {
  return buffer ? parse_dicom(buffer->bytes, name, options) : read_dicom(name, options);
}

// scan_dicom_series and scan_dicom_buffers: `inputs` parsed in parallel, in that order, and
// assembled into `result`, which may hold skipped entries already.
DicomScanResult scan_inputs(const std::vector<ScanInput>& inputs, const DicomScanOptions& options,
                            DicomScanResult result) {
  std::vector<std::vector<Image>> parsed(inputs.size());
  std::vector<std::string> why(inputs.size());
  // Only small values are kept (the geometry, the pixel module, identifiers): the parsed
  // metadata of thousands of files must not rival the volume in memory.
  DicomReadOptions read_options;
  read_options.max_value_size = 1024;
  const unsigned threads = resolve_threads(options.threads);
  core::parallel_for(inputs.size(), threads, [&](std::size_t i) {
    try {
      DicomFile f = parse_input(inputs[i].name, inputs[i].buffer, read_options);
      if (!f.pixel_data) {
        why[i] = "no pixel data";
        return;
      }
      parsed[i] = images_of(std::move(f), options, inputs[i].buffer);
    } catch (const Error& e) {
      if (options.strict) throw;
      why[i] = e.what();
    }
  });
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (!why[i].empty()) result.skipped.emplace_back(inputs[i].name, why[i]);

  // Groups: SeriesInstanceUID, then the fields that split a series.
  using Key = std::tuple<std::string, std::vector<long long>, std::uint32_t, std::uint32_t,
                         std::string, std::string, std::uint32_t, std::string>;
  std::map<Key, std::vector<Image>> groups;
  std::vector<Key> order;
  for (auto& images : parsed) {
    for (Image& im : images) {
      std::vector<long long> iop;
      for (double c : im.orientation) iop.push_back(std::llround(c * 1e4));
      Key key{im.series_uid, iop, im.rows, im.columns, im.echo, im.stack, im.samples, im.component};
      auto [it, fresh] = groups.try_emplace(key);
      if (fresh) order.push_back(key);
      it->second.push_back(std::move(im));
    }
  }
  std::map<std::string, std::vector<Key>> parts;
  for (const Key& k : order) parts[std::get<0>(k)].push_back(k);

  for (const Key& k : order) {
    DicomSeries s = assemble(std::move(groups[k]), options);
    const auto& siblings = parts[std::get<0>(k)];
    if (siblings.size() > 1) {
      // Name what sets this part apart.
      std::vector<std::string> labels;
      const auto differs = [&](auto get) {
        for (const Key& o : siblings)
          if (get(o) != get(k)) return true;
        return false;
      };
      if (differs([](const Key& x) { return std::get<4>(x); }))
        labels.push_back("echo " + (std::get<4>(k).empty() ? std::string("none") : std::get<4>(k)));
      if (differs([](const Key& x) { return std::make_pair(std::get<2>(x), std::get<3>(x)); }))
        labels.push_back(std::to_string(std::get<3>(k)) + "x" + std::to_string(std::get<2>(k)));
      if (differs([](const Key& x) { return std::get<1>(x); })) {
        std::size_t index = 1;
        std::set<std::vector<long long>> seen;
        for (const Key& o : siblings) {
          if (std::get<1>(o) == std::get<1>(k)) break;
          if (seen.insert(std::get<1>(o)).second) ++index;
        }
        labels.push_back("orientation " + std::to_string(index));
      }
      if (differs([](const Key& x) { return std::get<5>(x); }))
        labels.push_back("stack " + std::get<5>(k));
      if (differs([](const Key& x) { return std::get<6>(x); }))
        labels.push_back(std::to_string(std::get<6>(k)) + " samples");
      if (differs([](const Key& x) { return std::get<7>(x); })) {
        std::string c = std::get<7>(k).empty() ? "magnitude" : std::get<7>(k);
        std::transform(c.begin(), c.end(), c.begin(), [](unsigned char x) { return std::tolower(x); });
        labels.push_back(c);
      }
      for (const auto& l : labels) s.split += (s.split.empty() ? "" : ", ") + l;
    }
    result.series.push_back(std::move(s));
  }
  std::stable_sort(result.series.begin(), result.series.end(),
                   [](const DicomSeries& a, const DicomSeries& b) {
                     return std::tie(a.series_number, a.series_instance_uid, a.split) <
                            std::tie(b.series_number, b.series_instance_uid, b.split);
                   });
  // The first image's full dataset, for metadata.
  core::parallel_for(result.series.size(), threads, [&](std::size_t i) {
    DicomSeries& s = result.series[i];
    if (s.images.empty()) return;
    const DicomSlice& first = s.images.front();
    try {
      s.first_file =
          std::make_shared<const DicomFile>(parse_input(first.file->path, first.buffer, {}));
    } catch (const Error&) {
      s.first_file = first.file;
    }
  });
  return result;
}

}  // namespace

std::vector<std::uint64_t> DicomSeries::shape() const {
  std::vector<std::uint64_t> s{columns, rows, slices};
  if (volumes > 1) s.push_back(volumes);
  return s;
}

DicomScanResult scan_dicom_series(const std::vector<std::string>& paths,
                                  const DicomScanOptions& options) {
  DicomScanResult result;
  std::vector<ScanInput> inputs;
  for (std::string& file : list_files(paths, options.recursive, result.skipped))
    inputs.push_back({std::move(file), nullptr});
  return scan_inputs(inputs, options, std::move(result));
}

DicomScanResult scan_dicom_buffers(const std::vector<DicomBuffer>& buffers,
                                   const DicomScanOptions& options) {
  std::vector<ScanInput> inputs;
  inputs.reserve(buffers.size());
  for (const DicomBuffer& b : buffers)
    inputs.push_back({b.name, std::make_shared<const DicomBuffer>(b)});
  return scan_inputs(inputs, options, {});
}

namespace dicom {

std::string check_series_read(const DicomSeries& series, DType out_type) {
  const std::string name = series.images.empty() ? series.series_instance_uid
                                                 : series.images.front().file->path;
  if (!series.problem.empty())
    throw Error(ErrorCode::format, name, "series " + series.series_instance_uid,
                "cannot be assembled: " + series.problem);
  if (series.stored_dtype == DType::rgb24 && out_type != DType::rgb24)
    throw Error(ErrorCode::invalid_argument, name, "dtype",
                "a colour series reads as rgb24 (its stored type) only, not as " +
                    std::string(dtype_name(out_type)));
  if (out_type != series.stored_dtype && out_type != DType::f32 && out_type != DType::f64)
    throw Error(ErrorCode::invalid_argument, name, "dtype",
                std::string("a series reads as its stored type (") +
                    std::string(dtype_name(series.stored_dtype)) + "), float32 or float64");
  return name;
}

}  // namespace dicom

namespace {

// Decodes every image of the series into its plane (rows x columns of out_type) on `threads`:
// into place(n) where that is not null, else into a buffer of the decoding thread. Each complete
// plane is handed to done(n, plane) before the thread decodes anything else. One decode per
// frame: the tiles of a mosaic share theirs. Returns the decoders' warnings, in image order.
std::vector<std::string> decode_series_planes(
    const DicomSeries& series, DType out_type, unsigned threads, DicomOnCorrupt on_corrupt,
    const std::function<std::uint8_t*(std::size_t n)>& place,
    const std::function<void(std::size_t n, std::span<const std::uint8_t>)>& done) {
  const std::uint64_t plane = std::uint64_t(series.rows) * series.columns;
  const std::size_t plane_bytes = static_cast<std::size_t>(plane * dtype_size(out_type));
  DicomDecodeOptions one;
  one.threads = 1;
  one.on_corrupt = on_corrupt;
  std::vector<std::vector<std::size_t>> jobs;
  {
    std::map<std::pair<const DicomFile*, std::uint64_t>, std::size_t> job_of;
    for (std::size_t n = 0; n < series.images.size(); ++n) {
      const DicomSlice& im = series.images[n];
      if (im.tile_grid == 0) {
        jobs.push_back({n});
        continue;
      }
      auto [it, fresh] = job_of.try_emplace({im.file.get(), im.frame}, jobs.size());
      if (fresh) jobs.emplace_back();
      jobs[it->second].push_back(n);
    }
  }
  const auto emit = [&](const DicomSlice& im, const std::uint8_t* values, std::size_t count,
                        std::uint8_t* dst) {
    const DType in = im.pixel->dtype;
    if (out_type == in) {
      std::memcpy(dst, values, count * dtype_size(in));
    } else {
      Modality rescale;
      rescale.kind = Modality::Kind::rescale;
      rescale.slope = im.slope;
      rescale.intercept = im.intercept;
      apply_modality(values, in, dst, out_type, count, rescale);
    }
  };
  std::vector<std::vector<std::string>> job_warnings(jobs.size());
  const auto decode_job = [&](std::size_t j) {
    thread_local std::vector<std::uint8_t> own_plane;
    // Where image n's plane is written, and its hand-over once it is complete.
    const auto target = [&](std::size_t n) {
      if (std::uint8_t* p = place(n)) return p;
      own_plane.resize(plane_bytes);
      return own_plane.data();
    };
    const auto finished = [&](std::size_t n, const std::uint8_t* p) {
      done(n, std::span<const std::uint8_t>(p, plane_bytes));
    };
    const DicomSlice& first = series.images[jobs[j].front()];
    const DicomPixelInfo& info = *first.pixel;
    const std::span<const std::uint8_t> bytes = bytes_of(first.buffer);
    // rgb24: the decoded frame's interleaved 8-bit samples as they are.
    if (first.tile_grid == 0 && (out_type == info.dtype || out_type == DType::rgb24)) {
      // Straight into its place.
      std::uint8_t* dst = target(jobs[j].front());
      job_warnings[j] = decode_dicom_frames(*first.file, info, first.frame, 1,
                                            std::span(dst, plane_bytes), one, bytes);
      finished(jobs[j].front(), dst);
      return;
    }
    thread_local std::vector<std::uint8_t> frame;
    frame.resize(info.frame_bytes);
    job_warnings[j] = decode_dicom_frames(*first.file, info, first.frame, 1, frame, one, bytes);
    if (first.tile_grid == 0) {
      std::uint8_t* dst = target(jobs[j].front());
      emit(first, frame.data(), plane, dst);
      finished(jobs[j].front(), dst);
      return;
    }
    // Mosaic tiles: rows of each tile, from the frame (row-major, info.columns wide).
    const std::size_t in_size = dtype_size(info.dtype), out_size = dtype_size(out_type);
    for (std::size_t n : jobs[j]) {
      const DicomSlice& im = series.images[n];
      const std::size_t tile_row = im.tile / im.tile_grid, tile_col = im.tile % im.tile_grid;
      std::uint8_t* dst = target(n);
      for (std::size_t r = 0; r < series.rows; ++r) {
        const std::size_t src_row = tile_row * series.rows + r;
        const std::uint8_t* src = frame.data() + (src_row * info.columns + tile_col * series.columns) * in_size;
        emit(im, src, series.columns, dst + r * series.columns * out_size);
      }
      finished(n, dst);
    }
  };
  core::parallel_for(jobs.size(), threads, [&](std::size_t j) {
    // A decoder's error without an offset gets that of the frame's pixel data element.
    try {
      decode_job(j);
    } catch (const Error& e) {
      const DicomFile& file = *series.images[jobs[j].front()].file;
      if (e.offset() || e.path() != file.path || !file.pixel_data) throw;
      throw Error(e.code(), e.path(), e.field(), e.detail(), file.pixel_data->offset);
    }
  });
  std::vector<std::string> warnings;
  for (auto& w : job_warnings)
    warnings.insert(warnings.end(), std::make_move_iterator(w.begin()),
                    std::make_move_iterator(w.end()));
  return warnings;
}

}  // namespace

std::vector<std::string> read_dicom_series(const DicomSeries& series, std::span<std::uint8_t> out,
                                           DType out_type, unsigned threads,
                                           DicomOnCorrupt on_corrupt) {
  const std::string name = dicom::check_series_read(series, out_type);
  const std::uint64_t plane_bytes = std::uint64_t(series.rows) * series.columns * dtype_size(out_type);
  if (out.size() != plane_bytes * series.images.size())
    throw Error(ErrorCode::invalid_argument, name, "out",
                "holds " + std::to_string(out.size()) + " bytes, the series needs " +
                    std::to_string(plane_bytes * series.images.size()));
  return decode_series_planes(
      series, out_type, resolve_threads(threads), on_corrupt,
      [&](std::size_t n) { return out.data() + n * plane_bytes; },
      [](std::size_t, std::span<const std::uint8_t>) {});
}

namespace dicom {

void decode_dicom_series(const DicomSeries& series, DType out_type, unsigned threads,
                         const core::ByteSink& deliver) {
  check_series_read(series, out_type);
  const std::uint64_t plane_bytes = std::uint64_t(series.rows) * series.columns * dtype_size(out_type);
  decode_series_planes(
      series, out_type, threads, DicomOnCorrupt::raise,
      [](std::size_t) -> std::uint8_t* { return nullptr; },
      [&](std::size_t n, std::span<const std::uint8_t> bytes) { deliver(n * plane_bytes, std::as_bytes(bytes)); });
}

}  // namespace dicom

}  // namespace voxpipe
