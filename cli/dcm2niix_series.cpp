// What `voxpipe dcm2niix` reads of a series as dcm2niix reads it: the values of its first file,
// its vendor, its numbers (the %s of its name, the -n number and the order of conversion), what
// -i y leaves out, and its voxel order (rows flipped as dcm2niix flips them, or kept; a 3D
// acquisition turned to its nearest orthogonal axes).
#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "dcm2niix.hpp"
#include "dcm2niix_internal.hpp"
#include "voxpipe/dicom.hpp"
#include "voxpipe/dicom_series.hpp"

#include <zlib.h>

namespace voxpipe::cli::dcm2niix {

namespace {

// The value of `tag` as its bytes: the whole value (backslashes included), without the NUL or
// space padding at its end; "" when the element is missing or not read.
std::string raw_value(const DicomDataset& ds, DicomTag tag) {
  const DicomElement* e = ds.find(tag);
  if (!e || !e->value_read) return "";
  std::string v(e->value.begin(), e->value.end());
  while (!v.empty() && (v.back() == '\0' || v.back() == ' ')) v.pop_back();
  return v;
}

std::uint32_t crc_of(const std::string& text) {
  return static_cast<std::uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(text.data()), static_cast<uInt>(text.size())));
}

// SeriesNumber of the first file as dcm2niix reads it: atoi of its value (0 when empty), -1
// when the element is absent.
std::int64_t stated_series_number(const DicomSeries& s) {
  if (!s.first_file) return s.series_number;
  if (!s.first_file->dataset.find(dicom_tag(0x0020, 0x0011))) return -1;
  return integer_value(value(s, 0x0020, 0x0011));
}

}  // namespace

std::string value(const DicomSeries& s, std::uint16_t group, std::uint16_t element) {
  if (!s.first_file) return "";
  const DicomTag tag = dicom_tag(group, element);
  std::string v = raw_value(s.first_file->dataset, tag);
  if (v.empty() && group == 0x0002) v = raw_value(s.first_file->meta, tag);
  return v;
}

Vendor vendor(const DicomSeries& s) {
  const std::string m = value(s, 0x0008, 0x0070);
  if (m.size() < 2) return Vendor::unknown;
  const std::string p{static_cast<char>(std::toupper(static_cast<unsigned char>(m[0]))),
                      static_cast<char>(std::toupper(static_cast<unsigned char>(m[1])))};
  Vendor v = Vendor::unknown;
  if (p == "SI" || p == "CP") v = Vendor::siemens;
  if (p == "GE") v = Vendor::ge;
  if (p == "HI") v = Vendor::hitachi;
  if (p == "ME") v = Vendor::mediso;
  if (p == "PH") v = Vendor::philips;
  if (p == "TO") v = Vendor::toshiba;
  if (p == "CA") v = Vendor::canon;
  if (p == "UI") v = Vendor::uih;
  if (p == "BR") v = Vendor::bruker;
  if (p == "MR") v = Vendor::mrsolutions;
  if (p == "HY") v = Vendor::hyperfine;
  return v;
}

std::string vendor_short(Vendor v) {
  switch (v) {
    case Vendor::bruker: return "Br";
    case Vendor::ge: return "GE";
    case Vendor::toshiba: return "To";
    case Vendor::canon: return "Ca";
    case Vendor::uih: return "UI";
    case Vendor::philips: return "Ph";
    case Vendor::siemens: return "Si";
    case Vendor::mediso: return "Me";
    case Vendor::mrsolutions: return "MR";
    case Vendor::hyperfine: return "Hy";
    default: return "NA";
  }
}

std::string vendor_long(Vendor v) {
  switch (v) {
    case Vendor::bruker: return "Bruker";
    case Vendor::canon: return "Canon";
    case Vendor::ge: return "GE";
    case Vendor::hyperfine: return "Hyperfine";
    case Vendor::mediso: return "Mediso";
    case Vendor::mrsolutions: return "MRsolutions";
    case Vendor::philips: return "Philips";
    case Vendor::siemens: return "Siemens";
    case Vendor::toshiba: return "Toshiba";
    case Vendor::uih: return "UIH";
    default: return "NA";
  }
}

long integer_value(const std::string& v) { return std::strtol(v.c_str(), nullptr, 10); }

std::string image_type(const DicomSeries& s) {
  std::string t = value(s, 0x0008, 0x0008);
  std::replace(t.begin(), t.end(), '\\', '_');
  return t;
}

std::string protocol_name(const DicomSeries& s) {
  std::string p = value(s, 0x0018, 0x1030);
  const std::string description = value(s, 0x0008, 0x103E);
  const std::string sequence = value(s, 0x0018, 0x0024);
  if (p.empty() && description.size() > 1) p = description;
  if (p.size() > 1 && image_type(s).find("_MOCO_") != std::string::npos) p += "_MoCo";
  if (p.empty() && sequence.size() > 1 && vendor(s) != Vendor::siemens) p = sequence;
  return p;
}

std::int64_t echo_number(const DicomSeries& s) { return integer_value(value(s, 0x0018, 0x0086)); }

std::int64_t name_series_number(const DicomSeries& s) {
  const std::int64_t n = stated_series_number(s);
  return n >= 1 ? n : static_cast<std::int64_t>(crc_of(value(s, 0x0020, 0x000E)));
}

Components components(const DicomSeries& s) {
  const std::string t = image_type(s);
  const auto has = [&t](const char* w) { return t.find(w) != std::string::npos; };
  Components c;
  c.real = (t.size() > 3 && has("_R_")) || (t.size() > 6 && has("_REAL_"));
  c.magnitude = (t.size() > 3 && has("_M_")) || (t.size() > 11 && has("_MAGNITUDE_"));
  c.imaginary = (t.size() > 3 && has("_I_")) || (t.size() > 11 && has("_IMAGINARY_"));
  c.phase = (t.size() > 3 && has("_P_")) || (t.size() > 6 && has("PHASE"));
  return c;
}

bool reoriented_by_dcm2niix(const DicomSeries& s) {
  if (s.slices < 2 || s.volumes > 1 || !s.first_file) return false;
  const DicomDataset& ds = s.first_file->dataset;
  const std::string acquisition = ds.string(dicom_tag(0x0018, 0x0023)).value_or("");
  if (acquisition.size() < 2 || acquisition[0] != '3' ||
      std::toupper(static_cast<unsigned char>(acquisition[1])) != 'D')
    return false;
  for (const std::string& v : ds.strings(dicom_tag(0x0018, 0x0020)))
    if (v.find("EP") != std::string::npos) return false;
  const std::string epi = ds.string(dicom_tag(0x0018, 0x9018)).value_or("");
  return epi.empty() || std::toupper(static_cast<unsigned char>(epi[0])) != 'Y';
}

bool rows_kept_by_dcm2niix(const DicomSeries& s) {
  return reoriented_by_dcm2niix(s) && (s.no_geometry || s.stored_dtype == DType::rgb24);
}

Reorientation nearest_orthogonal(const DicomSeries& s) {
  Reorientation r;
  // Unit columns of the affine (voxel axis a -> RAS).
  double dir[3][3];
  for (int a = 0; a < 3; ++a) {
    double n = 0;
    for (int w = 0; w < 3; ++w) n += s.affine[4 * w + a] * s.affine[4 * w + a];
    n = std::sqrt(n);
    for (int w = 0; w < 3; ++w) dir[a][w] = n > 0 ? s.affine[4 * w + a] / n : 0;
  }
  // The assignment of voxel axes to world axes with the largest sum of |cosines| (the first
  // such in the order of std::next_permutation).
  std::array<int, 3> perm{0, 1, 2}, best = perm;
  double best_sum = -1;
  do {
    double sum = 0;
    for (int w = 0; w < 3; ++w) sum += std::fabs(dir[perm[w]][w]);
    if (sum > best_sum + 1e-12) {
      best_sum = sum;
      best = perm;
    }
  } while (std::next_permutation(perm.begin(), perm.end()));
  r.source = best;
  for (int w = 0; w < 3; ++w) r.reversed[w] = dir[best[w]][w] < 0;
  r.identity = best == std::array<int, 3>{0, 1, 2} && !r.reversed[0] && !r.reversed[1] && !r.reversed[2];
  return r;
}

DicomSeries reoriented(const DicomSeries& s, const Reorientation& r) {
  DicomSeries o = s;
  const std::array<std::uint64_t, 3> dims{s.columns, s.rows, s.slices};
  const std::array<double, 3> spacing{s.pixel_spacing[1], s.pixel_spacing[0], s.slice_spacing};
  std::array<std::uint64_t, 3> out_dims{};
  std::array<double, 3> out_spacing{};
  for (int w = 0; w < 3; ++w) {
    const int a = r.source[w];
    out_dims[w] = dims[a];
    out_spacing[w] = spacing[a];
    for (int row = 0; row < 3; ++row) {
      const double c = s.affine[4 * row + a];
      o.affine[4 * row + w] = r.reversed[w] ? -c : c;
      if (r.reversed[w] && dims[a] > 0) o.affine[4 * row + 3] += static_cast<double>(dims[a] - 1) * c;
    }
  }
  o.columns = static_cast<std::uint32_t>(out_dims[0]);
  o.rows = static_cast<std::uint32_t>(out_dims[1]);
  o.slices = out_dims[2];
  o.pixel_spacing = {out_spacing[1], out_spacing[0]};
  o.slice_spacing = out_spacing[2];
  return o;
}

std::vector<std::uint8_t> reoriented_data(std::span<const std::uint8_t> data,
                                          const std::vector<std::uint64_t>& shape,
                                          std::size_t element_size, const Reorientation& r) {
  std::vector<std::uint8_t> out(data.size());
  const std::array<std::uint64_t, 3> dims{shape.size() > 0 ? shape[0] : 1, shape.size() > 1 ? shape[1] : 1,
                                          shape.size() > 2 ? shape[2] : 1};
  const std::array<std::uint64_t, 3> stride{1, dims[0], dims[0] * dims[1]};
  if (dims[0] * dims[1] * dims[2] * element_size != data.size()) return {data.begin(), data.end()};
  // For output axis w: the source offset of its first voxel and the step between voxels.
  std::array<std::int64_t, 3> step{};
  std::int64_t start = 0;
  std::array<std::uint64_t, 3> out_dims{};
  for (int w = 0; w < 3; ++w) {
    const int a = r.source[w];
    out_dims[w] = dims[a];
    step[w] = static_cast<std::int64_t>(stride[a]) * (r.reversed[w] ? -1 : 1);
    if (r.reversed[w]) start += static_cast<std::int64_t>((dims[a] - 1) * stride[a]);
  }
  std::uint8_t* dst = out.data();
  for (std::uint64_t z = 0; z < out_dims[2]; ++z)
    for (std::uint64_t y = 0; y < out_dims[1]; ++y) {
      std::int64_t src = start + static_cast<std::int64_t>(z) * step[2] + static_cast<std::int64_t>(y) * step[1];
      for (std::uint64_t x = 0; x < out_dims[0]; ++x, src += step[0], dst += element_size)
        std::memcpy(dst, data.data() + static_cast<std::size_t>(src) * element_size, element_size);
    }
  return out;
}

std::uint32_t uid_crc(const DicomSeries& s) {
  if (s.series_instance_uid.empty()) {
    const std::int64_t n = stated_series_number(s);
    return static_cast<std::uint32_t>(n < 1 ? 1 : n);
  }
  return crc_of(s.series_instance_uid);
}

double series_crc_number(const DicomSeries& s) {
  const std::int64_t echo = echo_number(s);
  return uid_crc(s) + (echo > 1 ? static_cast<double>(echo) / 10.0 : 0.0);
}

std::string ignored_by_i(const DicomSeries& s) {
  const std::string type = image_type(s);
  const std::string sequence = value(s, 0x0018, 0x0024);
  if (type.find("DERIVED") != std::string::npos || type.find("_ADC_") != std::string::npos ||
      type.find("_TRACEW_") != std::string::npos || type.find("_TRACE_") != std::string::npos ||
      type.find("_FA_") != std::string::npos)
    return "derived image(s)";
  bool localizer = s.split.find("orientation ") != std::string::npos;
  if (vendor(s) == Vendor::siemens &&
      (value(s, 0x0008, 0x103E).find("AAHScout") != std::string::npos ||
       value(s, 0x0018, 0x1030).find("AAHScout") != std::string::npos ||
       sequence.find("fl2d1") != std::string::npos))
    localizer = true;
  for (const char* name : {"_tfl2d1", "_fl3d1_ns", "_fl2d1", "*tfl2d1", "*fl3d1_ns", "*fl2d1"})
    if (sequence == name) localizer = true;
  if (localizer) return "localizer (sequence '" + sequence + "')";
  if (s.slices < 2 && s.volumes < 2) return "2D image";
  return "";
}

}  // namespace voxpipe::cli::dcm2niix

namespace voxpipe::cli {

DicomSeries rows_flipped(const DicomSeries& s) {
  DicomSeries f = s;
  const double last = s.rows > 0 ? static_cast<double>(s.rows) - 1 : 0;
  for (int r = 0; r < 3; ++r) {
    f.affine[4 * r + 3] = s.affine[4 * r + 3] + last * s.affine[4 * r + 1];
    f.affine[4 * r + 1] = -s.affine[4 * r + 1];
  }
  return f;
}

void flip_rows(std::span<std::uint8_t> data, const std::vector<std::uint64_t>& shape,
               std::size_t element_size) {
  if (shape.size() < 2) return;
  const std::size_t row = static_cast<std::size_t>(shape[0]) * element_size;
  const std::size_t rows = static_cast<std::size_t>(shape[1]);
  const std::size_t plane = row * rows;
  if (plane == 0) return;
  for (std::size_t p = 0; p + plane <= data.size(); p += plane)
    for (std::size_t y = 0; y < rows / 2; ++y)
      std::swap_ranges(data.begin() + p + y * row, data.begin() + p + (y + 1) * row,
                       data.begin() + p + (rows - 1 - y) * row);
}

}  // namespace voxpipe::cli
