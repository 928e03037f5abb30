// The DICOM data dictionary (PS3.6, as pydicom 3 has it): the VR of every public tag for implicit
// VR datasets, the repeating groups (50xx curves, 60xx overlays, 7Fxx variable pixel data, ...),
// and the keywords of all of them. The table is generated (scripts/gen_dicom_dictionary.py).
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
  const char* keyword;  // "" for the few entries the standard gives none
};

// The entry of `tag`, as pydicom's datadict.get_entry finds it: the tag itself, else for an even
// group the first repeating group whose mask matches ((6002,0010) is Overlay Rows, whose entry's
// tag is (6000,0010)); nullptr for private tags and public tags the standard does not define.
const DictEntry* find_entry(DicomTag tag) noexcept;

// The VR an implicit VR element gets, as pydicom 3 assigns it (hooks.raw_element_vr): the
// dictionary's; for private tags (odd group) LO for private creators (gggg,0010-00FF), else UN
// (pydicom's private dictionaries are not applied); UL for group lengths (gggg,0000) of public
// groups; UN for the rest. `known` is false for UN from those rules.
struct ImplicitVR {
  DicomVR vr;
  Ambiguity ambiguity;
  bool known;
};
ImplicitVR implicit_vr(DicomTag tag) noexcept;

}  // namespace voxpipe::dicom
