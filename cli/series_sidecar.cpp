// The BIDS JSON sidecar `voxpipe dcm2nii` writes beside a series' NIfTI image (series_nifti.hpp):
// the keys dcm2niix writes for an MR series, in its order and with its values, read from the
// first file's standard tags (or its enhanced functional groups, SeriesMeta), Siemens' CSA image
// header and Phoenix protocol (dicom/csa.hpp) and Philips' private tags, then voxpipe's own keys.
// Where each value comes from follows dcm2niix (nii_dicom_batch.cpp nii_SaveBIDSX, nii_dicom.cpp);
// the differences are listed in docs/dicom.md "JSON sidecar".
// This file: the sidecar, its keys from parallel imaging to the end; the keys before them, the
// Siemens headers, SliceTiming and BidsGuess are in sidecar_*.cpp (sidecar_internal.hpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "cli_common.hpp"
#include "dicom/csa.hpp"
#include "series_nifti.hpp"
#include "sidecar_internal.hpp"
#include "voxpipe/dicom.hpp"

namespace voxpipe::cli {

using namespace sidecar;  // the tags, the JSON object and the sidecar's parts

std::string series_sidecar(const DicomSeries& s, const SeriesPlan& plan,
                           const std::vector<std::string>& warnings, const SeriesFrame& frame) {
  const SeriesMeta m(s);
  JsonObject j;
  const StandardKeys k = write_standard_keys(j, s, m, plan);
  const bool siemens = k.siemens, philips = k.philips, mr = k.mr, is3d = k.is3d;
  const std::string& maker = k.maker;
  const std::optional<std::string>& modality = k.modality;
  const std::optional<std::string>& protocol = k.protocol;
  const std::optional<std::string>& sequence_variant = k.sequence_variant;
  const std::optional<dicom::CsaHeader>& csa_image = k.csa_image;
  const std::map<std::string, std::string>& phoenix = k.phoenix;
  const std::vector<std::string>& image_type = k.image_type;
  const std::vector<double>& slice_timing = k.slice_timing;
  const int multiband = k.multiband;
  const double pat_accel_pe = k.pat_accel_pe;
  const std::optional<double>& te = k.te;
  const auto has_type = [&](std::string_view v) {
    return std::find(image_type.begin(), image_type.end(), v) != image_type.end();
  };
  const std::uint64_t dim1 = s.columns, dim2 = s.rows;
  const auto joined = [&](DicomTag t) -> std::optional<std::string> {
    const std::vector<std::string> v = m.strs(t);
    if (v.empty()) return std::nullopt;
    std::string o;
    for (std::size_t i = 0; i < v.size(); ++i) o += (i ? "\\" : "") + v[i];
    return o;
  };

  // Parallel imaging: Siemens' "p2s3" text (0051,1011), the standard (0018,9069) for others;
  // the Phoenix protocol's sPat.lAccelFactPE takes precedence (dcm2niix issue 672).
  double accel_pe = 0, accel_oop = 0;
  if (siemens) {
    accel_pe = pat_accel_pe;
  } else {
    accel_pe = m.num(kParallelReductionFactorInPlane).value_or(0);
  }
  accel_oop = m.num(kParallelReductionFactorOutOfPlane).value_or(0);
  double phase_oversampling = 0;
  const bool diffusion =
      (csa_image && csa_image->number("B_value")) ||
      std::any_of(s.images.begin(), s.images.end(), [](const DicomSlice& i) { return i.diffusion.has_value(); });
  std::optional<std::string> coil_name = siemens ? m.str(kCoilSiemens) : m.str(kReceiveCoilName);
  if (siemens && !phoenix.empty()) {
    const bool phase = s.image_component == "PHASE" || has_type("P") || has_type("PHASE");
    write_phoenix_keys(j, phoenix, phase, mr, diffusion, coil_name, accel_pe, accel_oop,
                       phase_oversampling);
  } else if (mr) {
    if (coil_name) j.str("CoilString", coil_name);
  }
  if (multiband > 1 && mr) j.raw("MultibandAccelerationFactor", std::to_string(multiband));
  j.pos("PercentPhaseFOV", m.num(kPercentPhaseFieldOfView));
  j.pos("PercentSampling", m.num(kPercentSampling));
  // EchoTrainLength, else an enhanced file's GradientEchoTrainLength (0018,9241) of 2 or more
  // (dcm2niix reads the later in file order).
  auto etl = m.num(kEchoTrainLength);
  if (const auto g = m.num(dicom_tag(0x0018, 0x9241)); g && *g >= 2) etl = g;
  if (etl && *etl > 1) j.num("EchoTrainLength", etl);
  {
    auto n = m.num(kPhaseEncodingSteps);
    if (!n) n = m.num(kPhaseEncodingStepsInPlane);
    if (n && *n > 0) j.num("PhaseEncodingSteps", std::round(*n));
  }
  if (const auto n = m.num(kFrequencyEncodingSteps); n && *n > 0) j.num("FrequencyEncodingSteps", n);
  if (const auto n = m.num(kPhaseEncodingStepsOutOfPlane); n && *n > 0) j.num("PhaseEncodingStepsOutOfPlane", n);
  // AcquisitionMatrix: (frequency rows, frequency columns, phase rows, phase columns).
  double pe_lines = 0;
  {
    const std::vector<double> am = m.nums(kAcquisitionMatrix);
    if (am.size() == 4) pe_lines = am[2] > 0 ? am[2] : am[3];
    if (pe_lines <= 0 && siemens) pe_lines = phoenix_number(phoenix, "sKSpace.lPhaseEncodingLines").value_or(0);
    if (pe_lines > 0 && mr) j.num("AcquisitionMatrixPE", pe_lines);
  }
  const std::string pe_dir = upper(m.str(kInPlanePhaseEncodingDirection).value_or(""));
  const char rc = pe_dir.rfind("ROW", 0) == 0 ? 'R' : pe_dir.rfind("COL", 0) == 0 ? 'C' : '?';
  double recon_pe = pe_lines;
  if (dim1 > 0 && dim2 > 0) {
    if (dim1 == dim2) recon_pe = static_cast<double>(dim2);
    else if (rc == 'C') recon_pe = static_cast<double>(dim2);
    else if (rc == 'R') recon_pe = static_cast<double>(dim1);
  }
  if (mr && recon_pe > 0) j.num("ReconMatrixPE", recon_pe);
  double bwppe = m.num(kBandwidthPerPixelPhaseEncode).value_or(0);
  if (bwppe == 0 && csa_image) bwppe = csa_image->number("BandwidthPerPixelPhaseEncode").value_or(0);
  j.pos("BandwidthPerPixelPhaseEncode", bwppe);
  j.pos("ParallelReductionFactorInPlane", accel_pe);
  j.str("ParallelAcquisitionTechnique", m.str(kParallelAcquisitionTechnique));
  j.pos("ParallelReductionFactorOutOfPlane", accel_oop);
  double ees = 0;
  if (recon_pe > 0 && bwppe > 0) ees = 1.0 / (bwppe * recon_pe);
  std::optional<double> wfs;
  if (philips) wfs = m.num(kWaterFatShiftPhilips);
  j.pos("WaterFatShift", wfs);
  const double freq = m.num(kImagingFrequency).value_or(0);
  if (ees == 0 && freq > 0 && wfs && *wfs != 0 && etl && *etl > 0 && recon_pe > 1) {
    // Philips: dcm2niix's estimate (in single precision, as dcm2niix computes it).
    const float actual = static_cast<float>(*wfs / (freq * 3.4 * (*etl + 1)));
    const float total = static_cast<float>(actual * *etl);
    j.pos("EstimatedEffectiveEchoSpacing", static_cast<double>(total / static_cast<float>(recon_pe - 1)));
    j.num("EstimatedTotalReadoutTime", static_cast<double>(total));
  }
  j.pos("EffectiveEchoSpacing", ees);
  {
    double f = 1;
    if (accel_pe > 1) f /= accel_pe;
    if (phase_oversampling > 0) f *= 1 + phase_oversampling;
    const double d = bwppe * f * recon_pe;
    j.pos("DerivedVendorReportedEchoSpacing", d != 0 ? 1 / d : 0);
  }
  j.pos("AcquisitionDuration", m.num(kAcquisitionDuration));
  j.pos("NumberOfKSpaceTrajectories", m.num(kNumberOfKSpaceTrajectories));
  if (recon_pe > 0 && ees > 0) j.num("TotalReadoutTime", ees * (recon_pe - 1));
  j.pos("PixelBandwidth", m.num(kPixelBandwidth));
  if (siemens) {
    if (const auto dwell = m.num(kDwellTimeSiemens); dwell && *dwell > 0) j.num("DwellTime", *dwell * 1e-9);
  }
  // Phase encoding: the axis from InPlanePhaseEncodingDirection (ROW: along i, COL: along j),
  // the sign from the CSA image header's PhaseEncodingDirectionPositive, in the written frame:
  // j- when the phase runs against j, which depends on whether rows are flipped (dcm2niix's
  // frame) or not (voxpipe's).
  const bool skip_axis = is3d && !(etl && *etl > 1);
  int positive = -1;
  if (csa_image) {
    if (const auto p = csa_image->number("PhaseEncodingDirectionPositive")) positive = static_cast<int>(std::lround(*p));
  }
  if (!skip_axis && (rc == 'R' || rc == 'C')) {
    if (positive < 0 || is3d) {
      j.str("PhaseEncodingAxis", std::string(rc == 'C' ? "j" : "i"));
    } else {
      std::string d = rc == 'C' ? "j" : "i";
      // For COL, the phase runs toward increasing rows when positive: +j in voxpipe's frame,
      // -j in a frame whose rows are flipped.
      const bool against = rc == 'R' ? positive == 0 : (positive == 1) == frame.rows_flipped;
      if (against) d += "-";
      j.str("PhaseEncodingDirection", d);
    }
  }
  if (mr && !is3d && s.slices > 1 && !slice_timing.empty()) j.nums("SliceTiming", slice_timing);
  {
    const std::vector<double> iop = m.nums(kImageOrientationPatient);
    if (iop.size() == 6) j.nums("ImageOrientationPatientDICOM", iop);
  }
  if (siemens) j.str("ImageOrientationText", m.str(kImageOrientationTextSiemens));
  if (rc == 'C') j.str("InPlanePhaseEncodingDirectionDICOM", std::string("COL"));
  if (rc == 'R') j.str("InPlanePhaseEncodingDirectionDICOM", std::string("ROW"));
  {
    BidsFacts f;
    f.modality = modality.value_or("");
    f.maker = siemens ? "SIEMENS" : philips ? "PHILIPS" : maker.rfind("GE", 0) == 0 ? "GE" : "";
    for (std::size_t i = 0; i < image_type.size(); ++i) f.image_type += (i ? "_" : "") + image_type[i];
    f.sequence_name = m.str(kSequenceName).value_or("");
    f.pulse_sequence_name = m.str(kPulseSequenceName).value_or("");
    if (siemens) f.sequence_details = phoenix_string(phoenix, "tSequenceFileName").value_or("");
    f.scanning_sequence = joined(kScanningSequence).value_or("");
    f.sequence_variant = sequence_variant.value_or("");
    f.series_description = m.str(kSeriesDescription).value_or("");
    f.protocol_name = protocol.value_or("");
    f.image_comments = m.str(kImageComments).value_or("");
    f.series_number = s.series_number;
    f.echo = static_cast<int>(s.echo_number != 0 ? s.echo_number : m.num(kEchoNumbers).value_or(0));
    f.multi_echo = s.split.rfind("echo", 0) == 0;
    // ImageType as dcm2niix tests it: the values joined by '_', searched as text.
    const std::string& it = f.image_type;
    const bool long_type = it.size() > 5;
    f.derived = (it.size() > 6 && contains(it, "DERIVED")) ||
                (long_type && (contains(it, "_ADC_") || contains(it, "_TRACEW_") || contains(it, "_TRACE_") ||
                               contains(it, "_FA_")));
    f.phase = contains(it, "_P_") || (it.size() > 6 && contains(it, "PHASE")) || s.image_component == "PHASE";
    f.magnitude = contains(it, "_M_") || contains(it, "_MAGNITUDE_") || s.image_component == "MAGNITUDE";
    f.real = contains(it, "_R_") || contains(it, "_REAL_") || s.image_component == "REAL";
    f.imaginary = contains(it, "_I_") || contains(it, "_IMAGINARY_") || s.image_component == "IMAGINARY";
    f.phase_map_hz = long_type && contains(it, "B0") && contains(it, "MAP");
    if (siemens) {
      // dcm2niix's Siemens localizers: "AAHScout" in the description or protocol, an fl2d1
      // sequence; not a b1map.
      f.localizer = contains(f.series_description, "AAHScout") || contains(f.protocol_name, "AAHScout") ||
                    contains(f.sequence_name, "fl2d1");
      if (contains(f.series_description, "b1map")) f.localizer = false;
    }
    f.diffusion = diffusion || contains(it, "_DIFFUSION_");
    std::set<const DicomFile*> files;
    for (const DicomSlice& im : s.images) files.insert(im.file.get());
    f.files = std::max<std::size_t>(files.size(), 1);
    f.frames_per_file = 0;
    for (const DicomSlice& im : s.images) f.frames_per_file += im.file == s.images.front().file && im.tile == 0;
    f.accel_pe = accel_pe;
    f.multiband = multiband;
    f.te_ms = te.value_or(0);
    f.ti_ms = m.num(kInversionTime).value_or(0);
    f.echo_train_length = static_cast<int>(etl.value_or(0));
    f.pe_rc = rc;
    f.pe_positive = positive;
    if (siemens) {
      // Phoenix alTI (us) to ms; lInvContrasts 1 says MPRAGE whatever alTI[1] holds.
      if (const auto t = phoenix_number(phoenix, "alTI[0]")) f.inv1 = *t / 1000.0;
      if (const auto t = phoenix_number(phoenix, "alTI[1]")) f.inv2 = *t / 1000.0;
      f.contrasts = static_cast<int>(phoenix_number(phoenix, "lContrasts").value_or(0));
      f.inv_contrasts = static_cast<int>(phoenix_number(phoenix, "lInvContrasts").value_or(0));
    }
    if (const auto g = bids_guess(f)) j.strs("BidsGuess", {g->first, g->second});
  }
  j.str("ConversionSoftware", std::string("voxpipe"));
  j.str("ConversionSoftwareVersion", std::string(version()));
  // voxpipe's own keys (no BIDS key has these names).
  j.str("SeriesInstanceUID", m.str(kSeriesInstanceUID));
  j.nums("PixelSpacing", m.nums(kPixelSpacing));
  std::vector<double> dims;
  for (auto d : frame.written_shape.empty() ? s.shape() : frame.written_shape)
    dims.push_back(static_cast<double>(d));
  j.nums("Dimensions", dims);
  if (!s.split.empty()) j.str("SeriesSplit", s.split);
  if (plan.scaled) {
    // DICOM's shared RescaleSlope/Intercept (scl_slope/scl_inter but for Philips precise scaling).
    j.num("RescaleSlope", s.slope);
    j.num("RescaleIntercept", s.intercept);
  }
  if (s.gantry_tilt) j.num("GantryTiltDegrees", s.tilt_degrees);
  j.strs("Warnings", warnings);
  return j.text();
}

}  // namespace voxpipe::cli
