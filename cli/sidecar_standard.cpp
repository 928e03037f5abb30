// The sidecar's keys from the standard and enhanced tags of a series' first file, Modality to
// FlipAngle in dcm2niix's order (write_standard_keys), with dcm2niix's forms of their values:
// BIDS times, vendor and modality names, seconds from milliseconds, the CRC-32 series number.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dicom/csa.hpp"
#include "series_nifti.hpp"
#include "sidecar_internal.hpp"
#include "voxpipe/dicom.hpp"

namespace voxpipe::cli::sidecar {

namespace {

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

}  // namespace

StandardKeys write_standard_keys(JsonObject& j, const DicomSeries& s, const SeriesMeta& m,
                                 const SeriesPlan& plan) {
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
  StandardKeys k;
  k.siemens = siemens;
  k.philips = philips;
  k.mr = mr;
  k.is3d = is3d;
  k.maker = maker;
  k.modality = modality;
  k.protocol = protocol;
  k.sequence_variant = sequence_variant;
  k.csa_image = csa_image;
  k.phoenix = std::move(phoenix);
  k.image_type = std::move(image_type);
  k.slice_timing = slice_timing;
  k.multiband = multiband;
  k.pat_accel_pe = pat_accel_pe;
  k.te = te;
  return k;
}

}  // namespace voxpipe::cli::sidecar
