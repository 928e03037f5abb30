// Siemens CSA headers and the Phoenix protocol (src/dicom/csa.hpp states the layout).
#include "dicom/csa.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/file.hpp"
#include "voxpipe/dicom_series.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::dicom {
namespace {

// Siemens writes a few hundred elements and, per element, a few hundred items at most (one per
// slice, e.g. MosaicRefAcqTimes); the format's counts are 32-bit. Beyond this a header is not
// Siemens' (each count is also checked against the bytes that remain, which bounds memory).
constexpr std::uint32_t kMaxCount = 65535;
constexpr std::size_t kElementHeader = 64 + 4 + 4 + 4 + 4 + 4;  // name, vm, vr, syngodt, n, unused
constexpr std::size_t kItemHeader = 16;
// A CSA value not read with the dataset is read from the file only up to this size: Siemens'
// series headers (with the Phoenix protocol) are some 100 KiB, image headers 10-20 KiB.
constexpr std::uint64_t kMaxCsaValue = std::uint64_t{64} << 20;

bool numeric_vr(std::string_view vr) {
  return vr == "FL" || vr == "FD" || vr == "DS" || vr == "SS" || vr == "US" || vr == "SL" ||
         vr == "UL" || vr == "IS";
}

// Item text: up to the first NUL, trailing spaces (and other blanks) removed.
std::string item_text(const std::uint8_t* p, std::size_t n) {
  const char* c = reinterpret_cast<const char*>(p);
  std::size_t len = strnlen(c, n);
  while (len > 0 && (c[len - 1] == ' ' || c[len - 1] == '\t' || c[len - 1] == '\n' ||
                     c[len - 1] == '\r'))
    --len;
  return std::string(c, len);
}

// A number written as text (" 1000.00000000", "48"); nullopt for anything else.
std::optional<double> to_number(const std::string& s) {
  const char* begin = s.c_str();
  while (*begin == ' ') ++begin;
  if (!*begin) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(begin, &end);
  if (end == begin || errno == ERANGE) return std::nullopt;
  while (*end == ' ') ++end;
  if (*end) return std::nullopt;
  return v;
}

// Reads little-endian words; errors name the field, built only when there is one (`Field`: a
// callable returning the name), and give the file offset where it begins.
class Reader {
 public:
  Reader(std::span<const std::uint8_t> b, const std::string& source, std::uint64_t base)
      : b_(b), source_(source), base_(base) {}
  std::size_t pos() const { return pos_; }
  std::size_t remaining() const { return b_.size() - pos_; }
  const std::uint8_t* here() const { return b_.data() + pos_; }
  void skip(std::size_t n) { pos_ += std::min(n, remaining()); }
  template <class Field>
  std::uint32_t u32(const Field& field) {
    need(4, field);
    const std::uint8_t* p = here();
    pos_ += 4;
    return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
           std::uint32_t{p[3]} << 24;
  }
  template <class Field>
  std::int32_t i32(const Field& field) {
    return static_cast<std::int32_t>(u32(field));
  }
  template <class Field>
  void need(std::uint64_t n, const Field& field) const {
    if (n > remaining())
      fail_at(pos_, field(), "needs " + std::to_string(n) + " bytes, " +
                                 std::to_string(remaining()) +
                                 " remain (a truncated header or a count that lies)");
  }
  [[noreturn]] void fail_at(std::size_t at, const std::string& field,
                            const std::string& detail) const {
    throw Error(ErrorCode::format, source_, "CSA header " + field, detail, base_ + at);
  }

 private:
  std::span<const std::uint8_t> b_;
  const std::string& source_;
  std::uint64_t base_;
  std::size_t pos_ = 0;
};

// The bytes of `e`: read with the dataset, else from `bytes` or the file. nullopt when they
// cannot be had (offsets in an inflated stream, past the end of the file, too large).
std::optional<std::vector<std::uint8_t>> value_bytes(const DicomElement& e, const std::string& path,
                                                     std::span<const std::uint8_t> bytes,
                                                     bool offsets_in_inflated_stream) {
  if (e.value_read) return e.value;
  if (offsets_in_inflated_stream || e.length == kDicomUndefinedLength || e.length > kMaxCsaValue)
    return std::nullopt;
  if (!bytes.empty()) {
    if (e.value_offset > bytes.size() || e.length > bytes.size() - e.value_offset)
      return std::nullopt;
    return std::vector<std::uint8_t>(bytes.begin() + e.value_offset,
                                     bytes.begin() + e.value_offset + e.length);
  }
  if (path.empty()) return std::nullopt;
  core::InputFile file(path);
  // The length is checked against the file before anything is allocated from it.
  if (e.value_offset > file.size() || e.length > file.size() - e.value_offset) return std::nullopt;
  std::vector<std::uint8_t> value(e.length);
  if (file.read_at(e.value_offset, std::as_writable_bytes(std::span(value))) != value.size())
    return std::nullopt;
  return value;
}

}  // namespace

const DicomElement* private_element(const DicomDataset& ds, std::uint16_t group,
                                    std::string_view creator, std::uint8_t element) {
  // The creators (gggg,0010-00FF) are consecutive in the sorted dataset: one search, then a
  // walk over the few there are.
  const auto& all = ds.elements();
  auto it = std::lower_bound(all.begin(), all.end(), dicom_tag(group, 0x0010),
                             [](const DicomElement& e, DicomTag t) { return e.tag < t; });
  for (; it != all.end() && it->tag <= dicom_tag(group, 0x00FF); ++it) {
    const auto name = ds.string(it->tag);
    if (name && *name == creator)
      return ds.find(dicom_tag(group, static_cast<std::uint16_t>(dicom_element(it->tag) << 8 | element)));
  }
  return nullptr;
}

CsaHeader::CsaHeader(std::vector<CsaElement> elements) : elements_(std::move(elements)) {}

const CsaElement* CsaHeader::find(std::string_view name) const noexcept {
  for (const CsaElement& e : elements_)
    if (e.name == name) return &e;
  return nullptr;
}

std::vector<double> CsaHeader::numbers(std::string_view name) const {
  std::vector<double> out;
  const CsaElement* e = find(name);
  if (!e) return out;
  for (const std::string& s : e->items) {
    const auto v = to_number(s);
    if (!v) return {};
    out.push_back(*v);
  }
  return out;
}

std::optional<double> CsaHeader::number(std::string_view name, std::size_t index) const {
  const auto v = numbers(name);
  if (index >= v.size()) return std::nullopt;
  return v[index];
}

std::optional<std::string> CsaHeader::string(std::string_view name) const {
  const CsaElement* e = find(name);
  if (!e || e->items.empty()) return std::nullopt;
  return e->items.front();
}

CsaHeader parse_csa(std::span<const std::uint8_t> bytes, const std::string& source,
                    std::uint64_t base_offset) {
  if (bytes.empty()) return {};
  Reader r(bytes, source, base_offset);
  const auto named = [](const char* s) { return [s] { return std::string(s); }; };
  const bool format2 = bytes.size() >= 4 && std::memcmp(bytes.data(), "SV10", 4) == 0;
  if (format2) {
    r.skip(4);
    r.need(4, named("word after SV10"));
    r.skip(4);
  }
  const std::size_t count_at = r.pos();
  const std::uint32_t count = r.u32(named("element count"));
  r.u32(named("word after the element count"));
  if (count > kMaxCount)
    r.fail_at(count_at, "element count", "is " + std::to_string(count) + "; at most " +
                                             std::to_string(kMaxCount) + " are read");
  // Every element takes at least its 84-byte header: a count the bytes cannot hold lies.
  if (std::uint64_t{count} * kElementHeader > r.remaining())
    r.fail_at(count_at, "element count " + std::to_string(count),
              "needs at least " + std::to_string(std::uint64_t{count} * kElementHeader) +
                  " bytes, " + std::to_string(r.remaining()) + " remain");
  std::vector<CsaElement> elements;
  elements.reserve(count);
  std::int64_t first_items = 0;  // format 1: item lengths are stored plus this (SPM's read_CSA)
  for (std::uint32_t t = 0; t < count; ++t) {
    CsaElement e;
    const auto field = [&](const char* what) {
      return [&e, t, what] {
        return "element " + std::to_string(t) + " (" + e.name + ")" + what;
      };
    };
    r.need(kElementHeader, field(""));
    e.name = item_text(r.here(), 64);
    r.skip(64);
    e.vm = r.i32(field(" VM"));
    e.vr = item_text(r.here(), 4);
    r.skip(4);
    r.i32(field(" SyngoDT"));
    const std::size_t items_at = r.pos();
    const std::uint32_t n_items = r.u32(field(" item count"));
    r.u32(field(" unused word"));
    if (n_items > kMaxCount)
      r.fail_at(items_at, field(" item count")(),
                "is " + std::to_string(n_items) + "; at most " + std::to_string(kMaxCount) +
                    " are read");
    if (std::uint64_t{n_items} * kItemHeader > r.remaining())
      r.fail_at(items_at, field(" item count ")() + std::to_string(n_items),
                "needs at least " + std::to_string(std::uint64_t{n_items} * kItemHeader) +
                    " bytes, " + std::to_string(r.remaining()) + " remain");
    if (t == 0) first_items = n_items;
    // Items past VM (or past the item count when VM is 0) are Siemens' padding.
    const std::uint64_t n_values = e.vm > 0 ? std::uint64_t(e.vm) : n_items;
    const bool numeric = numeric_vr(e.vr);
    bool ended = false;  // numeric values end at the first empty item (nibabel's csareader)
    for (std::uint32_t i = 0; i < n_items; ++i) {
      const auto item = [&](const char* what) {
        return [&, i, what] { return field(" item ")() + std::to_string(i) + what; };
      };
      const std::size_t item_at = r.pos();
      const std::int32_t x0 = r.i32(item(" header")), x1 = r.i32(item(" header"));
      r.i32(item(" header"));
      r.i32(item(" header"));
      const std::int64_t length = format2 ? std::int64_t{x1} : std::int64_t{x0} - first_items;
      if (length < 0)
        r.fail_at(item_at, item(" length")(), "is negative (" + std::to_string(length) + ")");
      r.need(std::uint64_t(length), [&] { return item(" length ")() + std::to_string(length); });
      const bool keep = i < n_values && !ended;
      std::string text = keep ? item_text(r.here(), static_cast<std::size_t>(length)) : "";
      // The value is padded to 4 bytes; the padding of the last value may be cut off.
      r.skip((static_cast<std::size_t>(length) + 3) / 4 * 4);
      if (!keep) continue;
      if (text.empty()) {
        ended = numeric;
        continue;
      }
      e.items.push_back(std::move(text));
    }
    elements.push_back(std::move(e));
  }
  return CsaHeader(std::move(elements));
}

std::map<std::string, std::string> parse_ascconv(std::string_view text) {
  std::map<std::string, std::string> out;
  constexpr std::string_view begin_marker = "### ASCCONV BEGIN";
  const std::size_t begin = text.find(begin_marker);
  if (begin == std::string_view::npos) return out;
  // The BEGIN line may carry attributes ("### ASCCONV BEGIN object=MrProtDataImpl@... ###").
  std::size_t at = text.find('\n', begin);
  if (at == std::string_view::npos) return out;
  std::size_t end = text.find("### ASCCONV END", at);
  if (end == std::string_view::npos) end = text.size();  // cut short: what is there
  const std::string_view body = text.substr(at + 1, end - at - 1);
  const auto trim = [](std::string_view s) {
    const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\0'; };
    while (!s.empty() && blank(s.front())) s.remove_prefix(1);
    while (!s.empty() && blank(s.back())) s.remove_suffix(1);
    return s;
  };
  std::size_t line_start = 0;
  while (line_start < body.size()) {
    std::size_t line_end = body.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = body.size();
    const std::string_view line = body.substr(line_start, line_end - line_start);
    line_start = line_end + 1;
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view key = trim(line.substr(0, eq));
    // Keys are names ("sSliceArray.asSlice[0].dThickness"): printable, no blanks or quotes.
    if (key.empty() || std::any_of(key.begin(), key.end(), [](char c) {
          return c <= ' ' || c == '"' || c == '#' || static_cast<unsigned char>(c) >= 0x7F;
        }))
      continue;
    std::string_view value = trim(line.substr(eq + 1));
    // A comment after the value ("0x1  # ..."): after a string's closing quote, or the first '#'
    // of a value that is not a string.
    if (!value.empty() && value.front() == '"') {
      value = value.substr(0, value.rfind('"') + 1);
    } else if (const std::size_t hash = value.find('#'); hash != std::string_view::npos) {
      value = trim(value.substr(0, hash));
    }
    // Strings are written ""text"" (older: "text").
    while (value.size() >= 2 && value.front() == '"' && value.back() == '"')
      value = value.substr(1, value.size() - 2);
    out.try_emplace(std::string(key), std::string(value));
  }
  return out;
}

std::optional<CsaHeader> csa_header(const DicomDataset& ds, CsaKind kind, const std::string& path,
                                    std::span<const std::uint8_t> bytes,
                                    bool offsets_in_inflated_stream) {
  const DicomElement* e = private_element(ds, 0x0029, "SIEMENS CSA HEADER",
                                          kind == CsaKind::image ? 0x10 : 0x20);
  if (!e) return std::nullopt;
  const auto value = value_bytes(*e, path, bytes, offsets_in_inflated_stream);
  if (!value) return std::nullopt;
  return parse_csa(*value, path + " " + dicom_tag_name(e->tag), e->value_offset);
}

std::optional<CsaHeader> series_csa_header(const DicomSeries& series, CsaKind kind) {
  if (!series.first_file) return std::nullopt;
  const DicomFile& f = *series.first_file;
  std::span<const std::uint8_t> bytes;
  if (!series.images.empty() && series.images.front().buffer)
    bytes = series.images.front().buffer->bytes;
  return csa_header(f.dataset, kind, f.path, bytes, f.offsets_in_inflated_stream);
}

std::map<std::string, std::string> series_phoenix_protocol(const DicomSeries& series) {
  if (const auto csa = series_csa_header(series, CsaKind::series)) {
    // MrPhoenixProtocol (VB and later); MrProtocol in older software.
    for (const char* name : {"MrPhoenixProtocol", "MrProtocol"})
      if (const auto text = csa->string(name)) {
        auto protocol = parse_ascconv(*text);
        if (!protocol.empty()) return protocol;
      }
  }
  // Siemens XA (enhanced files) has no CSA header: the protocol is in (0021,xx19) of
  // "SIEMENS MR SDS 01", as dcm2niix reads it.
  if (series.first_file) {
    const DicomFile& f = *series.first_file;
    if (const DicomElement* e = private_element(f.dataset, 0x0021, "SIEMENS MR SDS 01", 0x19)) {
      std::span<const std::uint8_t> bytes;
      if (!series.images.empty() && series.images.front().buffer)
        bytes = series.images.front().buffer->bytes;
      if (const auto v = value_bytes(*e, f.path, bytes, f.offsets_in_inflated_stream))
        return parse_ascconv(std::string_view(reinterpret_cast<const char*>(v->data()), v->size()));
    }
  }
  return {};
}

}  // namespace voxpipe::dicom
