// What the sidecar guesses of a series as dcm2niix v1.0.20260724 does: BIDS's PulseSequenceType
// (pulse_sequence_type) and dcm2niix's BidsGuess, the data type and name entities BIDS would
// give the series (bids_guess).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sidecar_internal.hpp"

namespace voxpipe::cli::sidecar {

std::optional<std::string> pulse_sequence_type(const std::string& scanning,
                                               const std::vector<std::string>& variant,
                                               int multiband) {
  const auto has_variant = [&](std::string_view v) {
    return std::find(variant.begin(), variant.end(), v) != variant.end();
  };
  const bool ep = contains(scanning, "EP"), se = contains(scanning, "SE"), gr = contains(scanning, "GR"),
             ir = contains(scanning, "IR");
  if (ep) return std::string(multiband > 1 ? "Multiband " : "") + (se ? "Spin Echo EPI" : "Gradient Echo EPI");
  if (gr) {
    if (ir && has_variant("MP")) return std::string("MPRAGE");
    return std::string(has_variant("SP") ? "Spoiled Gradient Echo" : "Gradient Echo");
  }
  if (se) return std::string(ir ? "Inversion Recovery Spin Echo" : "Spin Echo");
  return std::nullopt;
}

namespace {

// "p2", "m3", "t100": a letter and a whole number (formatted whole: GCC 12's -Wrestrict misfires
// on "p" + std::to_string(n) once inlined).
std::string letter_number(char letter, long n) {
  char text[24];
  std::snprintf(text, sizeof text, "%c%ld", letter, n);
  return text;
}

// The alphanumeric characters of `v`.
std::string alnum(std::string_view v) {
  std::string o;
  for (char c : v)
    if (std::isalnum(static_cast<unsigned char>(c))) o += c;
  return o;
}

}  // namespace

std::optional<std::pair<std::string, std::string>> bids_guess(const BidsFacts& f) {
  if (f.modality == "CT") return std::pair<std::string, std::string>{"ct", "_ct"};
  if (f.modality != "MR") return std::nullopt;
  std::string type, suffix, modality, rec;
  bool report_echo = true, multi_echo = false, derived = f.derived, dir_label = false, part = f.phase,
       add_run = true;
  std::string acq = "_acq-";
  if (f.maker == "SIEMENS") {
    std::string seq = f.sequence_name.size() < 2 ? f.pulse_sequence_name : f.sequence_name;
    std::string details = f.sequence_details.size() < 2 ? seq : f.sequence_details;
    bool dual_ti = !std::isnan(f.inv1) && !std::isnan(f.inv2) && f.inv1 > 0 && f.inv2 > 0 && f.inv_contrasts != 1;
    std::string pre_acq;
    if (contains(f.image_type, "DERIVED")) derived = true;
    if (f.localizer) {
      type = "discard", modality = "localizer";
    } else if (contains(details, "b1map")) {
      type = "fmap", modality = "TB1TFL";
      pre_acq = contains(f.image_type, "FLIP ANGLE MAP") ? "famp" : "anat";
    } else if (contains(details, "tfl") || contains(details, "mp2rage") || contains(details, "wip925")) {
      type = "anat";
      modality = dual_ti ? "MP2RAGE" : "T1w";
      if (contains(f.image_type, "T1 MAP")) modality = "T1map", dual_ti = false;
      if (contains(f.image_type, "_UNI")) {
        dual_ti = false, modality = "UNIT1";
        if (contains(f.image_comments, "DENOISED IMAGE")) rec = "denoise";
      }
      derived = false;
    } else if (f.diffusion || contains(details, "_diff") || contains(details, "resolve") ||
               contains(details, "PtkSmsVB13ADwDualSpinEchoEpi") || contains(details, "ep2d_stejskal_386")) {
      type = "dwi", modality = contains(f.series_description, "_SBRef") ? "sbref" : "dwi";
      dir_label = true;
    } else if (contains(details, "fairest") || contains(details, "_asl") || contains(details, "_pasl") ||
               contains(details, "pcasl") || contains(details, "PCASL")) {
      type = "perf", modality = contains(f.series_description, "_m0") ? "m0scan" : "asl";
    } else if (contains(f.pulse_sequence_name, "spcR")) {
      type = "anat", modality = "T2w";
    } else if (contains(details, "tse_vfl")) {
      type = "anat";
      modality = contains(details, "spcir") || contains(f.sequence_name, "spcir") ? "FLAIR" : "T2w";
    } else if (contains(details, "tse")) {
      report_echo = false, type = "anat";
      if (contains(f.sequence_name, "tir")) modality = "FLAIR";
      if (contains(f.sequence_name, "tse2d") || contains(f.pulse_sequence_name, "tse2d"))
        modality = f.te_ms < 50 ? "PDw" : "T2w";
    } else if (contains(details, "ep2d_ase")) {
      modality = "oef_ase";
    } else if (contains(details, "ep2d_se")) {
      type = "fmap", modality = "epi", dir_label = true;
    } else if (contains(details, "gre_field_mapping")) {
      report_echo = false, add_run = false, part = false, type = "fmap";
      if (f.phase) modality = "phasediff";
      if (f.magnitude) modality = "magnitude" + std::to_string(f.echo);
    } else if (contains(details, "\\trufi") || contains(seq, "fl3d1_ns") || contains(seq, "fl2d1") ||
               contains(seq, "tfl2d1")) {
      type = "discard", modality = "localizer";
    } else if (contains(seq, "fl3d1r")) {
      type = "anat", modality = "angio";
    } else if (contains(details, "ep_seg_fid")) {
      type = "anat", modality = "T2starw", part = true;
      if (contains(f.series_description, "mIP")) type = "discard", modality = "mIP";
      if (contains(f.series_description, "SWI_Images")) type = "discard", modality = "SWI_Images";
    } else if (contains(details, "gre")) {
      type = "anat", modality = "T2starw", part = true;
      if (f.echo > 1 || f.contrasts > 1) modality = "MEGRE", multi_echo = true;
    } else if (contains(details, "AALScout") || contains(details, "haste")) {
      type = "discard", modality = "localizer";
    } else if (contains(details, "_bold") || contains(details, "pace") || contains(f.image_type, "FMRI") ||
               contains(details, "ep2d_fid")) {
      type = "func", modality = "bold", dir_label = true;
      if (f.protocol_name.rfind("func_", 0) == 0 && contains(f.series_description, "_SBRef")) modality = "sbref";
    } else if (contains(f.sequence_name, "*epse2d")) {
      type = "fmap", modality = "epi", dir_label = true;
    }
    acq += pre_acq;
    for (char c : seq) {
      if (c == '*') continue;
      if (std::isalnum(static_cast<unsigned char>(c))) acq += c;
      if (std::isdigit(static_cast<unsigned char>(c))) break;
    }
    if (f.accel_pe > 1) acq += letter_number('p', std::lround(f.accel_pe));
    if (f.multiband > 1) acq += letter_number('m', f.multiband);
    suffix = acq;
    if (!rec.empty()) suffix += "_rec-" + rec;
    if (dir_label) {
      const bool positive = f.pe_positive != 0;
      suffix += "_dir-";
      suffix += f.pe_rc == 'C' ? (positive ? "AP" : "PA") : (positive ? "RL" : "LR");
    }
    if (add_run) suffix += "_run-" + std::to_string(f.series_number);
    if (report_echo && (f.echo > 1 || multi_echo || (f.multi_echo && f.echo > 0)))
      suffix += "_echo-" + std::to_string(f.echo);
    if (dual_ti)
      suffix += std::string("_inv-") + (std::fabs(f.ti_ms - f.inv2) <= 1e-4 ? "2" : "1");
  } else if (f.maker == "PHILIPS") {
    const std::string& seq = f.sequence_variant;
    const auto& ss = f.scanning_sequence;
    if ((f.frames_per_file < 4 && f.files < 4) || f.localizer) {
      type = "discard", modality = "localizer";
    } else if (contains(seq, "MP")) {
      type = "anat", modality = "T1w";
    } else if (f.diffusion && contains(seq, "SK") && contains(ss, "SE")) {
      type = "dwi", modality = "dwi";
    } else if (contains(f.image_type, "PERFUSION")) {
      type = "perf", modality = "asl";
    } else if (contains(f.pulse_sequence_name, "SEEPI") && !f.diffusion && contains(seq, "SK") && contains(ss, "SE")) {
      add_run = false, type = "fmap", modality = "epi", dir_label = true;
    } else if (!f.diffusion && contains(seq, "SK") && contains(ss, "SE")) {
      type = "anat", modality = f.te_ms < 40 ? "PDw" : "T2w";
    } else if (contains(seq, "SK") && contains(ss, "IR")) {
      type = "anat", modality = "FLAIR";
    } else if (contains(f.pulse_sequence_name, "FEEPI") && contains(seq, "SK") && contains(ss, "GR")) {
      type = "func", modality = "bold", dir_label = true;
    } else if (contains(seq, "SS") && contains(ss, "GR")) {
      type = "anat", modality = "T2starw", part = true;
    } else if (f.phase_map_hz && contains(seq, "SS") && contains(ss, "RM")) {
      report_echo = false, type = "fmap", modality = f.real ? "fieldmap" : "magnitude";
    } else if (contains(seq, "SP") && contains(ss, "GR")) {
      report_echo = false, type = "fmap";
      if (f.phase) modality = "phasediff";
      else if (f.echo_train_length < 2) modality = "magnitude" + std::to_string(f.echo);
      if (f.echo_train_length > 1) {
        const std::string n = std::to_string(f.echo);
        modality = f.phase ? "phase" + n : f.imaginary ? "imaginary" + n : f.real ? "real" + n : "magnitude" + n;
      }
    }
    acq += alnum(seq) + alnum(ss) + alnum(f.pulse_sequence_name);
    if (f.trigger_delay_ms > 1) acq += letter_number('t', std::lround(f.trigger_delay_ms));
    if (f.accel_pe > 1) acq += letter_number('p', std::lround(10 * f.accel_pe));
    if (f.multiband > 1) acq += letter_number('m', f.multiband);
    suffix = acq;
    if (add_run) suffix += "_run-" + std::to_string(f.series_number);
    if (report_echo && (f.echo > 1 || (f.multi_echo && f.echo > 0))) suffix += "_echo-" + std::to_string(f.echo);
    // Philips DICOM gives no phase encoding polarity: dcm2niix writes no _dir for it either.
    (void)dir_label;
  } else {
    return std::nullopt;
  }
  if (part) {
    if (f.phase) suffix += "_part-phase";
    if (f.magnitude) suffix += "_part-mag";
  }
  if (!modality.empty()) suffix += "_" + modality;
  if (derived) type = "derived";
  if (type.empty()) return std::nullopt;
  return std::pair<std::string, std::string>{type, suffix};
}

}  // namespace voxpipe::cli::sidecar
