// VR names, tag names and transfer syntaxes.
#include <array>
#include <cstdio>
#include <string>

#include "voxpipe/dicom.hpp"

namespace voxpipe {
namespace {

constexpr std::array<const char*, 35> kVrNames = {
    "AE", "AS", "AT", "CS", "DA", "DS", "DT", "FD", "FL", "IS", "LO", "LT",
    "OB", "OD", "OF", "OL", "OV", "OW", "PN", "SH", "SL", "SQ", "SS", "ST",
    "SV", "TM", "UC", "UI", "UL", "UN", "UR", "US", "UT", "UV", "??"};
static_assert(kVrNames.size() == static_cast<std::size_t>(DicomVR::unknown) + 1);

}  // namespace

const char* dicom_vr_name(DicomVR vr) noexcept {
  const auto i = static_cast<std::size_t>(vr);
  return i < kVrNames.size() ? kVrNames[i] : "??";
}

std::optional<DicomVR> dicom_vr_from_name(std::string_view name) noexcept {
  if (name.size() != 2) return std::nullopt;
  for (std::size_t i = 0; i + 1 < kVrNames.size(); ++i)
    if (name == kVrNames[i]) return static_cast<DicomVR>(i);
  return std::nullopt;
}

std::string dicom_tag_name(DicomTag tag) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "(%04X,%04X)", static_cast<unsigned>(dicom_group(tag)),
                static_cast<unsigned>(dicom_element(tag)));
  return buf;
}

DicomTransferSyntax dicom_transfer_syntax(std::string_view uid) {
  DicomTransferSyntax ts;
  ts.uid = std::string(uid);
  if (uid == "1.2.840.10008.1.2") {
    ts.implicit_vr = true;
  } else if (uid == "1.2.840.10008.1.2.1") {
  } else if (uid == "1.2.840.10008.1.2.2") {
    ts.big_endian = true;
  } else if (uid == "1.2.840.10008.1.2.1.99") {
    ts.deflated = true;
  } else {
    // JPEG, JPEG-LS, JPEG 2000, HTJ2K, RLE, MPEG, Deflated Image Frame Compression, and UIDs
    // nobody registered: explicit VR little endian with encapsulated pixel data.
    ts.encapsulated = true;
  }
  return ts;
}

}  // namespace voxpipe
