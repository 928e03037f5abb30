// The part of the DICOM data dictionary that voxpipe needs: VRs for implicit VR datasets (the
// tags of pixel, geometry and series work; every other tag follows pydicom's rules for tags it
// does not know) and the keywords of those tags.
#pragma once

#include <cstdint>
#include <string_view>

#include "voxpipe/dicom.hpp"

namespace voxpipe::dicom {

// Tags whose VR depends on other elements (PS3.6 "US or SS" etc.); `vr` holds the one used until
// the dataset is complete (see resolve_ambiguous_vrs in parser.cpp).
enum class Ambiguity : std::uint8_t { none, us_or_ss, ob_or_ow, us_or_ow, us_or_ss_or_ow };

struct DictEntry {
  DicomTag tag;
  DicomVR vr;
  Ambiguity ambiguity;
  const char* keyword;
};

// The entry of `tag` (repeating groups 60xx map to 6000), or nullptr.
const DictEntry* find_entry(DicomTag tag) noexcept;

// The VR an implicit VR element gets, as pydicom assigns it: the dictionary's; for private tags
// (odd group) LO for private creators (gggg,0010-00FF), UL for group lengths, else UN; UL for
// other group lengths (gggg,0000); UN for the rest. `known` is false for UN from those rules.
struct ImplicitVR {
  DicomVR vr;
  Ambiguity ambiguity;
  bool known;
};
ImplicitVR implicit_vr(DicomTag tag) noexcept;

}  // namespace voxpipe::dicom
