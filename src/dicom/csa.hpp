// Siemens CSA headers: the private binary element lists Siemens MR scanners store in
// (0029,xx10) "CSA Image Header Info" and (0029,xx20) "CSA Series Header Info" (private creator
// "SIEMENS CSA HEADER"), and the Phoenix protocol (the "### ASCCONV BEGIN ###" text of the series
// header's MrPhoenixProtocol element).
//
// No library reads these: the layout is Siemens' own and undocumented. It is read here as
// nibabel.nicom.csareader and dcm2niix (nii_dicom.cpp, csaAscii) read it: format 2 ("SV10"
// magic, 4 unused bytes, element count, one unused word, then elements) and format 1 (no magic;
// the element count first). Each element: a 64-byte NUL-terminated name, VM (int32), a 4-byte
// VR, SyngoDT, item count, one unused word, then items; each item: four int32 of which the
// second (format 2) is the value length, or the first less the first element's item count
// (format 1, as SPM's spm_dicom_headers reads it), then the value padded to 4.
// Every count and length is checked against the bytes that remain before it is used: a lying
// header is Error(format) naming the source, the element and the byte offset, never an
// allocation larger than the input.
//
// Thread-safety: the functions are re-entrant; a CsaHeader is immutable after parsing.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "voxpipe/dicom.hpp"

namespace voxpipe {
struct DicomSeries;
}

namespace voxpipe::dicom {

struct CsaElement {
  std::string name;   // e.g. "B_value", "DiffusionGradientDirection", "MosaicRefAcqTimes"
  std::string vr;     // e.g. "FD", "IS", "DS", "LO" (trailing NULs removed)
  std::int32_t vm = 0;
  // The non-empty item values as text, cut at the first NUL, trailing blanks trimmed; at most
  // `vm` of them when vm > 0 (Siemens pads with empty items). For numeric VRs (FL FD DS SS US
  // SL UL IS) the values end at the first empty item, as nibabel's csareader reads them.
  std::vector<std::string> items;
};

class CsaHeader {
 public:
  CsaHeader() = default;
  explicit CsaHeader(std::vector<CsaElement> elements);

  const std::vector<CsaElement>& elements() const noexcept { return elements_; }
  // The element named `name`, or nullptr.
  const CsaElement* find(std::string_view name) const noexcept;
  // The items of `name` as numbers; empty when missing or when an item is not a number.
  std::vector<double> numbers(std::string_view name) const;
  std::optional<double> number(std::string_view name, std::size_t index = 0) const;
  // The first item of `name`, or nullopt.
  std::optional<std::string> string(std::string_view name) const;

 private:
  std::vector<CsaElement> elements_;
};

// Parses a CSA header (format 1 or 2). `source` names it in errors (the file's path and the
// element, e.g. "a.dcm (0029,1010)"); `base_offset` is the offset of bytes[0] in the file, so
// that errors give file offsets. Error(format) for a malformed header (counts or lengths past
// the end, more than 65535 elements or items); an empty header (zero bytes) is an empty result.
CsaHeader parse_csa(std::span<const std::uint8_t> bytes, const std::string& source,
                    std::uint64_t base_offset = 0);

// The Phoenix protocol ("### ASCCONV BEGIN ... ### ASCCONV END ###") as key -> value text, keys
// as written ("sKSpace.ucMultiSliceMode", "sSliceArray.asSlice[0].dThickness"), values with
// surrounding quotes and spaces removed. Lines that are not `key = value` are skipped; a second
// ASCCONV block is ignored (dcm2niix reads the first). Empty when there is none.
std::map<std::string, std::string> parse_ascconv(std::string_view text);

// The private element (gggg,xxee) of the block whose creator (gggg,00xx) is `creator` (e.g.
// 0x0029, "SIEMENS CSA HEADER", 0x10), or nullptr.
const DicomElement* private_element(const DicomDataset& ds, std::uint16_t group,
                                    std::string_view creator, std::uint8_t element);

enum class CsaKind { image, series };

// The CSA image or series header of a dataset (private creator "SIEMENS CSA HEADER", element
// 0x10 or 0x20), read from the dataset when its value was read, else from `bytes` (the file held
// in memory) or the file at `path`. nullopt when the dataset has none (not Siemens, or an
// anonymiser removed it). Errors as parse_csa; a value that cannot be read (offsets in an
// inflated stream, a file shorter than the element says) is nullopt.
std::optional<CsaHeader> csa_header(const DicomDataset& ds, CsaKind kind, const std::string& path,
                                    std::span<const std::uint8_t> bytes,
                                    bool offsets_in_inflated_stream);
// The same for the first image of a series (DicomSeries::first_file, from its file or buffer).
std::optional<CsaHeader> series_csa_header(const DicomSeries& series, CsaKind kind);

// The MrPhoenixProtocol of the series' CSA series header, parsed (parse_ascconv); empty when
// there is none.
std::map<std::string, std::string> series_phoenix_protocol(const DicomSeries& series);

}  // namespace voxpipe::dicom
