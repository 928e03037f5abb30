// Lookups in the generated data dictionary (dictionary_table.inc): binary search by tag, the
// repeating-group masks after it, and binary search by keyword through a sorted index. All of it
// is constant data: no initialisation at start-up and no allocation.
#include "dicom/dictionary.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>

namespace voxpipe::dicom {
namespace {

struct Repeater {
  DicomTag value;
  DicomTag mask;
  DictEntry entry;
};

namespace table {
using enum DicomVR;
using enum Ambiguity;
#include "dicom/dictionary_table.inc"
}  // namespace table

using table::kByKeyword;
using table::kEntries;
using table::kRepeaters;

constexpr bool sorted_by_tag() {
  for (std::size_t i = 1; i < std::size(kEntries); ++i)
    if (kEntries[i - 1].tag >= kEntries[i].tag) return false;
  return true;
}
static_assert(sorted_by_tag(), "kEntries must be sorted by tag (binary search)");

constexpr const DictEntry& entry_at(std::uint16_t i) {
  return i < std::size(kEntries) ? kEntries[i] : kRepeaters[i - std::size(kEntries)].entry;
}

// strcmp(a, b) < 0, in few constexpr steps (clang's default limit is a million in all; two
// string_views per pair would measure both keywords each time and exceed it).
constexpr bool keyword_less(const char* a, const char* b) {
  while (*a && *a == *b) ++a, ++b;
  return static_cast<unsigned char>(*a) < static_cast<unsigned char>(*b);
}

constexpr bool sorted_by_keyword() {
  for (std::size_t i = 1; i < std::size(kByKeyword); ++i)
    if (!keyword_less(entry_at(kByKeyword[i - 1]).keyword, entry_at(kByKeyword[i]).keyword))
      return false;
  return std::size(kEntries) + std::size(kRepeaters) <= 0xFFFF;
}
static_assert(sorted_by_keyword(), "kByKeyword must be sorted by keyword, without duplicates");

}  // namespace

const DictEntry* find_entry(DicomTag tag) noexcept {
  const auto* end = std::end(kEntries);
  const auto* it = std::lower_bound(std::begin(kEntries), end, tag,
                                    [](const DictEntry& e, DicomTag t) { return e.tag < t; });
  if (it != end && it->tag == tag) return it;
  // Private tags never match a repeating group (pydicom's get_entry).
  if (dicom_group(tag) % 2 == 1) return nullptr;
  for (const Repeater& r : kRepeaters)
    if ((tag & r.mask) == r.value) return &r.entry;
  return nullptr;
}

ImplicitVR implicit_vr(DicomTag tag) noexcept {
  if (const DictEntry* e = find_entry(tag)) return {e->vr, e->ambiguity, true};
  const std::uint16_t group = dicom_group(tag), element = dicom_element(tag);
  if (group % 2 == 1) {
    if (element >= 0x0010 && element <= 0x00FF) return {DicomVR::LO, Ambiguity::none, true};
    return {DicomVR::UN, Ambiguity::none, false};
  }
  if (element == 0) return {DicomVR::UL, Ambiguity::none, true};
  return {DicomVR::UN, Ambiguity::none, false};
}

}  // namespace voxpipe::dicom

namespace voxpipe {

std::optional<DicomTag> dicom_keyword_tag(std::string_view keyword) noexcept {
  using dicom::entry_at;
  const auto* end = std::end(dicom::kByKeyword);
  const auto* it = std::lower_bound(
      std::begin(dicom::kByKeyword), end, keyword,
      [](std::uint16_t i, std::string_view k) { return std::string_view(entry_at(i).keyword) < k; });
  if (it == end || keyword != entry_at(*it).keyword) return std::nullopt;
  return entry_at(*it).tag;
}

const char* dicom_tag_keyword(DicomTag tag) noexcept {
  const dicom::DictEntry* e = dicom::find_entry(tag);
  return e && *e->keyword ? e->keyword : nullptr;
}

}  // namespace voxpipe
