// The overlay images of `voxpipe dcm2niix`: dcm2niix writes each overlay plane (60xx,3000) of a
// series as NAME_ROI<n>, an 8-bit image of 0 and 1 on the image's grid (write_overlays).
#include <algorithm>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dcm2niix.hpp"
#include "dcm2niix_internal.hpp"
#include "voxpipe/dicom.hpp"
#include "voxpipe/nifti.hpp"

namespace voxpipe::cli::dcm2niix {

namespace {

// dcm2niix's overlay groups: the even groups 6000..601C (15 overlays).
constexpr int kOverlayGroups = 15;

std::uint16_t group_u16(const DicomDataset& ds, std::uint16_t group, std::uint16_t element,
                        std::size_t index = 0) {
  const DicomElement* e = ds.find(dicom_tag(group, element));
  if (!e || !e->value_read || e->value.size() < 2 * (index + 1)) return 0;
  const std::uint8_t* b = e->value.data() + 2 * index;
  return ds.big_endian() ? static_cast<std::uint16_t>(b[0] << 8 | b[1])
                         : static_cast<std::uint16_t>(b[1] << 8 | b[0]);
}

// Whether a dataset has OverlayData in one of dcm2niix's groups.
bool has_overlay(const DicomDataset& ds) {
  for (int n = 0; n < kOverlayGroups; ++n)
    if (ds.find(dicom_tag(static_cast<std::uint16_t>(0x6000 + 2 * n), 0x3000))) return true;
  return false;
}

// The overlay planes of one file, as dcm2niix takes them: for each group that holds
// OverlayData, its bytes (bit i of the value, least significant bit first, is pixel i of the
// frames in row-major order); none at all when any group states an OverlayOrigin other than
// (1, 1), OverlayBitsAllocated other than 1 or OverlayBitPosition other than 0, or rows and
// columns other than the image's (dcm2niix checks the last group's). 16-bit words of a
// big-endian file are put back in byte order.
std::vector<std::optional<std::vector<std::uint8_t>>> file_overlays(const DicomFile& f,
                                                                    std::uint32_t rows,
                                                                    std::uint32_t columns) {
  std::vector<std::optional<std::vector<std::uint8_t>>> planes(kOverlayGroups);
  const DicomDataset& ds = f.dataset;
  std::uint16_t last_rows = 0, last_columns = 0;
  for (int n = 0; n < kOverlayGroups; ++n) {
    const auto g = static_cast<std::uint16_t>(0x6000 + 2 * n);
    if (const DicomElement* o = ds.find(dicom_tag(g, 0x0050)); o && o->value_read && o->value.size() == 4)
      if (group_u16(ds, g, 0x0050, 0) != 1 || group_u16(ds, g, 0x0050, 1) != 1) return {};
    if (ds.find(dicom_tag(g, 0x0100)) && group_u16(ds, g, 0x0100) != 1) return {};
    if (ds.find(dicom_tag(g, 0x0102)) && group_u16(ds, g, 0x0102) != 0) return {};
    if (ds.find(dicom_tag(g, 0x0010))) last_rows = group_u16(ds, g, 0x0010);
    if (ds.find(dicom_tag(g, 0x0011))) last_columns = group_u16(ds, g, 0x0011);
    const DicomElement* data = ds.find(dicom_tag(g, 0x3000));
    if (!data || !data->value_read) continue;
    std::vector<std::uint8_t> bytes = data->value;
    if (ds.big_endian() && data->vr == DicomVR::OW)
      for (std::size_t i = 0; i + 1 < bytes.size(); i += 2) std::swap(bytes[i], bytes[i + 1]);
    planes[static_cast<std::size_t>(n)] = std::move(bytes);
  }
  if ((last_rows > 0 && last_rows != rows) || (last_columns > 0 && last_columns != columns)) return {};
  return planes;
}

// The file of `image` parsed again, with values up to `max_value` bytes read (the scan keeps
// only what decoding needs).
DicomFile reparse(const DicomSlice& image, std::uint64_t max_value) {
  DicomReadOptions options;
  options.max_value_size = std::max<std::uint64_t>(options.max_value_size, max_value);
  if (image.buffer) return parse_dicom(image.buffer->bytes, image.buffer->name, options);
  return read_dicom(image.file->path, options);
}

}  // namespace

std::vector<std::string> write_overlays(const DicomSeries& s, const NiftiHeader& h,
                                        const std::string& base, const Options& opts,
                                        unsigned threads,
                                        const Reorientation& turn) {
  std::vector<std::string> notes;
  if (s.images.empty() || !s.first_file || !has_overlay(s.first_file->dataset)) return notes;
  if (s.volumes > 1 || s.images.size() != s.slices) {
    notes.push_back("the overlays (60xx,3000) of a 4D series are not written");
    return notes;
  }
  if (s.images.front().tile_grid > 0) {
    notes.push_back("the overlays (60xx,3000) of a mosaic are not written");
    return notes;
  }
  const std::uint64_t columns = s.columns, rows = s.rows, plane = columns * rows;
  std::uint64_t last_frame = 0;
  for (const auto& im : s.images) last_frame = std::max(last_frame, im.frame);
  const std::uint64_t needed_bytes = ((last_frame + 1) * plane + 7) / 8;
  // Each file's overlays, parsed once.
  std::map<const DicomFile*, std::vector<std::optional<std::vector<std::uint8_t>>>> by_file;
  for (const auto& im : s.images) {
    if (by_file.count(im.file.get())) continue;
    by_file[im.file.get()] = file_overlays(reparse(im, needed_bytes + 16), s.rows, s.columns);
  }
  std::vector<std::uint64_t> shape{columns, rows, s.slices};
  for (int n = 0; n < kOverlayGroups; ++n) {
    const auto at = static_cast<std::size_t>(n);
    bool any = false;
    for (const auto& [file, planes] : by_file) any |= planes.size() > at && planes[at].has_value();
    if (!any) continue;
    std::vector<std::uint8_t> data(plane * s.slices, 0);
    bool complete = true;
    for (std::size_t k = 0; k < s.images.size(); ++k) {
      const auto& planes = by_file[s.images[k].file.get()];
      if (planes.size() <= at || !planes[at]) continue;  // no overlay on this slice: zeros
      const std::vector<std::uint8_t>& bits = *planes[at];
      const std::uint64_t first = s.images[k].frame * plane;
      if ((first + plane + 7) / 8 > bits.size()) {
        complete = false;
        break;
      }
      for (std::uint64_t i = 0; i < plane; ++i)
        data[k * plane + i] = (bits[(first + i) >> 3] >> ((first + i) & 7)) & 1;
    }
    if (!complete) {
      notes.push_back("overlay " + std::to_string(n + 1) +
                      " (60xx,3000) holds fewer bits than the image: not written");
      continue;
    }
    if (opts.flip) flip_rows(data, shape, 1);
    NiftiHeader r = h;
    r.dim = {3, static_cast<std::int64_t>(columns), static_cast<std::int64_t>(rows),
             static_cast<std::int64_t>(s.slices), 1, 1, 1, 1};
    if (!turn.identity) {  // turned as the image (h is the turned grid's)
      data = reoriented_data(data, shape, 1, turn);
      for (int a = 0; a < 3; ++a) r.dim[1 + a] = static_cast<std::int64_t>(shape[turn.source[a]]);
    }
    r.datatype = 2;  // uint8
    r.bitpix = 8;
    r.scl_slope = 1;
    r.scl_inter = 0;
    write_nifti(base + "_ROI" + std::to_string(n + 1) + (opts.gzip ? ".nii.gz" : ".nii"), r, {},
                producer_from_bytes(std::as_bytes(std::span(data))),
                WriteOptions{opts.gz_level, GzipLayout::members, threads});
  }
  return notes;
}

}  // namespace voxpipe::cli::dcm2niix
