// The NIfTI-1 image and the BIDS-style JSON sidecar `voxpipe dcm2nii` writes of a DICOM series,
// which info and convert describe and write too (series_nifti.hpp).
#include "series_nifti.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>

#include "cli_common.hpp"
#include "core/mat3.hpp"
#include "voxpipe/dicom.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::cli {

namespace {

constexpr DicomTag kManufacturer = dicom_tag(0x0008, 0x0070);
constexpr DicomTag kRepetitionTime = dicom_tag(0x0018, 0x0080);
constexpr DicomTag kEchoTime = dicom_tag(0x0018, 0x0081);
constexpr DicomTag kInPlanePhaseEncodingDirection = dicom_tag(0x0018, 0x1312);
constexpr DicomTag kEffectiveEchoTime = dicom_tag(0x0018, 0x9082);
constexpr DicomTag kPhilipsScaleSlope = dicom_tag(0x2005, 0x100E);
constexpr DicomTag kSharedFunctionalGroups = dicom_tag(0x5200, 0x9229);
constexpr DicomTag kPerFrameFunctionalGroups = dicom_tag(0x5200, 0x9230);

using core::det3;
using core::Mat3;

// Sets the qform (quaternion, offsets, qfac in pixdim[0], zooms in pixdim[1..3]) from an
// affine, as nibabel's Nifti1Header.set_qform(affine, code): zooms are the column norms, qfac
// -1 for a left-handed frame, and shears are stripped (the rotation is the polar factor of the
// unit axes). Returns false, leaving the header as it was, when the shear is larger than
// kQformShearTolerance (the largest difference between the unit axes and that rotation) or a
// column is zero; `shear` is set to that difference.
bool set_qform(NiftiHeader& h, const std::array<double, 16>& a, int code, double& shear) {
  shear = 0;
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
    for (int j = 0; j < 3; ++j) shear = std::max(shear, std::abs(p[i][j] - r[i][j]));
  if (!(shear <= kQformShearTolerance)) return false;
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

// NIfTI slice_code from slice times in slice order, as dcm2niix's checkSliceTimes: the order
// the first slice acquired and its neighbours imply; 0 (unknown) for fewer than 3 slices and
// for multiband (several slices at the first time).
int slice_code(const std::vector<double>& t) {
  const std::size_t n = t.size();
  if (n < 3) return 0;
  std::size_t lo = 0;
  for (std::size_t i = 1; i < n; ++i)
    if (t[i] < t[lo]) lo = i;
  std::size_t at_first = 0;
  for (double v : t) at_first += v == t[lo];
  if (at_first > 1) return 0;
  if (lo == 1) return 5;                                   // NIFTI_SLICE_ALT_INC2: 3,1,4,2
  if (lo == n - 2) return 6;                               // NIFTI_SLICE_ALT_DEC2: 2,4,1,3
  if (lo == 0) return t[1] < t[2] ? 1 : t[1] > t[2] ? 3 : 0;  // SEQ_INC, ALT_INC
  if (lo == n - 1) return t[n - 3] > t[n - 2] ? 2 : t[n - 3] < t[n - 2] ? 4 : 0;  // SEQ_DEC, ALT_DEC
  return 0;
}

const DicomDataset& empty_dataset() {
  static const DicomDataset kEmpty;
  return kEmpty;
}

}  // namespace

SeriesMeta::SeriesMeta(const DicomSeries& s)
    : ds_(s.first_file ? s.first_file->dataset : empty_dataset()) {
  // Each functional group is a sequence of one item (e.g. MR Echo (0018,9114) holding
  // EffectiveEchoTime); the shared groups first, then the first frame's.
  for (DicomTag g : {kSharedFunctionalGroups, kPerFrameFunctionalGroups}) {
    const auto& items = ds_.items(g);
    if (items.empty()) continue;
    for (const DicomElement& e : items.front().elements())
      if (!e.items.empty()) groups_.push_back(&e.items.front());
  }
}

// The functional groups first: dcm2niix reads an enhanced file's values in file order, the
// last one kept, and the groups come after the top-level attributes (a Philips file's top-level
// PixelBandwidth is rounded, its MR Imaging Modifier's is not).
const DicomDataset* SeriesMeta::holder(DicomTag t) const noexcept {
  for (const DicomDataset* g : groups_)
    if (g->contains(t)) return g;
  if (ds_.contains(t)) return &ds_;
  return nullptr;
}

namespace {

// An element of unknown VR (a private tag of an implicit-VR file) as the text its value holds:
// Siemens' and Philips' private strings and numbers are text (IS, DS, LO, SH).
std::optional<std::vector<std::string>> un_text(const DicomElement* e) {
  if (!e || e->vr != DicomVR::UN || !e->value_read) return std::nullopt;
  std::vector<std::string> out(1);
  for (std::uint8_t c : e->value) {
    if (c == '\\') {
      out.emplace_back();
    } else if (c >= 0x20 && c < 0x7F) {
      out.back() += static_cast<char>(c);
    } else if (c != 0) {
      return std::nullopt;  // binary: not text
    }
  }
  for (std::string& v : out) {
    const auto b = v.find_first_not_of(' ');
    const auto e2 = v.find_last_not_of(' ');
    v = b == std::string::npos ? std::string() : v.substr(b, e2 - b + 1);
  }
  return out;
}

std::optional<double> text_number(const std::string& v) {
  if (v.empty()) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (end != v.c_str() + v.size()) return std::nullopt;
  return d;
}

}  // namespace

const DicomElement* SeriesMeta::find(DicomTag t) const noexcept {
  const DicomDataset* h = holder(t);
  return h ? h->find(t) : nullptr;
}

std::optional<std::string> SeriesMeta::str(DicomTag t) const {
  const DicomDataset* h = holder(t);
  if (!h) return std::nullopt;
  if (const auto u = un_text(h->find(t))) {
    std::string o;
    for (std::size_t i = 0; i < u->size(); ++i) o += (i ? "\\" : "") + (*u)[i];
    if (o.empty()) return std::nullopt;
    return o;
  }
  try {
    auto v = h->string(t);
    if (v && v->empty()) return std::nullopt;
    return v;
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::vector<std::string> SeriesMeta::strs(DicomTag t) const {
  const DicomDataset* h = holder(t);
  if (!h) return {};
  if (const auto u = un_text(h->find(t))) return *u;
  try {
    return h->strings(t);
  } catch (const Error&) {
    return {};
  }
}

std::optional<double> SeriesMeta::num(DicomTag t) const {
  const DicomDataset* h = holder(t);
  if (!h) return std::nullopt;
  if (const auto u = un_text(h->find(t))) return text_number(u->front());
  try {
    return h->number(t);
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::vector<double> SeriesMeta::nums(DicomTag t) const {
  const DicomDataset* h = holder(t);
  if (!h) return {};
  if (const auto u = un_text(h->find(t))) {
    std::vector<double> o;
    for (const std::string& v : *u) {
      const auto d = text_number(v);
      if (!d) return {};
      o.push_back(*d);
    }
    return o;
  }
  try {
    return h->numbers(t);
  } catch (const Error&) {
    return {};
  }
}

SeriesPlan series_plan(const DicomSeries& s, std::optional<DType> float_type, bool philips_precise) {
  SeriesPlan plan;
  // Colour images are written as RGB24 (as dcm2niix): no rescale, and float output asked for
  // grey images leaves them so.
  if (s.stored_dtype == DType::rgb24) {
    plan.dtype = DType::rgb24;
    return plan;
  }
  double slope = s.slope, inter = s.intercept;
  // Philips' scale slope, when the images share their rescale (dcm2niix leaves a series whose
  // scaling varies per frame at display values too).
  const SeriesMeta m(s);
  const auto manufacturer = m.str(kManufacturer);
  std::string maker = manufacturer.value_or("");
  for (char& c : maker) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (maker.find("PHILIPS") != std::string::npos && s.uniform_rescale) {
    const auto ss = m.num(kPhilipsScaleSlope);
    if (ss && std::isfinite(*ss) && *ss != 0 && s.slope != 0) {
      plan.philips = PhilipsScale{s.slope, s.intercept, *ss, philips_precise};
      if (philips_precise) {
        // P = (R * RS + RI) / (RS * SS)
        slope = 1.0 / *ss;
        inter = s.intercept / (s.slope * *ss);
      }
    }
  }
  if (!float_type && s.uniform_rescale) {
    plan.dtype = s.stored_dtype;
    plan.scaled = true;
    plan.slope = slope;
    plan.inter = inter;
  } else {
    if (float_type) plan.dtype = *float_type;
    if (plan.philips && plan.philips->precise)
      plan.float_factor = 1.0 / (plan.philips->rs * plan.philips->ss);
  }
  return plan;
}

NiftiHeader series_header(const DicomSeries& s, const SeriesPlan& plan, std::vector<std::string>& warnings,
                          const SeriesFrame& frame) {
  (void)frame;  // dim_info and slice_code do not depend on the direction of j
  const SeriesMeta m(s);
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
  // A qform (code 1, as dcm2niix) unless the slices step off their normal (gantry tilt, which
  // scan_dicom_series reports above 0.01 degrees) or the axes are further from orthogonal than
  // the rounding of ImageOrientationPatient makes them. Images in no patient frame (no
  // position or orientation, DicomSeries::no_geometry) get neither, as dcm2niix writes them:
  // readers take the pixdim affine, which is the series' own with its rows flipped (dcm2niix's
  // row order).
  double shear = 0;
  if (s.no_geometry) {
    h.sform_code = 0;
    h.qform_code = 0;
  } else if (s.gantry_tilt) {
    warnings.push_back("qform_code 0: the affine has shear (gantry tilt " +
                       shortest(std::round(s.tilt_degrees * 1000) / 1000) +
                       " degrees), which only the sform holds");
  } else if (!set_qform(h, a, 1, shear)) {
    warnings.push_back("qform_code 0: the affine's axes are " +
                       shortest(std::round(shear * 180 / M_PI * 1000) / 1000) +
                       " degrees from orthogonal (ImageOrientationPatient), which only the sform holds");
  }
  // dim_info as dcm2niix (from dicm2nii): the phase encoding axis from InPlanePhaseEncodingDirection
  // (ROW: phase along i, frequency along j; COL: the other way), slices along k.
  if (const auto pe = m.str(kInPlanePhaseEncodingDirection)) {
    if (pe->rfind("ROW", 0) == 0) h.dim_info = static_cast<std::int8_t>((3 << 4) | (1 << 2) | 2);
    if (pe->rfind("COL", 0) == 0) h.dim_info = static_cast<std::int8_t>((3 << 4) | (2 << 2) | 1);
  }
  h.slice_code = static_cast<std::int8_t>(slice_code(series_slice_timing(s)));
  h.slice_duration = 0;  // dcm2niix never sets it
  std::string descrip = "voxpipe dcm2nii";
  auto te = m.num(kEchoTime);
  if (!te) te = m.num(kEffectiveEchoTime);
  if (te) descrip += " TE=" + shortest(*te);
  if (tr) descrip += " TR=" + shortest(*tr);
  std::memcpy(h.descrip.data(), descrip.data(), std::min(descrip.size(), h.descrip.size() - 1));
  return h;
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
  for (std::string& w : read_series_values(s, plan, data, threads)) warnings.push_back(std::move(w));
  write_nifti(path, h, {}, producer_from_bytes(std::as_bytes(std::span(data))), options);
  return warnings;
}

std::vector<std::string> read_series_values(const DicomSeries& s, const SeriesPlan& plan,
                                            std::span<std::uint8_t> data, unsigned threads,
                                            DicomOnCorrupt on_corrupt) {
  std::vector<std::string> warnings = read_dicom_series(s, data, plan.dtype, threads, on_corrupt);
  if (plan.float_factor != 1) {
    const std::size_t n = data.size() / dtype_size(plan.dtype);
    if (plan.dtype == DType::f32) {
      auto* v = reinterpret_cast<float*>(data.data());
      for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(v[i] * plan.float_factor);
    } else if (plan.dtype == DType::f64) {
      auto* v = reinterpret_cast<double*>(data.data());
      for (std::size_t i = 0; i < n; ++i) v[i] *= plan.float_factor;
    }
  }
  return warnings;
}

namespace {

// dcm2niix's "%g" (six significant digits), with 0 for -0.
std::string g_format(double x) {
  if (x == 0) x = 0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

}  // namespace

bool write_gradient_files(const DicomSeries& s, const std::array<double, 16>& affine,
                          const std::string& base) {
  const std::optional<DicomGradientTable> table = dicom_gradient_table(s, affine);
  if (!table) return false;
  std::string bval, bvec[3];
  for (std::size_t v = 0; v < table->bvals.size(); ++v) {
    const char* sep = v ? " " : "";
    bval += sep + g_format(table->bvals[v]);
    for (int c = 0; c < 3; ++c) bvec[c] += sep + g_format(table->bvecs[v][c]);
  }
  write_text_file(base + ".bval", bval + "\n");
  write_text_file(base + ".bvec", bvec[0] + "\n" + bvec[1] + "\n" + bvec[2] + "\n");
  return true;
}

}  // namespace voxpipe::cli
