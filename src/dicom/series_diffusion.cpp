// The diffusion encoding (b-value, gradient direction) of a DICOM image, read where each vendor
// states it: the standard attributes (top level or an enhanced frame's MR Diffusion Sequence),
// Siemens' CSA image header and its copies in "SIEMENS MR HEADER", Philips' and GE's private
// elements (GE's direction taken from its encoding frame to the patient frame). Part of what
// one file becomes for series assembly (series_images.cpp).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "dicom/csa.hpp"
#include "dicom/series_internal.hpp"

namespace voxpipe::dicom::series_detail {
namespace {

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
  static constexpr bool kFlip[3][3] = {
      {true, true, false}, {false, true, true}, {false, false, true}};
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

}  // namespace

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

}  // namespace voxpipe::dicom::series_detail
