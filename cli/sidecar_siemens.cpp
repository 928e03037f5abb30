// What the sidecar reads of Siemens' own headers: the CSA header, the Phoenix protocol's values
// (decimal or hexadecimal, found by the end of their key, text in Siemens' UTF-7) and the keys
// dcm2niix writes from the protocol (write_phoenix_keys).
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dicom/csa.hpp"
#include "series_nifti.hpp"
#include "sidecar_internal.hpp"
#include "voxpipe/dicom.hpp"

namespace voxpipe::cli::sidecar {

namespace {

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

}  // namespace

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

std::optional<std::string> phoenix_string(const std::map<std::string, std::string>& p, const std::string& key) {
  const auto it = phoenix_find(p, key);
  if (it == p.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

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

void write_phoenix_keys(JsonObject& j, const std::map<std::string, std::string>& phoenix,
                        bool phase, bool mr, bool diffusion,
                        const std::optional<std::string>& coil_name, double& accel_pe,
                        double& accel_oop, double& phase_oversampling) {
  const auto te0 = phoenix_number(phoenix, "alTE[0]");
  const auto te1 = phoenix_number(phoenix, "alTE[1]");
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
}

}  // namespace voxpipe::cli::sidecar
