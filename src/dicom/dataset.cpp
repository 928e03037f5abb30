// DicomDataset: lookup by tag and the value accessors (strings trimmed as pydicom trims them,
// numbers from binary and text VRs).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <string>

#include "core/bytes.hpp"
#include "voxpipe/dicom.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe {
namespace {

constexpr const char* kWhitespace = " \t\n\r\f\v";

void rstrip(std::string& s, const char* chars) {
  const auto end = s.find_last_not_of(chars);
  s.erase(end == std::string::npos ? 0 : end + 1);
}

// Trailing NULs and spaces ("\0 " in pydicom).
void rstrip_nul_space(std::string& s) {
  while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
}

void strip_whitespace(std::string& s) {
  rstrip(s, kWhitespace);
  const auto begin = s.find_first_not_of(kWhitespace);
  s.erase(0, begin == std::string::npos ? s.size() : begin);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t bs = s.find('\\', start);
    out.push_back(s.substr(start, bs == std::string::npos ? std::string::npos : bs - start));
    if (bs == std::string::npos) break;
    start = bs + 1;
  }
  return out;
}

std::size_t binary_size(DicomVR vr) {
  switch (vr) {
    case DicomVR::US: case DicomVR::SS: return 2;
    case DicomVR::UL: case DicomVR::SL: case DicomVR::FL: case DicomVR::AT: return 4;
    case DicomVR::FD: case DicomVR::SV: case DicomVR::UV: return 8;
    default: return 0;
  }
}

std::uint64_t load(const std::uint8_t* p, std::size_t n, bool big) {
  if (!big) return core::load_le(p, static_cast<int>(n));
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v = v << 8 | p[i];
  return v;
}

[[noreturn]] void not_a_number(DicomTag tag, const std::string& detail) {
  throw Error(ErrorCode::format, "", dicom_tag_name(tag), detail);
}

// A DS/IS value: decimal text, optionally signed, surrounded by spaces.
double parse_decimal(DicomTag tag, std::string s) {
  strip_whitespace(s);
  const char* begin = s.data();
  const char* end = s.data() + s.size();
  if (begin != end && *begin == '+') ++begin;
  double v = 0;
  const auto [ptr, ec] = std::from_chars(begin, end, v);
  if (s.empty() || ec != std::errc() || ptr != end)
    not_a_number(tag, "expected a decimal number, but found \"" + s + "\"");
  return v;
}

}  // namespace

DicomDataset::DicomDataset(std::vector<DicomElement> elements, bool big_endian)
    : elements_(std::move(elements)), big_endian_(big_endian) {
  const auto by_tag = [](const DicomElement& a, const DicomElement& b) { return a.tag < b.tag; };
  if (!std::is_sorted(elements_.begin(), elements_.end(), by_tag))
    std::stable_sort(elements_.begin(), elements_.end(), by_tag);
  // A repeated tag keeps its last occurrence, as pydicom's dict does.
  std::vector<DicomElement> unique;
  bool repeated = false;
  for (std::size_t i = 1; i < elements_.size() && !repeated; ++i)
    repeated = elements_[i].tag == elements_[i - 1].tag;
  if (!repeated) return;
  for (std::size_t i = 0; i < elements_.size(); ++i)
    if (i + 1 == elements_.size() || elements_[i + 1].tag != elements_[i].tag)
      unique.push_back(std::move(elements_[i]));
  elements_ = std::move(unique);
}

const DicomElement* DicomDataset::find(DicomTag tag) const noexcept {
  const auto it = std::lower_bound(elements_.begin(), elements_.end(), tag,
                                   [](const DicomElement& e, DicomTag t) { return e.tag < t; });
  return it != elements_.end() && it->tag == tag ? &*it : nullptr;
}

std::vector<std::string> DicomDataset::strings(DicomTag tag) const {
  const DicomElement* e = find(tag);
  if (!e || !e->value_read) return {};
  std::string s(e->value.begin(), e->value.end());
  std::vector<std::string> out;
  switch (e->vr) {
    case DicomVR::AE:  // leading and trailing spaces are not significant
      out = split(s);
      for (auto& v : out) strip_whitespace(v);
      break;
    case DicomVR::AS: case DicomVR::CS: case DicomVR::DA: case DicomVR::DT: case DicomVR::TM:
    case DicomVR::UI: case DicomVR::PN:
      rstrip_nul_space(s);
      out = split(s);
      break;
    case DicomVR::LO: case DicomVR::SH: case DicomVR::UC:
      out = split(s);
      for (auto& v : out) rstrip_nul_space(v);
      break;
    case DicomVR::LT: case DicomVR::ST: case DicomVR::UT:
      rstrip_nul_space(s);
      out.push_back(std::move(s));
      break;
    case DicomVR::UR:
      rstrip(s, kWhitespace);
      out.push_back(std::move(s));
      break;
    case DicomVR::DS: case DicomVR::IS:
      strip_whitespace(s);
      out = split(s);
      break;
    default:
      return {};
  }
  if (out.size() == 1 && out[0].empty() && e->value.empty()) out.clear();
  return out;
}

std::optional<std::string> DicomDataset::string(DicomTag tag) const {
  auto all = strings(tag);
  if (all.empty()) return std::nullopt;
  return std::move(all[0]);
}

std::vector<double> DicomDataset::numbers(DicomTag tag) const {
  const DicomElement* e = find(tag);
  std::vector<double> out;
  if (!e || !e->value_read || e->value.empty()) return out;
  if (e->vr == DicomVR::DS || e->vr == DicomVR::IS) {
    for (const auto& s : strings(tag)) out.push_back(parse_decimal(tag, s));
    return out;
  }
  const std::size_t size = binary_size(e->vr);
  if (size == 0) return out;
  if (e->value.size() % size != 0)
    not_a_number(tag, "expected a length that is a multiple of " + std::to_string(size) + " for " +
                          dicom_vr_name(e->vr) + ", but found " + std::to_string(e->value.size()));
  const bool big = big_endian_;
  for (std::size_t i = 0; i < e->value.size(); i += size) {
    const std::uint8_t* p = e->value.data() + i;
    switch (e->vr) {
      case DicomVR::US: out.push_back(static_cast<double>(load(p, 2, big))); break;
      case DicomVR::SS: out.push_back(static_cast<std::int16_t>(load(p, 2, big))); break;
      case DicomVR::UL: out.push_back(static_cast<double>(load(p, 4, big))); break;
      case DicomVR::SL: out.push_back(static_cast<std::int32_t>(load(p, 4, big))); break;
      case DicomVR::AT:
        out.push_back(static_cast<double>(load(p, 2, big) << 16 | load(p + 2, 2, big)));
        break;
      case DicomVR::FL: {
        const auto bits = static_cast<std::uint32_t>(load(p, 4, big));
        float f;
        std::memcpy(&f, &bits, 4);
        out.push_back(f);
        break;
      }
      case DicomVR::FD: {
        const std::uint64_t bits = load(p, 8, big);
        double d;
        std::memcpy(&d, &bits, 8);
        out.push_back(d);
        break;
      }
      case DicomVR::SV: out.push_back(static_cast<double>(static_cast<std::int64_t>(load(p, 8, big)))); break;
      default: out.push_back(static_cast<double>(load(p, 8, big))); break;  // UV
    }
  }
  return out;
}

std::optional<double> DicomDataset::number(DicomTag tag, std::size_t index) const {
  const auto all = numbers(tag);
  if (index >= all.size()) return std::nullopt;
  return all[index];
}

std::vector<std::int64_t> DicomDataset::integers(DicomTag tag) const {
  const DicomElement* e = find(tag);
  std::vector<std::int64_t> out;
  if (!e || !e->value_read || e->value.empty()) return out;
  switch (e->vr) {
    case DicomVR::FL: case DicomVR::FD: case DicomVR::DS:
      not_a_number(tag, std::string("expected an integer VR, but found ") + dicom_vr_name(e->vr));
    case DicomVR::IS:
      for (const auto& s0 : strings(tag)) {
        std::string s = s0;
        strip_whitespace(s);
        const char* begin = s.data();
        const char* end = s.data() + s.size();
        if (begin != end && *begin == '+') ++begin;
        std::int64_t v = 0;
        const auto [ptr, ec] = std::from_chars(begin, end, v);
        if (s.empty() || ec != std::errc() || ptr != end) {
          // pydicom's IS accepts "1.0": a decimal with an integral value.
          const double d = parse_decimal(tag, s);
          if (d != std::floor(d) || std::fabs(d) > 9.0e15)
            not_a_number(tag, "expected an integer, but found \"" + s + "\"");
          v = static_cast<std::int64_t>(d);
        }
        out.push_back(v);
      }
      return out;
    case DicomVR::UV: case DicomVR::SV: {
      if (e->value.size() % 8 != 0) break;
      for (std::size_t i = 0; i < e->value.size(); i += 8)
        out.push_back(static_cast<std::int64_t>(load(e->value.data() + i, 8, big_endian_)));
      return out;
    }
    default:
      break;
  }
  for (const double d : numbers(tag)) out.push_back(static_cast<std::int64_t>(d));
  return out;
}

std::optional<std::int64_t> DicomDataset::integer(DicomTag tag, std::size_t index) const {
  const auto all = integers(tag);
  if (index >= all.size()) return std::nullopt;
  return all[index];
}

const std::vector<DicomDataset>& DicomDataset::items(DicomTag tag) const noexcept {
  static const std::vector<DicomDataset> kNone;
  const DicomElement* e = find(tag);
  return e ? e->items : kNone;
}

}  // namespace voxpipe
