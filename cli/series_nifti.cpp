// The NIfTI-1 image and the BIDS-style JSON sidecar `voxpipe dcm2nii` writes of a DICOM series,
// which info and convert describe and write too (series_nifti.hpp).
#include "series_nifti.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <span>

#include "cli_common.hpp"
#include "core/mat3.hpp"
#include "voxpipe/dicom.hpp"

namespace voxpipe::cli {

namespace {

struct Meta {
  const DicomDataset& ds;

  std::optional<std::string> str(DicomTag t) const {
    auto v = ds.string(t);
    if (v && v->empty()) return std::nullopt;
    return v;
  }
  // A malformed number is left out of the sidecar, not an error of the conversion.
  std::optional<double> num(DicomTag t) const {
    try {
      return ds.number(t);
    } catch (const Error&) {
      return std::nullopt;
    }
  }
  std::vector<double> nums(DicomTag t) const {
    try {
      return ds.numbers(t);
    } catch (const Error&) {
      return {};
    }
  }
};

// The values of the series' first file.
Meta meta_of(const DicomSeries& s) {
  static const DicomDataset kEmpty;
  return Meta{s.first_file ? s.first_file->dataset : kEmpty};
}

constexpr DicomTag kImageType = dicom_tag(0x0008, 0x0008);
constexpr DicomTag kAcquisitionTime = dicom_tag(0x0008, 0x0032);
constexpr DicomTag kModality = dicom_tag(0x0008, 0x0060);
constexpr DicomTag kManufacturer = dicom_tag(0x0008, 0x0070);
constexpr DicomTag kSeriesDescription = dicom_tag(0x0008, 0x103E);
constexpr DicomTag kManufacturerModelName = dicom_tag(0x0008, 0x1090);
constexpr DicomTag kSliceThickness = dicom_tag(0x0018, 0x0050);
constexpr DicomTag kRepetitionTime = dicom_tag(0x0018, 0x0080);
constexpr DicomTag kEchoTime = dicom_tag(0x0018, 0x0081);
constexpr DicomTag kMagneticFieldStrength = dicom_tag(0x0018, 0x0087);
constexpr DicomTag kSpacingBetweenSlices = dicom_tag(0x0018, 0x0088);
constexpr DicomTag kProtocolName = dicom_tag(0x0018, 0x1030);
constexpr DicomTag kFlipAngle = dicom_tag(0x0018, 0x1314);
constexpr DicomTag kSeriesInstanceUID = dicom_tag(0x0020, 0x000E);
constexpr DicomTag kSeriesNumber = dicom_tag(0x0020, 0x0011);
constexpr DicomTag kImageOrientationPatient = dicom_tag(0x0020, 0x0037);
constexpr DicomTag kPixelSpacing = dicom_tag(0x0028, 0x0030);

using core::det3;
using core::Mat3;

// Sets the qform (quaternion, offsets, qfac in pixdim[0], zooms in pixdim[1..3]) from an
// affine, as nibabel's Nifti1Header.set_qform(affine, code): zooms are the column norms, qfac
// -1 for a left-handed frame, and shears are stripped. Returns false, leaving the header as it
// was, when the affine has shear (np.allclose(R, polar(R)) fails) or a zero column: a qform
// cannot hold it.
bool set_qform(NiftiHeader& h, const std::array<double, 16>& a, int code) {
  Mat3 r;
  std::array<double, 3> zooms{};
  for (int j = 0; j < 3; ++j) {
    zooms[j] = std::sqrt(a[j] * a[j] + a[4 + j] * a[4 + j] + a[8 + j] * a[8 + j]);
    if (!(zooms[j] > 0)) return false;
    for (int i = 0; i < 3; ++i) r[i][j] = a[i * 4 + j] / zooms[j];
  }
  double qfac = 1;
  if (det3(r) < 0) {
    qfac = -1;
    for (int i = 0; i < 3; ++i) r[i][2] = -r[i][2];
  }
  const Mat3 p = core::polar_factor(r);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      if (std::abs(p[i][j] - r[i][j]) > 1e-8 + 1e-5 * std::abs(r[i][j])) return false;
  // Quaternion of the rotation (Shepperd's method, largest pivot), w >= 0 as nibabel's mat2quat.
  double w, x, y, z;
  const double tr = p[0][0] + p[1][1] + p[2][2];
  if (tr > 0) {
    const double s = std::sqrt(tr + 1) * 2;
    w = s / 4, x = (p[2][1] - p[1][2]) / s, y = (p[0][2] - p[2][0]) / s, z = (p[1][0] - p[0][1]) / s;
  } else if (p[0][0] > p[1][1] && p[0][0] > p[2][2]) {
    const double s = std::sqrt(1 + p[0][0] - p[1][1] - p[2][2]) * 2;
    w = (p[2][1] - p[1][2]) / s, x = s / 4, y = (p[0][1] + p[1][0]) / s, z = (p[0][2] + p[2][0]) / s;
  } else if (p[1][1] > p[2][2]) {
    const double s = std::sqrt(1 + p[1][1] - p[0][0] - p[2][2]) * 2;
    w = (p[0][2] - p[2][0]) / s, x = (p[0][1] + p[1][0]) / s, y = s / 4, z = (p[1][2] + p[2][1]) / s;
  } else {
    const double s = std::sqrt(1 + p[2][2] - p[0][0] - p[1][1]) * 2;
    w = (p[1][0] - p[0][1]) / s, x = (p[0][2] + p[2][0]) / s, y = (p[1][2] + p[2][1]) / s, z = s / 4;
  }
  if (w < 0) x = -x, y = -y, z = -z;
  h.quatern_b = x;
  h.quatern_c = y;
  h.quatern_d = z;
  h.qoffset_x = a[3];
  h.qoffset_y = a[7];
  h.qoffset_z = a[11];
  h.pixdim[0] = qfac;
  for (int j = 0; j < 3; ++j) h.pixdim[j + 1] = zooms[j];
  h.qform_code = code;
  return true;
}

}  // namespace

SeriesPlan series_plan(const DicomSeries& s, std::optional<DType> float_type) {
  SeriesPlan plan;
  if (!float_type && s.uniform_rescale) {
    plan.dtype = s.stored_dtype;
    plan.scaled = true;
    plan.slope = s.slope;
    plan.inter = s.intercept;
  } else if (float_type) {
    plan.dtype = *float_type;
  }
  return plan;
}

NiftiHeader series_header(const DicomSeries& s, const SeriesPlan& plan, std::vector<std::string>& warnings) {
  const Meta m = meta_of(s);
  NiftiHeader h;
  const std::vector<std::uint64_t> shape = s.shape();
  h.dim[0] = static_cast<std::int64_t>(shape.size());
  for (std::size_t i = 0; i < 7; ++i)
    h.dim[i + 1] = i < shape.size() ? static_cast<std::int64_t>(shape[i]) : 1;
  h.datatype = static_cast<std::int16_t>(nifti_datatype_code(plan.dtype));
  h.bitpix = static_cast<std::int16_t>(8 * dtype_size(plan.dtype));
  h.pixdim = {1, s.pixel_spacing[1], s.pixel_spacing[0], s.slice_spacing, 1, 1, 1, 1};
  const std::optional<double> tr = m.num(kRepetitionTime);
  if (shape.size() > 3 && tr) h.pixdim[4] = *tr / 1000.0;
  h.xyzt_units = 2 | 8;  // mm, s (as dcm2niix)
  // dcm2niix and nibabel write 1/0 for unscaled data (nibabel reads 0/0 the same way).
  h.scl_slope = plan.scaled ? plan.slope : 1.0;
  h.scl_inter = plan.scaled ? plan.inter : 0.0;
  const auto& a = s.affine;
  for (int j = 0; j < 4; ++j) {
    h.srow_x[j] = a[j];
    h.srow_y[j] = a[4 + j];
    h.srow_z[j] = a[8 + j];
  }
  h.sform_code = 1;  // scanner
  if (s.gantry_tilt || !set_qform(h, a, 1))
    warnings.push_back("qform_code 0: the affine has shear (gantry tilt " +
                       shortest(std::round(s.tilt_degrees * 1000) / 1000) +
                       " degrees), which only the sform holds");
  std::string descrip = "voxpipe dcm2nii";
  if (auto te = m.num(kEchoTime)) descrip += " TE=" + shortest(*te);
  if (tr) descrip += " TR=" + shortest(*tr);
  std::memcpy(h.descrip.data(), descrip.data(), std::min(descrip.size(), h.descrip.size() - 1));
  return h;
}

// ---- the JSON sidecar

namespace {

class JsonObject {
 public:
  void raw(const std::string& key, const std::string& value) {
    text_ += (text_.empty() ? "{\n" : ",\n") + std::string("  ") + json_str(key) + ": " + value;
  }
  void str(const std::string& key, const std::optional<std::string>& v) {
    if (v) raw(key, json_str(*v));
  }
  void num(const std::string& key, const std::optional<double>& v) {
    if (v) raw(key, shortest(*v));
  }
  void nums(const std::string& key, const std::vector<double>& v) {
    if (v.empty()) return;
    std::string o = "[";
    for (std::size_t i = 0; i < v.size(); ++i) o += (i ? ", " : "") + shortest(v[i]);
    raw(key, o + "]");
  }
  void strs(const std::string& key, const std::vector<std::string>& v) {
    if (v.empty()) return;
    std::string o = "[";
    for (std::size_t i = 0; i < v.size(); ++i) o += (i ? ", " : "") + json_str(v[i]);
    raw(key, o + "]");
  }
  std::string text() const { return (text_.empty() ? "{" : text_) + "\n}\n"; }

 private:
  std::string text_;
};

// Milliseconds to seconds; divided, not multiplied by 1e-3, so that 2300 gives 2.3, not
// 2.3000000000000003.
std::optional<double> seconds(std::optional<double> ms) {
  if (ms) *ms /= 1000.0;
  return ms;
}

// DICOM TM "HHMMSS.FFFFFF" (or "HH:MM:SS" of old files) as BIDS's "HH:MM:SS.FFFFFF" (dcm2niix).
std::optional<std::string> bids_time(const std::optional<std::string>& tm) {
  if (!tm) return tm;
  std::string digits;
  std::string frac;
  const std::size_t dot = tm->find('.');
  for (std::size_t i = 0; i < std::min(dot, tm->size()); ++i)
    if (std::isdigit(static_cast<unsigned char>((*tm)[i]))) digits += (*tm)[i];
  if (dot != std::string::npos) frac = tm->substr(dot + 1);
  if (digits.size() != 6) return tm;
  frac.resize(6, '0');
  return digits.substr(0, 2) + ":" + digits.substr(2, 2) + ":" + digits.substr(4, 2) + "." + frac;
}

}  // namespace

std::string series_sidecar(const DicomSeries& s, const SeriesPlan& plan,
                           const std::vector<std::string>& warnings) {
  const Meta m = meta_of(s);
  JsonObject j;
  j.str("Modality", m.str(kModality));
  j.str("Manufacturer", m.str(kManufacturer));
  j.str("ManufacturersModelName", m.str(kManufacturerModelName));
  j.num("MagneticFieldStrength", m.num(kMagneticFieldStrength));
  j.str("SeriesDescription", m.str(kSeriesDescription));
  j.str("ProtocolName", m.str(kProtocolName));
  if (m.ds.contains(kSeriesNumber)) j.raw("SeriesNumber", std::to_string(s.series_number));
  j.str("SeriesInstanceUID", m.str(kSeriesInstanceUID));
  j.strs("ImageType", m.ds.strings(kImageType));
  j.str("AcquisitionTime", bids_time(m.str(kAcquisitionTime)));
  j.num("EchoTime", seconds(m.num(kEchoTime)));
  j.num("RepetitionTime", seconds(m.num(kRepetitionTime)));
  j.num("FlipAngle", m.num(kFlipAngle));
  j.num("SliceThickness", m.num(kSliceThickness));
  j.num("SpacingBetweenSlices", m.num(kSpacingBetweenSlices));
  j.nums("PixelSpacing", m.nums(kPixelSpacing));
  j.nums("ImageOrientationPatientDICOM", m.nums(kImageOrientationPatient));
  j.str("ConversionSoftware", std::string("voxpipe"));
  j.str("ConversionSoftwareVersion", std::string(version()));
  std::vector<double> dims;
  for (auto d : s.shape()) dims.push_back(static_cast<double>(d));
  j.nums("Dimensions", dims);
  if (!s.split.empty()) j.str("SeriesSplit", s.split);
  if (plan.scaled) {
    j.num("RescaleSlope", plan.slope);
    j.num("RescaleIntercept", plan.inter);
  }
  if (s.gantry_tilt) j.num("GantryTiltDegrees", s.tilt_degrees);
  j.strs("Warnings", warnings);
  return j.text();
}

std::string series_name(const DicomSeries& s) {
  std::string o = "series " + std::to_string(s.series_number);
  if (!s.series_description.empty()) o += " \"" + s.series_description + "\"";
  if (!s.split.empty()) o += " (" + s.split + ")";
  return o;
}

std::vector<std::string> write_dicom_series(const DicomSeries& s, const std::string& path,
                                            std::optional<DType> float_type,
                                            const WriteOptions& options, unsigned threads) {
  std::vector<std::string> warnings = s.warnings;
  const SeriesPlan plan = series_plan(s, float_type);
  const NiftiHeader h = series_header(s, plan, warnings);
  const DType dtype = plan.dtype;
  std::uint64_t voxels = 1;
  for (auto d : s.shape()) voxels *= d;
  std::vector<std::uint8_t> data(voxels * dtype_size(dtype));
  for (std::string& w : read_dicom_series(s, data, dtype, threads)) warnings.push_back(std::move(w));
  write_nifti(path, h, {}, producer_from_bytes(std::as_bytes(std::span(data))), options);
  return warnings;
}

}  // namespace voxpipe::cli
