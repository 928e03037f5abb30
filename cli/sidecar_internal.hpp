// What the files of the BIDS JSON sidecar share (series_sidecar.cpp the sidecar and its later
// keys, sidecar_standard.cpp the keys from the standard and enhanced tags, sidecar_siemens.cpp
// Siemens' CSA and Phoenix protocol, sidecar_slice_timing.cpp SliceTiming, sidecar_bids_guess.cpp
// PulseSequenceType and BidsGuess): the tags read, the JSON object the keys are written into
// and what the keys written first found. Internal to the sidecar.
#pragma once

#include <cctype>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli_common.hpp"
#include "dicom/csa.hpp"
#include "series_nifti.hpp"
#include "voxpipe/dicom.hpp"

namespace voxpipe::cli::sidecar {

constexpr DicomTag kImageType = dicom_tag(0x0008, 0x0008);
constexpr DicomTag kAcquisitionDate = dicom_tag(0x0008, 0x0022);
constexpr DicomTag kAcquisitionDateTime = dicom_tag(0x0008, 0x002A);
constexpr DicomTag kAcquisitionTime = dicom_tag(0x0008, 0x0032);
constexpr DicomTag kModality = dicom_tag(0x0008, 0x0060);
constexpr DicomTag kManufacturer = dicom_tag(0x0008, 0x0070);
constexpr DicomTag kInstitutionName = dicom_tag(0x0008, 0x0080);
constexpr DicomTag kInstitutionAddress = dicom_tag(0x0008, 0x0081);
constexpr DicomTag kStationName = dicom_tag(0x0008, 0x1010);
constexpr DicomTag kStudyDescription = dicom_tag(0x0008, 0x1030);
constexpr DicomTag kSeriesDescription = dicom_tag(0x0008, 0x103E);
constexpr DicomTag kInstitutionalDepartmentName = dicom_tag(0x0008, 0x1040);
constexpr DicomTag kManufacturerModelName = dicom_tag(0x0008, 0x1090);
constexpr DicomTag kBodyPartExamined = dicom_tag(0x0018, 0x0015);
constexpr DicomTag kScanningSequence = dicom_tag(0x0018, 0x0020);
constexpr DicomTag kSequenceVariant = dicom_tag(0x0018, 0x0021);
constexpr DicomTag kScanOptions = dicom_tag(0x0018, 0x0022);
constexpr DicomTag kMRAcquisitionType = dicom_tag(0x0018, 0x0023);
constexpr DicomTag kSequenceName = dicom_tag(0x0018, 0x0024);
constexpr DicomTag kSliceThickness = dicom_tag(0x0018, 0x0050);
constexpr DicomTag kRepetitionTime = dicom_tag(0x0018, 0x0080);
constexpr DicomTag kEchoTime = dicom_tag(0x0018, 0x0081);
constexpr DicomTag kInversionTime = dicom_tag(0x0018, 0x0082);
constexpr DicomTag kNumberOfAverages = dicom_tag(0x0018, 0x0083);
constexpr DicomTag kImagingFrequency = dicom_tag(0x0018, 0x0084);
constexpr DicomTag kEchoNumbers = dicom_tag(0x0018, 0x0086);
constexpr DicomTag kMagneticFieldStrength = dicom_tag(0x0018, 0x0087);
constexpr DicomTag kSpacingBetweenSlices = dicom_tag(0x0018, 0x0088);
constexpr DicomTag kPhaseEncodingSteps = dicom_tag(0x0018, 0x0089);
constexpr DicomTag kEchoTrainLength = dicom_tag(0x0018, 0x0091);
constexpr DicomTag kPercentSampling = dicom_tag(0x0018, 0x0093);
constexpr DicomTag kPercentPhaseFieldOfView = dicom_tag(0x0018, 0x0094);
constexpr DicomTag kPixelBandwidth = dicom_tag(0x0018, 0x0095);
constexpr DicomTag kDeviceSerialNumber = dicom_tag(0x0018, 0x1000);
constexpr DicomTag kSoftwareVersions = dicom_tag(0x0018, 0x1020);
constexpr DicomTag kProtocolName = dicom_tag(0x0018, 0x1030);
constexpr DicomTag kReceiveCoilName = dicom_tag(0x0018, 0x1250);
constexpr DicomTag kAcquisitionMatrix = dicom_tag(0x0018, 0x1310);
constexpr DicomTag kInPlanePhaseEncodingDirection = dicom_tag(0x0018, 0x1312);
constexpr DicomTag kFlipAngle = dicom_tag(0x0018, 0x1314);
constexpr DicomTag kSAR = dicom_tag(0x0018, 0x1316);
constexpr DicomTag kPatientPosition = dicom_tag(0x0018, 0x5100);
constexpr DicomTag kPulseSequenceName = dicom_tag(0x0018, 0x9005);
constexpr DicomTag kSpoiling = dicom_tag(0x0018, 0x9016);
constexpr DicomTag kMagnetizationTransfer = dicom_tag(0x0018, 0x9020);
constexpr DicomTag kFrequencyEncodingSteps = dicom_tag(0x0018, 0x9058);
constexpr DicomTag kParallelReductionFactorInPlane = dicom_tag(0x0018, 0x9069);
constexpr DicomTag kAcquisitionDuration = dicom_tag(0x0018, 0x9073);
constexpr DicomTag kParallelAcquisitionTechnique = dicom_tag(0x0018, 0x9078);
constexpr DicomTag kEffectiveEchoTime = dicom_tag(0x0018, 0x9082);
constexpr DicomTag kNumberOfKSpaceTrajectories = dicom_tag(0x0018, 0x9093);
constexpr DicomTag kParallelReductionFactorOutOfPlane = dicom_tag(0x0018, 0x9155);
constexpr DicomTag kPhaseEncodingStepsInPlane = dicom_tag(0x0018, 0x9231);
constexpr DicomTag kPhaseEncodingStepsOutOfPlane = dicom_tag(0x0018, 0x9232);
constexpr DicomTag kSARValue = dicom_tag(0x0018, 0x9181);
constexpr DicomTag kDwellTimeSiemens = dicom_tag(0x0019, 0x1018);  // IS, ns
constexpr DicomTag kBandwidthPerPixelPhaseEncode = dicom_tag(0x0019, 0x1028);
constexpr DicomTag kSeriesInstanceUID = dicom_tag(0x0020, 0x000E);
constexpr DicomTag kSeriesNumber = dicom_tag(0x0020, 0x0011);
constexpr DicomTag kAcquisitionNumber = dicom_tag(0x0020, 0x0012);
constexpr DicomTag kImageOrientationPatient = dicom_tag(0x0020, 0x0037);
constexpr DicomTag kImageComments = dicom_tag(0x0020, 0x4000);
constexpr DicomTag kPixelSpacing = dicom_tag(0x0028, 0x0030);
constexpr DicomTag kProcedureStepDescription = dicom_tag(0x0040, 0x0254);
constexpr DicomTag kImageOrientationTextSiemens = dicom_tag(0x0051, 0x100E);
constexpr DicomTag kCoilSiemens = dicom_tag(0x0051, 0x100F);
constexpr DicomTag kPATModeTextSiemens = dicom_tag(0x0051, 0x1011);
constexpr DicomTag kWaterFatShiftPhilips = dicom_tag(0x2001, 0x1022);
constexpr DicomTag kMediaStorageSOPClassUID = dicom_tag(0x0002, 0x0002);
constexpr DicomTag kExposureTime = dicom_tag(0x0018, 0x1150);    // IS, ms
constexpr DicomTag kXRayTubeCurrent = dicom_tag(0x0018, 0x1151);  // IS, mA
constexpr DicomTag kExposure = dicom_tag(0x0018, 0x1152);         // IS, mAs
constexpr DicomTag kConvolutionKernel = dicom_tag(0x0018, 0x1210);

class JsonObject {
 public:
  void raw(const std::string& key, const std::string& value) {
    text_ += (text_.empty() ? "{\n" : ",\n") + std::string("  ") + json_str(key) + ": " + value;
  }
  void str(const std::string& key, const std::optional<std::string>& v) {
    if (v && !v->empty()) raw(key, json_str(*v));
  }
  void num(const std::string& key, const std::optional<double>& v) {
    if (v && std::isfinite(*v)) raw(key, shortest(*v));
  }
  // dcm2niix's json_Float: written only when positive.
  void pos(const std::string& key, const std::optional<double>& v) {
    if (v && std::isfinite(*v) && *v > 0) raw(key, shortest(*v));
  }
  void boolean(const std::string& key, bool v) { raw(key, v ? "true" : "false"); }
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

inline std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

inline bool contains(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

// ---- Siemens (sidecar_siemens.cpp).

// A Phoenix protocol value as a number: decimal, or hexadecimal "0x..".
std::optional<double> phoenix_number(const std::map<std::string, std::string>& p, const std::string& key);

// The entry `key` of a Phoenix protocol as text, else the first whose key ends in "." + key
// (dcm2niix finds the text anywhere: "sCoilElementID.tCoilID" is
// "asCoilSelectMeas[0].asList[0].sCoilElementID.tCoilID"); nullopt when missing or empty.
std::optional<std::string> phoenix_string(const std::map<std::string, std::string>& p, const std::string& key);

// Siemens writes characters outside [A-Za-z0-9] of Phoenix text values in UTF-7 ("ax+AF8-asc"
// for "ax_asc"); dcm2niix writes them decoded. "+...-" runs of modified base64 are UTF-16BE code
// units; "+-" is "+". Written as UTF-8; text that is not valid UTF-7 is kept as it is.
std::string utf7_decode(const std::string& v);

// Whether Manufacturer names Siemens.
bool is_siemens(const SeriesMeta& m);

// The CSA header of `kind` of the series' first file; nullopt when missing or malformed.
std::optional<dicom::CsaHeader> csa_of(const DicomSeries& s, dicom::CsaKind kind);

// The keys dcm2niix reads from the Phoenix protocol (Siemens' MrPhoenixProtocol), in its order:
// EchoTime1/2 (for a `phase` image), PartialFourier ... MatrixCoilMode; `coil_name` is the
// coil's DICOM name (CoilString when the protocol's elements differ). The protocol's
// acceleration (sPat.lAccelFact3D, sPat.lAccelFactPE) replaces `accel_oop` and `accel_pe`;
// `phase_oversampling` is set from sKSpace.dPhaseOversamplingForDialog.
void write_phoenix_keys(JsonObject& j, const std::map<std::string, std::string>& phoenix,
                        bool phase, bool mr, bool diffusion,
                        const std::optional<std::string>& coil_name, double& accel_pe,
                        double& accel_oop, double& phase_oversampling);

// ---- PulseSequenceType and BidsGuess (sidecar_bids_guess.cpp).

// BIDS's PulseSequenceType as dcm2niix v1.0.20260724 writes it for an MR series. Its source
// was not at hand: the rules are those its outputs show on every combination tried (pydicom-made
// files through the binary), for any vendor: ScanningSequence is searched as text, the
// SequenceVariant values are matched whole ("OSP" is not "SP").
//   EP:  "Spin Echo EPI" with SE, else "Gradient Echo EPI"; "Multiband " before either for a
//        multiband factor above 1;
//   GR:  "MPRAGE" with IR and the variant MP, else "Spoiled Gradient Echo" with SP, else
//        "Gradient Echo" (GR before SE: "SE\GR" is "Gradient Echo");
//   SE:  "Inversion Recovery Spin Echo" with IR, else "Spin Echo";
//   anything else (IR alone, RM): none.
std::optional<std::string> pulse_sequence_type(const std::string& scanning,
                                               const std::vector<std::string>& variant,
                                               int multiband);

// What dcm2niix's BidsGuess reads of a series (its TDICOMdata fields).
struct BidsFacts {
  std::string modality, maker;  // DICOM Modality; "SIEMENS", "PHILIPS", "GE" or ""
  std::string image_type;       // ImageType joined by '_' ("ORIGINAL_PRIMARY_M_ND_MOSAIC")
  std::string sequence_name, pulse_sequence_name, sequence_details;  // (0018,0024), (0018,9005), Phoenix tSequenceFileName
  std::string scanning_sequence, sequence_variant;  // joined by '\'
  std::string series_description, protocol_name, image_comments;
  std::int64_t series_number = 0;
  int echo = 0;
  bool multi_echo = false, derived = false, localizer = false, diffusion = false;
  bool phase = false, magnitude = false, real = false, imaginary = false, phase_map_hz = false;
  std::uint64_t frames_per_file = 1, files = 1;  // dcm2niix's xyzDim[3] and nConvert
  double accel_pe = 0, te_ms = 0, ti_ms = 0, trigger_delay_ms = 0;
  int multiband = 0, echo_train_length = 0;
  char pe_rc = '?';            // InPlanePhaseEncodingDirection: 'R'ow, 'C'olumn
  int pe_positive = -1;        // CSA PhaseEncodingDirectionPositive (-1: unknown)
  double inv1 = NAN, inv2 = NAN;  // Phoenix alTI[0], alTI[1] (ms)
  int contrasts = 0, inv_contrasts = 0;  // Phoenix lContrasts, lInvContrasts
};

// dcm2niix's BidsGuess: [data type, entities and suffix], from its setBids (nii_dicom_batch.cpp,
// setBidsSiemens, setBidsPhilips): the same rules, here for CT ("ct", "_ct", as v1.0.20260724
// writes them) and Siemens and Philips MR. Not covered (nothing is written): GE (setBidsGE),
// PET, MR of other or unnamed vendors (which v1.0.20260724 guesses by rules not at hand), and
// the MR spectroscopy guesses.
std::optional<std::pair<std::string, std::string>> bids_guess(const BidsFacts& f);

// ---- The keys from the standard and enhanced tags (sidecar_standard.cpp).

// What write_standard_keys read and found that the keys after them use.
struct StandardKeys {
  bool siemens = false, philips = false, mr = false, is3d = false;
  std::string maker;  // Manufacturer, upper case
  std::optional<std::string> modality, protocol, sequence_variant;
  std::optional<dicom::CsaHeader> csa_image;
  std::map<std::string, std::string> phoenix;
  std::vector<std::string> image_type;  // the top level's ImageType
  std::vector<double> slice_timing;     // series_slice_timing
  int multiband = 0;                    // the multiband factor (0: unknown)
  double pat_accel_pe = 0;              // Siemens' "p2s3" text's in-plane acceleration
  std::optional<double> te;             // EchoTime, else EffectiveEchoTime (ms)
};

// Writes the sidecar's keys from Modality to FlipAngle into `j` for series `s` (`m` its first
// file's values, `plan` how its values are scaled).
StandardKeys write_standard_keys(JsonObject& j, const DicomSeries& s, const SeriesMeta& m,
                                 const SeriesPlan& plan);

}  // namespace voxpipe::cli::sidecar
