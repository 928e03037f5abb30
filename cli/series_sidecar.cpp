// The BIDS JSON sidecar `voxpipe dcm2nii` writes beside a series' NIfTI image (series_nifti.hpp):
// the keys dcm2niix writes for an MR series, in its order and with its values, read from the
// first file's standard tags (or its enhanced functional groups, SeriesMeta), Siemens' CSA image
// header and Phoenix protocol (dicom/csa.hpp) and Philips' private tags, then voxpipe's own keys.
// Where each value comes from follows dcm2niix (nii_dicom_batch.cpp nii_SaveBIDSX, nii_dicom.cpp);
// the differences are listed in docs/dicom.md "JSON sidecar".
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <span>
#include <utility>

#include "cli_common.hpp"
#include "dicom/csa.hpp"
#include "series_nifti.hpp"
#include "voxpipe/dicom.hpp"

namespace voxpipe::cli {

namespace {

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

// Milliseconds to seconds; divided, not multiplied by 1e-3, so that 2300 gives 2.3, not
// 2.3000000000000003.
std::optional<double> seconds(std::optional<double> ms) {
  if (ms) *ms /= 1000.0;
  return ms;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
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
  if (tm->find(':') == std::string::npos) {
    // dcm2niix reads HHMMSS.FFFFFF as one number and prints it rounded to 10 us ("%.5f"), then
    // the seconds with 6 decimals: 141127.937501 is "14:11:27.937500".
    char buf[32];
    std::snprintf(buf, sizeof buf, "%012.5f", std::strtod(tm->c_str(), nullptr));
    const std::string b(buf);
    if (b.size() == 12 && b[6] == '.') {
      char out[32];
      std::snprintf(out, sizeof out, "%s:%s:%09.6f", b.substr(0, 2).c_str(), b.substr(2, 2).c_str(),
                    std::strtod(b.c_str() + 4, nullptr));
      return std::string(out);
    }
  }
  frac.resize(6, '0');
  return digits.substr(0, 2) + ":" + digits.substr(2, 2) + ":" + digits.substr(4, 2) + "." + frac;
}

// The vendor as dcm2niix names it ("Siemens", "GE", "Philips", ...); the DICOM value when it
// knows none of them (dcm2niix writes no Manufacturer then).
std::optional<std::string> vendor(const std::optional<std::string>& m) {
  if (!m) return m;
  const std::string u = upper(*m);
  static const std::pair<const char*, const char*> kNames[] = {
      {"SIEMENS", "Siemens"}, {"PHILIPS", "Philips"}, {"TOSHIBA", "Toshiba"}, {"CANON", "Canon"},
      {"HITACHI", "Hitachi"}, {"BRUKER", "Bruker"},   {"MEDISO", "Mediso"},   {"UIH", "UIH"},
      {"UNITED IMAGING", "UIH"}, {"MRSOLUTIONS", "MRSolutions"}, {"HYPERFINE", "Hyperfine"}};
  for (const auto& [key, name] : kNames)
    if (u.find(key) != std::string::npos) return std::string(name);
  if (u.rfind("GE", 0) == 0) return std::string("GE");
  return m;
}

// A Phoenix protocol value as a number: decimal, or hexadecimal "0x..".
std::optional<double> phoenix_number(const std::map<std::string, std::string>& p, const std::string& key) {
  const auto it = p.find(key);
  if (it == p.end() || it->second.empty()) return std::nullopt;
  const std::string& v = it->second;
  char* end = nullptr;
  double d;
  if (v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X'))
    d = static_cast<double>(std::strtoll(v.c_str() + 2, &end, 16));
  else
    d = std::strtod(v.c_str(), &end);
  if (end == v.c_str()) return std::nullopt;
  return d;
}

// The entry `key`, else the first whose key ends in "." + key (dcm2niix finds the text anywhere:
// "sCoilElementID.tCoilID" is "asCoilSelectMeas[0].asList[0].sCoilElementID.tCoilID").
std::map<std::string, std::string>::const_iterator phoenix_find(const std::map<std::string, std::string>& p,
                                                                const std::string& key) {
  auto it = p.find(key);
  if (it != p.end()) return it;
  const std::string tail = "." + key;
  for (it = p.begin(); it != p.end(); ++it)
    if (it->first.size() > tail.size() && it->first.compare(it->first.size() - tail.size(), tail.size(), tail) == 0)
      return it;
  return p.end();
}

std::optional<std::string> phoenix_string(const std::map<std::string, std::string>& p, const std::string& key) {
  const auto it = phoenix_find(p, key);
  if (it == p.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

// CRC-32 (zlib's polynomial) of `v`: dcm2niix's SeriesNumber for a file without one.
std::uint32_t crc32_of(std::string_view v) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : v) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return c ^ 0xFFFFFFFFu;
}

// DICOM's Modality as dcm2niix writes it: the modalities it knows by their first two characters
// (the second in either case: "CTX" is "CT", "SEG" is "SE"); the value as stored for the others,
// of which dcm2niix writes none (docs/dicom.md "JSON sidecar").
std::optional<std::string> bids_modality(const std::optional<std::string>& v) {
  if (!v || v->size() < 2) return v;
  const char a = (*v)[0];
  const char b = static_cast<char>(std::toupper(static_cast<unsigned char>((*v)[1])));
  static const char* kKnown[][2] = {{"CR", "CR"}, {"CT", "CT"}, {"MR", "MR"}, {"PT", "PT"}, {"US", "US"}, {"SE", "SEG"}};
  for (const auto& [prefix, name] : kKnown)
    if (a == prefix[0] && b == prefix[1]) return std::string(name);
  return v;
}

// An integer string (IS) as dcm2niix reads it: the leading integer ("1601.7" is 1601), 0 for none.
long long leading_integer(const std::optional<std::string>& v) {
  return v ? std::strtoll(v->c_str(), nullptr, 10) : 0;
}

bool is_siemens(const SeriesMeta& m) {
  return upper(m.str(kManufacturer).value_or("")).find("SIEMENS") != std::string::npos;
}

std::optional<dicom::CsaHeader> csa_of(const DicomSeries& s, dicom::CsaKind kind) {
  try {
    return dicom::series_csa_header(s, kind);
  } catch (const Error&) {
    return std::nullopt;  // a malformed CSA header leaves its keys out, as a malformed tag
  }
}

}  // namespace

namespace {

// A mosaic volume's MosaicRefAcqTimes (ms, as stored) by tile, in the series' slice order, from
// the CSA image header of the file of image `first` (the volume's first slice); empty when
// missing or short.
std::vector<double> mosaic_times(const DicomSeries& s, std::size_t first) {
  if (first + s.slices > s.images.size()) return {};
  const DicomSlice& im = s.images[first];
  if (!im.file) return {};
  std::optional<dicom::CsaHeader> csa;
  try {
    if (im.file == s.images.front().file) {
      csa = dicom::series_csa_header(s, dicom::CsaKind::image);
    } else {
      // The scan keeps only the tags it needs: the file is read again in full.
      const DicomFile full = im.buffer ? parse_dicom(im.buffer->bytes, im.file->path) : read_dicom(im.file->path);
      std::span<const std::uint8_t> bytes;
      if (im.buffer) bytes = im.buffer->bytes;
      csa = dicom::csa_header(full.dataset, dicom::CsaKind::image, full.path, bytes,
                              full.offsets_in_inflated_stream);
    }
  } catch (const Error&) {
    return {};
  }
  if (!csa) return {};
  const std::vector<double> ref = csa->numbers("MosaicRefAcqTimes");
  if (ref.size() < 2) return {};
  std::vector<double> t;
  for (std::uint64_t k = 0; k < s.slices; ++k) {
    const std::uint32_t tile = s.images[first + k].tile;
    if (tile >= ref.size()) return {};
    t.push_back(ref[tile]);
  }
  return t;
}


// Siemens writes characters outside [A-Za-z0-9] of Phoenix text values in UTF-7 ("ax+AF8-asc"
// for "ax_asc"); dcm2niix writes them decoded. "+...-" runs of modified base64 are UTF-16BE code
// units; "+-" is "+". Written as UTF-8; text that is not valid UTF-7 is kept as it is.
std::string utf7_decode(const std::string& v) {
  const auto b64 = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] != '+') {
      out += v[i];
      continue;
    }
    std::size_t j = i + 1;
    if (j < v.size() && v[j] == '-') {
      out += '+';
      i = j;
      continue;
    }
    std::uint32_t bits = 0;
    int nbits = 0;
    std::string run;
    bool ok = false;
    for (; j < v.size(); ++j) {
      const int d = b64(v[j]);
      if (d < 0) break;
      bits = (bits << 6) | static_cast<std::uint32_t>(d);
      nbits += 6;
      if (nbits >= 16) {
        nbits -= 16;
        const std::uint32_t u = (bits >> nbits) & 0xFFFF;
        ok = true;
        if (u < 0x80) {
          run += static_cast<char>(u);
        } else if (u < 0x800) {
          run += static_cast<char>(0xC0 | (u >> 6));
          run += static_cast<char>(0x80 | (u & 0x3F));
        } else {
          run += static_cast<char>(0xE0 | (u >> 12));
          run += static_cast<char>(0x80 | ((u >> 6) & 0x3F));
          run += static_cast<char>(0x80 | (u & 0x3F));
        }
      }
    }
    if (!ok || (bits & ((1u << nbits) - 1)) != 0) {  // not UTF-7: the text as it is
      out += v[i];
      continue;
    }
    out += run;
    i = (j < v.size() && v[j] == '-') ? j : j - 1;
  }
  return out;
}

// The last value of `tag` met in file order, at any depth (dcm2niix reads nested elements as
// if they were at the top level, a later one replacing an earlier one).
std::optional<double> last_nested_number(const DicomDataset& ds, DicomTag tag) {
  std::optional<double> found;
  for (const DicomElement& e : ds.elements()) {
    for (const DicomDataset& item : e.items)
      if (const auto v = last_nested_number(item, tag)) found = v;
    if (e.tag == tag) {
      try {
        if (const auto v = ds.number(tag)) found = v;
      } catch (const Error&) {
      }
    }
  }
  return found;
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

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

// The alphanumeric characters of `v`.
std::string alnum(std::string_view v) {
  std::string o;
  for (char c : v)
    if (std::isalnum(static_cast<unsigned char>(c))) o += c;
  return o;
}

// dcm2niix's BidsGuess: [data type, entities and suffix], from its setBids (nii_dicom_batch.cpp,
// setBidsSiemens, setBidsPhilips): the same rules, here for CT ("ct", "_ct", as v1.0.20260724
// writes them) and Siemens and Philips MR. Not covered (nothing is written): GE (setBidsGE),
// PET, MR of other or unnamed vendors (which v1.0.20260724 guesses by rules not at hand), and
// the MR spectroscopy guesses.
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
    if (f.accel_pe > 1) acq += "p" + std::to_string(static_cast<int>(std::lround(f.accel_pe)));
    if (f.multiband > 1) acq += "m" + std::to_string(f.multiband);
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
    if (f.trigger_delay_ms > 1) acq += "t" + std::to_string(static_cast<int>(std::lround(f.trigger_delay_ms)));
    if (f.accel_pe > 1) acq += "p" + std::to_string(static_cast<int>(std::lround(10 * f.accel_pe)));
    if (f.multiband > 1) acq += "m" + std::to_string(f.multiband);
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

}  // namespace

// dcm2niix's rules (nii_dicom_batch.cpp sliceTimingCore: sliceTimingSiemens2D, checkSliceTiming),
// for Siemens; dcm2niix reads none from Philips, and GE's and UIH's own sources are not read here.
std::vector<double> series_slice_timing(const DicomSeries& s) {
  const SeriesMeta m(s);
  if (s.slices < 2 || s.images.size() < s.slices) return {};
  const auto acq = m.str(kMRAcquisitionType);
  if (acq && upper(*acq) == "3D") return {};
  if (!is_siemens(m)) return {};
  std::vector<double> t;
  if (s.images.front().tile_grid > 0) {
    // Mosaic: each tile's time from the CSA image header, by tile (ms). dcm2niix compares the
    // first volume's range with the second's (a CMRR sequence can write bogus times into the
    // first volume, dcm2niix issue 870): when they differ and the second's are valid (not
    // negative, spread, within a TR) the second volume's times are used.
    t = mosaic_times(s, 0);
    if (t.empty()) return {};
    const auto tr = m.num(kRepetitionTime).value_or(0);
    const auto [lo0, hi0] = std::minmax_element(t.begin(), t.end());
    const double min0 = *lo0, max0 = *hi0;
    std::vector<double> t1 = s.volumes > 1 ? mosaic_times(s, s.slices) : std::vector<double>{};
    bool second_differs = false;
    double min1 = -1, max1 = -1;
    if (!t1.empty()) {
      const auto [lo1, hi1] = std::minmax_element(t1.begin(), t1.end());
      min1 = *lo1;
      max1 = *hi1;
      second_differs = std::fabs((max0 - min0) - (max1 - min1)) > 1e-4;
    }
    const auto description = m.str(kSeriesDescription).value_or("");
    const bool fine = (min0 != max0 && max0 <= tr && !second_differs) ||
                      description.find("SBRef") != std::string::npos || t1.empty();
    if (!fine && min1 >= 0 && min1 < max1 && max1 - min1 <= tr) {
      for (double& v : t1) v -= min1;
      t = t1;
    }
    const double lo = *std::min_element(t.begin(), t.end());
    for (double& v : t) v = (v - lo) / 1000.0;
  } else {
    // Single-slice files (each file one image, as dcm2niix requires): the first volume's
    // AcquisitionTimes, seconds from the earliest, a volume that crosses midnight unwrapped (a
    // span over 12 hours: the times after noon are a day earlier). No check against the TR, as
    // dcm2niix.
    std::set<const DicomFile*> files;
    for (const DicomSlice& im : s.images) files.insert(im.file.get());
    if (files.size() != s.images.size()) return {};
    for (std::uint64_t k = 0; k < s.slices; ++k) t.push_back(s.images[k].acquisition_time);
    double lo = *std::min_element(t.begin(), t.end());
    const double hi = *std::max_element(t.begin(), t.end());
    if (hi - lo > 43200) {
      for (double& v : t)
        if (v > 43200) v -= 86400;
      lo = *std::min_element(t.begin(), t.end());
    }
    for (double& v : t) v = std::round((v - lo) * 1e6) / 1e6;
  }
  // Times all equal: none (dcm2niix).
  if (std::all_of(t.begin(), t.end(), [&](double v) { return std::fabs(v - t.front()) <= 1e-7; })) return {};
  return t;
}

std::string series_sidecar(const DicomSeries& s, const SeriesPlan& plan,
                           const std::vector<std::string>& warnings, const SeriesFrame& frame) {
  const SeriesMeta m(s);
  const bool siemens = is_siemens(m);
  const std::string maker = upper(m.str(kManufacturer).value_or(""));
  const bool philips = maker.find("PHILIPS") != std::string::npos;
  const auto modality = bids_modality(m.str(kModality));
  const bool mr = modality && *modality == "MR";
  const std::optional<dicom::CsaHeader> csa_image =
      siemens ? csa_of(s, dicom::CsaKind::image) : std::nullopt;
  std::map<std::string, std::string> phoenix;
  if (siemens) {
    try {
      phoenix = dicom::series_phoenix_protocol(s);
    } catch (const Error&) {
    }
  }
  const auto acq_type = m.str(kMRAcquisitionType);
  const bool is2d = acq_type && upper(*acq_type) == "2D";
  const bool is3d = acq_type && upper(*acq_type) == "3D";
  // The top level's ImageType (a Philips enhanced file has others, per frame, in private items).
  std::vector<std::string> image_type;
  try {
    image_type = m.dataset().strings(kImageType);
  } catch (const Error&) {
  }
  const auto has_type = [&](std::string_view v) {
    return std::find(image_type.begin(), image_type.end(), v) != image_type.end();
  };
  const std::uint64_t dim1 = s.columns, dim2 = s.rows;
  // ImageType as dcm2niix reads it: the values joined by '_' (and split at '_' again when
  // written: "CT_SOM5 SPI" is two values).
  std::string image_type_text;
  for (std::size_t i = 0; i < image_type.size(); ++i) image_type_text += (i ? "_" : "") + image_type[i];
  // An X-ray series (CT, CR, ...): dcm2niix takes Exposure (0018,1152) for the echo time when the
  // file has no EchoTime, and then writes it as XRayExposure, and no SliceThickness,
  // SpacingBetweenSlices or EchoTime.
  const auto echo_time_tag = m.num(kEchoTime);
  const bool xray = m.find(kExposure) != nullptr && !(echo_time_tag && *echo_time_tag != 0);
  // The protocol as dcm2niix names it: ProtocolName, else a SeriesDescription of two characters
  // or more, else (but for Siemens, whose SequenceName changes within a series) a SequenceName
  // of two or more; "_MoCo" after it for Siemens' motion-corrected series; a Siemens file with
  // none of them (anonymised) gets the Phoenix protocol's tProtocolName, UTF-7 decoded
  // (dcm2niix's rescueProtocolName).
  std::optional<std::string> protocol = m.str(kProtocolName);
  if (!protocol) {
    if (const auto d = m.str(kSeriesDescription); d && d->size() > 1) protocol = d;
  }
  if (protocol && protocol->size() > 1 && image_type_text.size() > 5 && contains(image_type_text, "_MOCO_"))
    *protocol += "_MoCo";
  if (!protocol && !siemens) {
    if (const auto q = m.str(kSequenceName); q && q->size() > 1) protocol = q;
  }

  JsonObject j;
  j.str("Modality", modality);
  j.pos("MagneticFieldStrength", m.num(kMagneticFieldStrength));
  if (const auto f = m.num(kImagingFrequency); f && *f > 0 && *f < 9e6) j.num("ImagingFrequency", f);
  j.str("Manufacturer", vendor(m.str(kManufacturer)));
  j.str("ManufacturersModelName", m.str(kManufacturerModelName));
  j.str("InstitutionName", m.str(kInstitutionName));
  // dcm2niix writes "None" when the file has no department (a literal of its JSON writer).
  j.str("InstitutionalDepartmentName", m.str(kInstitutionalDepartmentName).value_or("None"));
  j.str("InstitutionAddress", m.str(kInstitutionAddress));
  j.str("DeviceSerialNumber", m.str(kDeviceSerialNumber));
  j.str("StationName", m.str(kStationName));
  j.str("BodyPart", m.str(kBodyPartExamined));
  j.str("PatientPosition", m.str(kPatientPosition));
  j.str("ProcedureStepDescription", m.str(kProcedureStepDescription));
  {
    // Multi-valued as dcm2niix writes it: the values joined by a backslash.
    const std::vector<std::string> v = m.strs(kSoftwareVersions);
    std::string joined;
    for (std::size_t i = 0; i < v.size(); ++i) joined += (i ? "\\" : "") + v[i];
    j.str("SoftwareVersions", joined);
  }
  if (is2d) j.str("MRAcquisitionType", std::string("2D"));
  if (is3d) j.str("MRAcquisitionType", std::string("3D"));
  j.str("StudyDescription", m.str(kStudyDescription));
  j.str("SeriesDescription", m.str(kSeriesDescription));
  if (!protocol && siemens) {
    if (const auto p = phoenix_string(phoenix, "tProtocolName")) protocol = utf7_decode(*p);
  }
  j.str("ProtocolName", protocol);
  const auto joined = [&](DicomTag t) -> std::optional<std::string> {
    const std::vector<std::string> v = m.strs(t);
    if (v.empty()) return std::nullopt;
    std::string o;
    for (std::size_t i = 0; i < v.size(); ++i) o += (i ? "\\" : "") + v[i];
    return o;
  };
  const auto sequence_variant = joined(kSequenceVariant);
  j.str("ScanningSequence", joined(kScanningSequence));
  j.str("SequenceVariant", sequence_variant);
  // The multiband factor: Siemens' "p2s3" text (0051,1011), else the count of slices sharing the
  // first time (dcm2niix's CSA multiBandFactor).
  int multiband = 0;
  double pat_accel_pe = 0;
  const std::vector<double> slice_timing = series_slice_timing(s);
  if (siemens) {
    if (const auto pat = m.str(kPATModeTextSiemens)) {
      const auto digits_after = [&](char key) {
        const std::size_t at = pat->find(key);
        if (at == std::string::npos) return 0.0;
        return std::atof(pat->c_str() + at + 1);
      };
      pat_accel_pe = digits_after('p');
      multiband = static_cast<int>(digits_after('s'));
    }
    if (mr && slice_timing.size() > 1) {
      int zeros = 0;
      for (double t : slice_timing) zeros += t == 0;
      if (multiband < 2 && zeros > 1 && static_cast<std::size_t>(zeros) < slice_timing.size())
        multiband = zeros;
    }
  }
  if (mr) j.str("PulseSequenceType", pulse_sequence_type(joined(kScanningSequence).value_or(""), m.strs(kSequenceVariant), multiband));
  j.str("ScanOptions", joined(kScanOptions));
  // dcm2niix writes an enhanced file's PulseSequenceName (0018,9005) as its SequenceName.
  auto sequence_name = m.str(kSequenceName);
  if (!sequence_name) sequence_name = m.str(kPulseSequenceName);
  j.str("SequenceName", sequence_name);
  if (!image_type_text.empty()) {
    // dcm2niix appends the image's complex component when ImageType does not spell it out
    // (Siemens' M/P/R/I, an enhanced file's ComplexImageComponent).
    // dcm2niix writes the '_'-joined text split at each run of '_': empty values are left out
    // but a leading one, and a value holding '_' is split ("CT_SOM5 SPI" is "CT", "SOM5 SPI").
    std::vector<std::string> t;
    {
      bool sep = false;
      std::string cur;
      for (char c : image_type_text) {
        if (c == '_') {
          sep = true;
          continue;
        }
        if (sep) t.push_back(std::exchange(cur, {}));
        sep = false;
        cur += c;
      }
      t.push_back(cur);
    }
    std::string component = s.image_component;
    if (component.empty()) {
      const auto cic = m.str(dicom_tag(0x0008, 0x9208));
      if (cic) component = upper(*cic);
      else if (has_type("M") || has_type("MAGNITUDE")) component = "MAGNITUDE";
    }
    if (component.empty() && has_type("P")) component = "PHASE";
    if (component.empty() && has_type("R")) component = "REAL";
    if (component.empty() && has_type("I")) component = "IMAGINARY";
    if (!component.empty() && !has_type(component)) t.push_back(component);
    j.strs("ImageType", t);
  }
  bool dis = false, nd = false;
  for (const std::string& v : image_type) {
    dis |= v.rfind("DIS2D", 0) == 0 || v.rfind("DIS3D", 0) == 0;
    nd |= v.rfind("ND", 0) == 0;
  }
  if (dis) j.boolean("NonlinearGradientCorrection", true);
  if (nd) j.boolean("NonlinearGradientCorrection", false);
  {
    // dcm2niix's derived images: DERIVED anywhere in ImageType, Siemens' ADC, TRACE(W) and FA
    // maps, segmentations, raw data and presentation states (by the file's SOP class).
    const std::string& it = image_type_text;
    bool derived = (it.size() > 6 && contains(it, "DERIVED")) ||
                   (it.size() > 5 && (contains(it, "_ADC_") || contains(it, "_TRACEW_") ||
                                      contains(it, "_TRACE_") || contains(it, "_FA_")));
    std::string sop_class;
    if (s.first_file) {
      try {
        sop_class = s.first_file->meta.string(kMediaStorageSOPClassUID).value_or("");
      } catch (const Error&) {
      }
    }
    for (const char* uid : {"1.2.840.10008.5.1.4.1.1.66", "1.2.840.10008.5.1.4.1.1.11.1", "1.3.46.670589.11.0.0.12.1",
                            "1.3.46.670589.11.0.0.12.2", "1.3.46.670589.11.0.0.12.4"})
      derived |= contains(sop_class, uid);
    if (derived) j.boolean("RawImage", false);
  }
  j.strs("DeidentificationMethod", m.strs(dicom_tag(0x0012, 0x0063)));
  {
    // The series' number; for a file with none (or one below 1), dcm2niix's: the CRC-32 of the
    // SeriesInstanceUID (none for an empty one).
    std::int64_t number = 0;
    if (m.dataset().contains(kSeriesNumber)) number = s.series_number;
    if (number < 1) number = crc32_of(m.str(kSeriesInstanceUID).value_or(""));
    if (number > 0) j.raw("SeriesNumber", std::to_string(number));
  }
  {
    // AcquisitionTime, when the date is known too (dcm2niix), or an enhanced file's
    // AcquisitionDateTime.
    std::optional<std::string> t;
    if (m.str(kAcquisitionDate)) t = m.str(kAcquisitionTime);
    if (!t) {
      if (const auto dt = m.str(kAcquisitionDateTime); dt && dt->size() >= 14) t = dt->substr(8);
    }
    j.str("AcquisitionTime", bids_time(t));
  }
  if (const auto n = m.num(kAcquisitionNumber); n && *n > 0)
    j.raw("AcquisitionNumber", std::to_string(static_cast<long long>(*n)));
  j.str("ImageComments", m.str(kImageComments));
  if (plan.philips) {
    j.num("PhilipsRescaleSlope", plan.philips->rs);
    j.num("PhilipsRescaleIntercept", plan.philips->ri);
    j.num("PhilipsScaleSlope", plan.philips->ss);
    j.raw("UsePhilipsFloatNotDisplayScaling", plan.philips->precise ? "1" : "0");
  }
  // X-ray acquisition (dcm2niix's "CT parameters", for any modality).
  j.str("ConvolutionKernel", joined(kConvolutionKernel));
  j.pos("ExposureTime", seconds(static_cast<double>(leading_integer(m.str(kExposureTime)))));
  j.pos("XRayTubeCurrent", static_cast<double>(leading_integer(m.str(kXRayTubeCurrent))));
  if (xray) j.pos("XRayExposure", m.num(kExposure));
  if (!xray) {
    // dcm2niix leaves both out for X-ray series, whose slice thickness often varies.
    j.pos("SliceThickness", m.num(kSliceThickness));
    j.pos("SpacingBetweenSlices", m.num(kSpacingBetweenSlices));
  }
  {
    auto sar = m.num(kSAR);
    if (!sar) sar = m.num(kSARValue);
    j.pos("SAR", sar);
  }
  if (csa_image) {
    const std::vector<double> tp = csa_image->numbers("ImaRelTablePosition");
    if (tp.size() >= 3) j.nums("TablePosition", {tp[0], tp[1], tp[2] == 0 ? 0.0 : -tp[2]});
  } else if (philips) {
    // Philips: the longitudinal position (2005,143C), z negated as for Siemens (dcm2niix). Its
    // "unset" value, 1.7e38, is left out (dcm2niix writes it as a position: docs/dicom.md).
    if (const auto z = last_nested_number(m.dataset(), dicom_tag(0x2005, 0x143C)); z && std::fabs(*z) < 1e37)
      j.nums("TablePosition", {0.0, 0.0, *z == 0 ? 0.0 : -*z});
  }
  if (const auto n = m.num(kNumberOfAverages); n && *n > 1) j.num("NumberOfAverages", n);
  {
    const bool multi_echo = s.split.rfind("echo", 0) == 0;
    std::int64_t echo = s.echo_number;
    if (echo == 0) echo = static_cast<std::int64_t>(m.num(kEchoNumbers).value_or(0));
    if (echo > 1 || (multi_echo && echo > 0)) j.raw("EchoNumber", std::to_string(echo));
  }
  auto te = m.num(kEchoTime);
  if (!te || *te <= 0) te = m.num(kEffectiveEchoTime);
  if (!xray) j.pos("EchoTime", seconds(te));
  const auto tr = m.num(kRepetitionTime);
  j.pos("RepetitionTime", seconds(tr));
  if (const auto mt = m.str(kMagnetizationTransfer)) {
    const std::string u = upper(*mt);
    if (u.rfind("OF", 0) == 0) j.boolean("MTState", true);
    else if (u.rfind("ON", 0) == 0 || u.rfind("NO", 0) == 0) j.boolean("MTState", false);
  }
  {
    int spoiling = -1;  // unknown; 0 none, 1 RF, 2 gradient, 3 both
    if (const auto sp = m.str(kSpoiling)) {
      const std::string u = upper(*sp);
      // As dcm2niix (which tests "RF" twice): any RF is RF and gradient.
      if (u.find("RF") != std::string::npos) spoiling = 3;
      else if (u.find("GRADIENT") != std::string::npos) spoiling = 2;
      else if (u.find("NONE") != std::string::npos) spoiling = 0;
    }
    bool spoiled = spoiling > 0;
    const std::vector<std::string> variant = m.strs(kSequenceVariant);
    if (spoiling == -1 && std::find(variant.begin(), variant.end(), "SP") != variant.end()) spoiled = true;
    if (spoiled) j.boolean("SpoilingState", true);
    if (spoiling == 1) j.str("SpoilingType", std::string("RF"));
    if (spoiling == 2) j.str("SpoilingType", std::string("GRADIENT"));
    if (spoiling == 3) j.str("SpoilingType", std::string("COMBINED"));
  }
  j.pos("InversionTime", seconds(m.num(kInversionTime)));
  j.pos("FlipAngle", m.num(kFlipAngle));

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
    const auto te0 = phoenix_number(phoenix, "alTE[0]");
    const auto te1 = phoenix_number(phoenix, "alTE[1]");
    const bool phase = s.image_component == "PHASE" || has_type("P") || has_type("PHASE");
    if (phase && te0 && te1 && *te0 > 0 && *te1 > 0) {
      j.num("EchoTime1", *te0 / 1e6);
      j.num("EchoTime2", *te1 / 1e6);
    }
    if (const auto pf = phoenix_number(phoenix, "sKSpace.ucPhasePartialFourier"); pf && *pf > 0 && mr) {
      double v = 1;
      if (*pf == 1) v = 0.5;
      if (*pf == 2) v = 0.625;
      if (*pf == 4) v = 0.75;
      if (*pf == 8) v = 0.875;
      j.num("PartialFourier", v);
    }
    if (const auto interp = phoenix_number(phoenix, "sKSpace.uc2DInterpolation"); interp && *interp > 0)
      j.raw("Interpolation2D", "1");
    if (const auto b = phoenix_number(phoenix, "sKSpace.lBaseResolution"); b && *b > 0)
      j.num("BaseResolution", b);
    {
      std::vector<double> shim(8, 0);
      const char* lower[3][2] = {{"sGRADSPEC.asGPAData[0].lOffsetX", "sGRADSPEC.lOffsetX"},
                                 {"sGRADSPEC.asGPAData[0].lOffsetY", "sGRADSPEC.lOffsetY"},
                                 {"sGRADSPEC.asGPAData[0].lOffsetZ", "sGRADSPEC.lOffsetZ"}};
      for (int i = 0; i < 3; ++i) {
        shim[i] = phoenix_number(phoenix, lower[i][0]).value_or(0);
        if (shim[i] == 0) shim[i] = phoenix_number(phoenix, lower[i][1]).value_or(0);
      }
      for (int i = 0; i < 5; ++i)
        shim[3 + i] =
            phoenix_number(phoenix, "sGRADSPEC.alShimCurrent[" + std::to_string(i) + "]").value_or(0);
      if (shim[0] != 0) j.nums("ShimSetting", shim);
    }
    if (diffusion) {
      int scheme = static_cast<int>(phoenix_number(phoenix, "sDiffusion.dsScheme").value_or(0));
      if (scheme == 0) {
        scheme = static_cast<int>(phoenix_number(phoenix, "ucReadOutMode").value_or(0));
        if (scheme >= 1 && scheme <= 2) scheme = 3 - scheme;
      }
      if (scheme == 1) j.str("DiffusionScheme", std::string("Bipolar"));
      if (scheme == 2) j.str("DiffusionScheme", std::string("Monopolar"));
    }
    if (const auto d = phoenix_number(phoenix, "lDelayTimeInTR")) j.pos("DelayTime", *d / 1e6);
    if (mr) j.pos("TxRefAmp", phoenix_number(phoenix, "sTXSPEC.asNucleusInfo[0].flReferenceAmplitude"));
    if (mr) j.pos("PhaseResolution", phoenix_number(phoenix, "sKSpace.dPhaseResolution"));
    phase_oversampling = phoenix_number(phoenix, "sKSpace.dPhaseOversamplingForDialog").value_or(0);
    j.pos("PhaseOversampling", phase_oversampling);
    if (const auto es = phoenix_number(phoenix, "sFastImaging.lEchoSpacing"))
      j.pos("VendorReportedEchoSpacing", *es / 1e6);
    j.str("ReceiveCoilName", phoenix_string(phoenix, "sCoilElementID.tCoilID"));
    const auto elements = phoenix_string(phoenix, "sCoilSelectMeas.sCoilStringForConversion");
    if (mr) j.str("ReceiveCoilActiveElements", elements);
    if (coil_name && elements.value_or("") != *coil_name) j.str("CoilString", coil_name);
    j.str("PulseSequenceDetails", phoenix_string(phoenix, "tSequenceFileName"));
    j.str("WipMemBlock", phoenix_string(phoenix, "sWipMemBlock.tFree"));
    if (const auto r = phoenix_number(phoenix, "sPat.lRefLinesPE"); r && *r > 0) j.num("RefLinesPE", r);
    const auto combine = phoenix_number(phoenix, "ucCoilCombineMode");
    if (combine == 1.0) j.str("CoilCombinationMethod", std::string("Sum of Squares"));
    if (combine == 2.0) j.str("CoilCombinationMethod", std::string("Adaptive Combine"));
    auto consistency = phoenix_string(phoenix, "sProtConsistencyInfo.tMeasuredBaselineString");
    if (!consistency) consistency = phoenix_string(phoenix, "sProtConsistencyInfo.tBaselineString");
    j.str("ConsistencyInfo", consistency);
    if (const auto f3 = phoenix_number(phoenix, "sPat.lAccelFact3D"); f3 && *f3 > 0) accel_oop = *f3;
    if (const auto fpe = phoenix_number(phoenix, "sPat.lAccelFactPE"); fpe && *fpe > 0) {
      const auto mode = phoenix_number(phoenix, "sPat.ucPATMode");
      if (mode == 1.0) j.str("MatrixCoilMode", std::string("SENSE"));
      if (mode == 2.0) j.str("MatrixCoilMode", std::string("GRAPPA"));
      accel_pe = *fpe;
    }
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
  const auto wfs = philips ? m.num(kWaterFatShiftPhilips) : std::nullopt;
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
  for (auto d : s.shape()) dims.push_back(static_cast<double>(d));
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
