// What one parsed DICOM file becomes for series assembly (images_of): its images, one for a
// single frame, one per tile of a Siemens mosaic, one per frame of an enhanced file (from its
// functional groups) or of a multi-frame file without them (a frame stack), each with what
// grouping and sorting need: identifiers, geometry, rescale, time, echo, image component and
// diffusion encoding. The CSA image header is read only where a mosaic or a diffusion encoding
// needs it. Series assembly (series.cpp) groups and checks the images.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "dicom/csa.hpp"
#include "dicom/series_internal.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::dicom::series_detail {
namespace {

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

// ---- Siemens mosaic --------------------------------------------------------------------------

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
                    std::to_string(max_images) +
                    " tiles are read (DicomScanOptions::max_mosaic_images)",
                offset);
  return std::pair{*images_in_mosaic, slice_normal};
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

}  // namespace

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
        const double step =
            base.between > 0 ? base.between : base.thickness > 0 ? base.thickness : 1.0;
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
          for (int r = 0; r < 3; ++r)
            im.slice.position[r] = origin[r] + double(k) * step * normal[r];
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

}  // namespace voxpipe::dicom::series_detail
