// The DICOM Part 10 parser: preamble, File Meta Information, the dataset in any of the four
// uncompressed encodings (implicit VR LE, explicit VR LE/BE, deflated explicit VR LE), nested
// sequences of defined and undefined length, and the location of the pixel data.
//
// It follows pydicom 3's filereader where pydicom makes a choice the standard leaves open
// (docs/dicom.md lists them): the first element of a dataset decides implicit or explicit VR
// when it contradicts the transfer syntax; an explicit VR that is not two capital letters means
// the element is implicit; UN of undefined length is a sequence; items of an explicit VR
// sequence may be implicit. Unlike pydicom, which reads what is there, every length is checked
// against the bytes left in the file and in the enclosing item before anything is read or
// allocated, and a value or item that does not fit is an error.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "core/bytes.hpp"
#include "core/file.hpp"
#include "dicom/dictionary.hpp"
#include "dicom/reader.hpp"
#include "voxpipe/dicom.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::dicom {

struct DatasetAccess {
  static std::vector<DicomElement>& elements(DicomDataset& ds) { return ds.elements_; }
};

namespace {

constexpr DicomTag kItem = 0xFFFEE000;
constexpr DicomTag kItemDelimitation = 0xFFFEE00D;
constexpr DicomTag kSequenceDelimitation = 0xFFFEE0DD;
constexpr DicomTag kPixelData = 0x7FE00010;
constexpr DicomTag kFloatPixelData = 0x7FE00008;
constexpr DicomTag kDoubleFloatPixelData = 0x7FE00009;
constexpr DicomTag kExtendedOffsetTable = 0x7FE00001;
constexpr DicomTag kExtendedOffsetTableLengths = 0x7FE00002;
constexpr DicomTag kSpecificCharacterSet = 0x00080005;
constexpr DicomTag kTransferSyntaxUID = 0x00020010;
constexpr DicomTag kPixelRepresentation = 0x00280103;
constexpr std::uint32_t kUndefined = 0xFFFFFFFF;
// Values are read in pieces of this size when the stream's length is unknown (inflated data),
// so that a hostile length costs no more memory than the bytes that really follow.
constexpr std::size_t kReadPiece = 1 << 20;

struct Encoding {
  bool implicit_vr = false;
  bool big_endian = false;
};

bool is_pixel_tag(DicomTag t) {
  return t == kPixelData || t == kFloatPixelData || t == kDoubleFloatPixelData;
}

// Explicit VRs with a 2-byte reserved field and a 4-byte length (PS3.5 7.1.2; pydicom's
// EXPLICIT_VR_LENGTH_32).
bool has_long_length(DicomVR vr) {
  switch (vr) {
    case DicomVR::OB: case DicomVR::OD: case DicomVR::OF: case DicomVR::OL: case DicomVR::OV:
    case DicomVR::OW: case DicomVR::SQ: case DicomVR::SV: case DicomVR::UC: case DicomVR::UN:
    case DicomVR::UR: case DicomVR::UT: case DicomVR::UV:
      return true;
    default:
      return false;
  }
}

bool is_capital(std::uint8_t c) { return c > 0x40 && c < 0x5B; }

// pydicom's test for implicit VR: the bytes where an explicit VR would be are not two capitals.
bool looks_implicit(const std::uint8_t* first_element) {
  return !(is_capital(first_element[4]) && is_capital(first_element[5]));
}

std::uint32_t load16(const std::uint8_t* p, bool big) {
  return big ? (std::uint32_t{p[0]} << 8 | p[1]) : static_cast<std::uint32_t>(core::load_le(p, 2));
}
std::uint32_t load32(const std::uint8_t* p, bool big) {
  if (!big) return static_cast<std::uint32_t>(core::load_le(p, 4));
  return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | p[3];
}
DicomTag load_tag(const std::uint8_t* p, bool big) {
  return dicom_tag(static_cast<std::uint16_t>(load16(p, big)),
                   static_cast<std::uint16_t>(load16(p + 2, big)));
}

enum class Kind { meta, top, defined_item, undefined_item };

struct Header {
  DicomTag tag = 0;
  DicomVR vr = DicomVR::UN;
  bool explicit_vr = false;
  bool known = true;  // the VR is not UN for want of a dictionary entry
  std::uint32_t length = 0;
  std::uint64_t at = 0;  // offset of the tag
};

class Parser {
 public:
  Parser(const std::string& name, const DicomReadOptions& options)
      : name_(name), options_(options) {}

  DicomDataset parse_dataset(Reader& r, Encoding enc, std::uint64_t end, Kind kind,
                             unsigned depth);

  std::optional<DicomPixelData> pixel_data;
  bool stopped = false;

 private:
  [[noreturn]] void fail(ErrorCode code, const std::string& field, const std::string& detail,
                         std::uint64_t at) const {
    throw Error(code, name_, field, detail, at);
  }
  bool read_header(Reader& r, Encoding enc, Header& h);
  void check_fits(Reader& r, const Header& h, std::uint64_t length, std::uint64_t end,
                  const char* what);
  void read_value(Reader& r, const Header& h, DicomElement& e);
  void skip_value(Reader& r, const Header& h, std::uint64_t length);
  void parse_sequence(Reader& r, Encoding enc, const Header& h, std::uint64_t end,
                      DicomElement& e, unsigned depth);
  void walk_items(Reader& r, Encoding enc, const Header& h, DicomPixelData* px);

  const std::string& name_;
  const DicomReadOptions& options_;
};

bool Parser::read_header(Reader& r, Encoding enc, Header& h) {
  h.at = r.position();
  std::uint8_t b[12];
  const std::size_t got = r.read(b, 8);
  if (got == 0) return false;
  if (got < 8)
    fail(ErrorCode::truncated, "element header",
         "expected 8 bytes, but the data ends after " + std::to_string(got), h.at);
  h.tag = load_tag(b, enc.big_endian);
  h.explicit_vr = false;
  h.known = true;
  // Item and delimitation tags have no VR, in every encoding.
  if (dicom_group(h.tag) == 0xFFFE) {
    h.vr = DicomVR::UN;
    h.length = load32(b + 4, enc.big_endian);
    return true;
  }
  if (!enc.implicit_vr) {
    const char name[2] = {static_cast<char>(b[4]), static_cast<char>(b[5])};
    if (const auto vr = dicom_vr_from_name(std::string_view(name, 2))) {
      h.vr = *vr;
      h.explicit_vr = true;
      if (has_long_length(*vr)) {
        if (r.read(b + 8, 4) != 4)
          fail(ErrorCode::truncated, dicom_tag_name(h.tag),
               "expected a 12-byte element header, but the data ends inside it", h.at);
        h.length = load32(b + 8, enc.big_endian);
      } else {
        h.length = load16(b + 6, enc.big_endian);
      }
      // An explicit UN of a tag whose VR is known gets that VR (pydicom's
      // replace_un_with_known_vr); undefined-length UN is a sequence (PS3.5 6.2.2).
      if (h.vr == DicomVR::UN && h.length != kUndefined) {
        if (const DictEntry* entry = find_entry(h.tag)) h.vr = entry->vr;
        else if (dicom_group(h.tag) % 2 == 1 && dicom_element(h.tag) >= 0x10 &&
                 dicom_element(h.tag) <= 0xFF)
          h.vr = DicomVR::LO;
      }
      return true;
    }
    const bool in_aa_zz = (b[4] > 'A' || (b[4] == 'A' && b[5] >= 'A')) &&
                          (b[4] < 'Z' || (b[4] == 'Z' && b[5] <= 'Z'));
    if (in_aa_zz) {
      // Two characters that are no VR: read with a 2-byte length, as pydicom does.
      h.vr = DicomVR::unknown;
      h.explicit_vr = true;
      h.length = load16(b + 6, enc.big_endian);
      return true;
    }
    // Not a VR at all: this element is implicit VR (writers that switch inside sequences).
  }
  const ImplicitVR iv = implicit_vr(h.tag);
  h.vr = iv.vr;
  h.known = iv.known;
  h.length = load32(b + 4, enc.big_endian);
  return true;
}

void Parser::check_fits(Reader& r, const Header& h, std::uint64_t length, std::uint64_t end,
                        const char* what) {
  const std::uint64_t at = r.position();
  if (const auto left = r.left(); left && length > *left)
    fail(ErrorCode::truncated, dicom_tag_name(h.tag),
         std::string("expected a ") + what + " of " + std::to_string(length) +
             " bytes, but only " + std::to_string(*left) + " bytes are left",
         at);
  if (end != UINT64_MAX && length > end - at)
    fail(ErrorCode::format, dicom_tag_name(h.tag),
         std::string("expected the ") + what + " of " + std::to_string(length) +
             " bytes to end with its item at byte " + std::to_string(end) +
             ", but it would end at byte " + std::to_string(at + length),
         at);
}

void Parser::read_value(Reader& r, const Header& h, DicomElement& e) {
  const std::uint64_t at = r.position();
  std::uint64_t done = 0;
  while (done < h.length) {
    const auto piece = static_cast<std::size_t>(std::min<std::uint64_t>(h.length - done, kReadPiece));
    e.value.resize(static_cast<std::size_t>(done) + piece);
    const std::size_t got = r.read(e.value.data() + done, piece);
    done += got;
    if (got < piece)
      fail(ErrorCode::truncated, dicom_tag_name(h.tag),
           "expected a value of " + std::to_string(h.length) + " bytes, but the data ends after " +
               std::to_string(done),
           at);
  }
  e.value_read = true;
}

void Parser::skip_value(Reader& r, const Header& h, std::uint64_t length) {
  const std::uint64_t at = r.position();
  const std::uint64_t got = r.skip(length);
  if (got < length)
    fail(ErrorCode::truncated, dicom_tag_name(h.tag),
         "expected a value of " + std::to_string(length) + " bytes, but the data ends after " +
             std::to_string(got),
         at);
}

// The items of a sequence value (defined length: up to `h.length` bytes; undefined: up to the
// Sequence Delimitation Item).
void Parser::parse_sequence(Reader& r, Encoding enc, const Header& h, std::uint64_t end,
                            DicomElement& e, unsigned depth) {
  if (depth + 1 > options_.max_depth)
    fail(ErrorCode::limit, dicom_tag_name(h.tag),
         "expected sequences nested at most " + std::to_string(options_.max_depth) +
             " deep (DicomReadOptions::max_depth), but found deeper ones",
         h.at);
  const bool defined = h.length != kUndefined;
  const std::uint64_t seq_end = defined ? r.position() + h.length : end;
  while (!defined || r.position() < seq_end) {
    Header item;
    item.at = r.position();
    std::uint8_t b[8];
    if (seq_end != UINT64_MAX && seq_end - item.at < 8)
      fail(ErrorCode::format, dicom_tag_name(h.tag),
           "expected an 8-byte item header, but the sequence or its item ends after " +
               std::to_string(seq_end - item.at),
           item.at);
    const std::size_t got = r.read(b, 8);
    if (got < 8)
      fail(ErrorCode::truncated, dicom_tag_name(h.tag),
           "expected an item header (8 bytes), but the data ends after " + std::to_string(got),
           item.at);
    item.tag = load_tag(b, enc.big_endian);
    item.length = load32(b + 4, enc.big_endian);
    if (item.tag == kSequenceDelimitation) break;
    if (item.tag != kItem)
      fail(ErrorCode::format, dicom_tag_name(h.tag),
           "expected an item tag (FFFE,E000) or a sequence delimiter (FFFE,E0DD), but found " +
               dicom_tag_name(item.tag),
           item.at);
    // Items of an explicit VR sequence may be implicit VR (PS3.5 6.2.2 for UN; some writers
    // do it for SQ too): the item's first element decides, as in pydicom.
    Encoding item_enc = enc;
    if (!enc.implicit_vr && item.length != 0) {
      std::uint8_t first[6];
      if (r.peek(first, 6) == 6 && looks_implicit(first)) item_enc.implicit_vr = true;
    }
    if (item.length == kUndefined) {
      e.items.push_back(parse_dataset(r, item_enc, UINT64_MAX, Kind::undefined_item, depth + 1));
    } else {
      check_fits(r, item, item.length, seq_end, "item");
      e.items.push_back(
          parse_dataset(r, item_enc, r.position() + item.length, Kind::defined_item, depth + 1));
    }
    e.item_offsets.push_back(item.at);
  }
}

// The items of an undefined-length value that is not a sequence: encapsulated pixel data
// (fragments recorded in `px`), or any other value (only walked over).
void Parser::walk_items(Reader& r, Encoding enc, const Header& h, DicomPixelData* px) {
  bool first = true;
  for (;;) {
    const std::uint64_t at = r.position();
    std::uint8_t b[8];
    const std::size_t got = r.read(b, 8);
    if (got < 8)
      fail(ErrorCode::truncated, dicom_tag_name(h.tag),
           "expected an item header or a sequence delimiter (8 bytes) in the encapsulated value, "
           "but the data ends after " + std::to_string(got),
           at);
    const DicomTag tag = load_tag(b, enc.big_endian);
    const std::uint32_t length = load32(b + 4, enc.big_endian);
    if (tag == kSequenceDelimitation) break;
    if (tag != kItem)
      fail(ErrorCode::format, dicom_tag_name(h.tag),
           "expected an item tag (FFFE,E000) or a sequence delimiter (FFFE,E0DD) in the "
           "encapsulated value, but found " + dicom_tag_name(tag),
           at);
    if (length == kUndefined)
      fail(ErrorCode::format, dicom_tag_name(h.tag),
           "expected a defined item length in the encapsulated value, but found FFFFFFFF", at + 4);
    check_fits(r, h, length, UINT64_MAX, "fragment");
    if (px && first) {
      if (length % 4 != 0)
        fail(ErrorCode::format, dicom_tag_name(h.tag),
             "expected a Basic Offset Table length that is a multiple of 4, but found " +
                 std::to_string(length),
             at + 4);
      DicomElement table;
      Header th = h;
      th.length = length;
      read_value(r, th, table);
      px->basic_offset_table.resize(length / 4);
      for (std::size_t i = 0; i < px->basic_offset_table.size(); ++i)
        px->basic_offset_table[i] = load32(table.value.data() + 4 * i, enc.big_endian);
    } else {
      if (px) px->fragments.push_back({r.position(), length});
      skip_value(r, h, length);
    }
    first = false;
  }
}

DicomDataset Parser::parse_dataset(Reader& r, Encoding enc, std::uint64_t end, Kind kind,
                                   unsigned depth) {
  std::vector<DicomElement> elements;
  for (;;) {
    if (end != UINT64_MAX && r.position() >= end) break;
    if (kind == Kind::meta) {
      std::uint8_t g[2];
      if (r.peek(g, 2) < 2 || core::load_le(g, 2) != 0x0002) break;
    }
    Header h;
    if (!read_header(r, enc, h)) {
      if (kind == Kind::top || kind == Kind::meta) break;
      fail(ErrorCode::truncated, "item",
           "expected an element or an item delimiter, but the data ends", h.at);
    }
    if (end != UINT64_MAX && r.position() > end)
      fail(ErrorCode::format, dicom_tag_name(h.tag),
           "expected the element header to end with its item at byte " + std::to_string(end) +
               ", but it ends at byte " + std::to_string(r.position()),
           h.at);
    if (h.tag == kItemDelimitation) {
      // The end of an undefined-length item; pydicom also ends a dataset at a stray one (a
      // defined-length item that ends with a delimiter, or trailing bytes after the dataset).
      if (kind == Kind::defined_item && r.position() != end)
        fail(ErrorCode::format, "item delimiter",
             "expected it at the end of its defined-length item (byte " + std::to_string(end) +
                 "), but found it earlier",
             h.at);
      break;
    }
    if (dicom_group(h.tag) == 0xFFFE)
      fail(ErrorCode::format, dicom_tag_name(h.tag),
           "expected a data element, but found an item or sequence delimiter tag", h.at);

    DicomElement e;
    e.tag = h.tag;
    e.vr = h.vr;
    e.explicit_vr = h.explicit_vr;
    e.value_offset = r.position();
    e.length = h.length;
    const bool top_pixels = depth == 0 && kind == Kind::top && is_pixel_tag(h.tag);

    if (h.length == kUndefined) {
      bool sequence = h.vr == DicomVR::SQ || (h.explicit_vr && h.vr == DicomVR::UN);
      if (!sequence && !h.explicit_vr && !h.known) {
        // A tag the dictionary does not know: a sequence when its value starts with an item.
        std::uint8_t next[4];
        sequence = r.peek(next, 4) == 4 && load_tag(next, enc.big_endian) == kItem;
      }
      if (h.tag == kPixelData) sequence = false;
      if (sequence) {
        e.vr = DicomVR::SQ;
        parse_sequence(r, enc, h, end, e, depth);
      } else {
        DicomPixelData px;
        walk_items(r, enc, h, top_pixels ? &px : nullptr);
        if (top_pixels) {
          px.tag = h.tag;
          px.vr = e.vr;
          px.offset = e.value_offset;
          px.length = r.position() - e.value_offset;
          px.encapsulated = true;
          pixel_data = std::move(px);
        }
      }
      if (end != UINT64_MAX && r.position() > end)
        fail(ErrorCode::format, dicom_tag_name(h.tag),
             "expected the value to end with its item at byte " + std::to_string(end) +
                 ", but it ends at byte " + std::to_string(r.position()),
             e.value_offset);
    } else if (h.vr == DicomVR::SQ) {
      check_fits(r, h, h.length, end, "sequence");
      e.vr = DicomVR::SQ;
      parse_sequence(r, enc, h, end, e, depth);
    } else {
      check_fits(r, h, h.length, end, "value");
      if (top_pixels) {
        DicomPixelData px;
        px.tag = h.tag;
        px.vr = h.vr;
        px.offset = e.value_offset;
        px.length = h.length;
        skip_value(r, h, h.length);
        pixel_data = std::move(px);
      } else if (h.length <= options_.max_value_size || h.tag == kSpecificCharacterSet ||
                 h.tag == kExtendedOffsetTable || h.tag == kExtendedOffsetTableLengths ||
                 h.tag == kTransferSyntaxUID) {
        read_value(r, h, e);
      } else {
        skip_value(r, h, h.length);
      }
    }
    elements.push_back(std::move(e));
    if (top_pixels && options_.stop_at_pixel_data) {
      stopped = true;
      break;
    }
  }
  return DicomDataset(std::move(elements), enc.big_endian);
}

// pydicom's resolution of the dictionary's "US or SS" and "OB or OW" VRs of implicit VR
// elements (filewriter.correct_ambiguous_vr_element): PixelRepresentation of the nearest
// dataset that has one decides US (0) or SS; without one, US unless the dataset has pixel data.
void resolve_ambiguous_vrs(DicomDataset& ds, std::vector<const DicomDataset*>& ancestors) {
  ancestors.push_back(&ds);
  for (DicomElement& e : DatasetAccess::elements(ds)) {
    if (!e.explicit_vr && e.vr != DicomVR::SQ) {
      const DictEntry* entry = find_entry(e.tag);
      if (entry && entry->ambiguity == Ambiguity::us_or_ss) {
        std::optional<std::int64_t> rep;
        for (auto it = ancestors.rbegin(); it != ancestors.rend() && !rep; ++it)
          if ((*it)->contains(kPixelRepresentation)) rep = (*it)->integer(kPixelRepresentation);
        if (!rep) rep = ds.contains(kPixelData) ? 1 : 0;
        e.vr = *rep == 0 ? DicomVR::US : DicomVR::SS;
      } else if (entry && entry->ambiguity == Ambiguity::ob_or_ow) {
        e.vr = e.length == kUndefined ? DicomVR::OB : DicomVR::OW;
      }
    }
    for (DicomDataset& item : e.items) resolve_ambiguous_vrs(item, ancestors);
  }
  ancestors.pop_back();
}

std::vector<std::uint64_t> load_u64s(const DicomElement* e, bool big) {
  std::vector<std::uint64_t> out;
  if (!e || !e->value_read) return out;
  out.resize(e->value.size() / 8);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::uint8_t* p = e->value.data() + 8 * i;
    std::uint64_t v = 0;
    if (big)
      for (int k = 0; k < 8; ++k) v = v << 8 | p[k];
    else
      v = core::load_le(p, 8);
    out[i] = v;
  }
  return out;
}

// Trims a UID or code string as pydicom does (trailing NULs and spaces).
std::string trim_uid(const std::vector<std::uint8_t>& v) {
  std::string s(v.begin(), v.end());
  while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
  return s;
}

DicomFile parse(Backend& backend, const std::string& name, const DicomReadOptions& options) {
  DicomFile f;
  f.path = name;
  Reader r(backend, 0);
  Parser parser(name, options);

  const auto not_dicom = [&] {
    return Error(ErrorCode::format, name, "preamble",
                 options.require_preamble
                     ? "expected a DICOM file (128-byte preamble and \"DICM\"), but found other "
                       "bytes"
                     : "expected a DICOM file (128-byte preamble and \"DICM\", or without them "
                       "an explicit VR element or one of group 0002 to 0010), but found other "
                       "bytes",
                 0);
  };
  std::uint8_t head[132];
  const std::size_t have = r.peek(head, 132);
  if (have == 132 && std::memcmp(head + 128, "DICM", 4) == 0) {
    f.has_preamble = true;
    r.skip(132);
  } else {
    // Without the preamble, the first element must look like DICOM: an explicit VR, or a
    // group of 0002 (file meta) to 0010 (patient) in either byte order; anything else is not
    // a DICOM file (pydicom reads those only with force=True, and then reads garbage).
    bool looks_like_dicom = false;
    if (have >= 8) {
      const std::uint32_t le = load16(head, false), be = load16(head, true);
      const char vr[2] = {static_cast<char>(head[4]), static_cast<char>(head[5])};
      looks_like_dicom = dicom_vr_from_name(std::string_view(vr, 2)) ||
                         (le >= 0x0002 && le <= 0x0010) || (be >= 0x0002 && be <= 0x0010);
    }
    if (!looks_like_dicom) throw not_dicom();
    // A layout that is read when the preamble is not required: say which option reads it.
    if (options.require_preamble)
      throw Error(ErrorCode::format, name, "preamble",
                  "expected the 128-byte preamble and \"DICM\" at byte 128, but found none; the "
                  "file starts with a DICOM element, which is read without them with force=True "
                  "(DicomReadOptions::require_preamble = false)",
                  0);
  }

  // File Meta Information: explicit VR little endian (implicit when its first element says so).
  Encoding meta_enc;
  {
    std::uint8_t first[6];
    if (r.peek(first, 6) == 6 && core::load_le(first, 2) == 0x0002 && looks_implicit(first))
      meta_enc.implicit_vr = true;
  }
  f.meta = parser.parse_dataset(r, meta_enc, UINT64_MAX, Kind::meta, 0);
  f.dataset_offset = r.position();

  Encoding enc;
  if (const DicomElement* ts = f.meta.find(kTransferSyntaxUID); ts && ts->value_read) {
    f.transfer_syntax = dicom_transfer_syntax(trim_uid(ts->value));
    enc.implicit_vr = f.transfer_syntax.implicit_vr;
    enc.big_endian = f.transfer_syntax.big_endian;
  } else {
    // No transfer syntax: the first element decides (pydicom): a valid VR means explicit VR,
    // and then a group >= 0x0400 read little endian means big endian.
    enc.implicit_vr = true;
    std::uint8_t first[6];
    if (r.peek(first, 6) == 6) {
      const char vr[2] = {static_cast<char>(first[4]), static_cast<char>(first[5])};
      if (dicom_vr_from_name(std::string_view(vr, 2))) {
        enc.implicit_vr = false;
        if (core::load_le(first, 2) >= 1024) enc.big_endian = true;
      }
    }
    f.transfer_syntax.implicit_vr = enc.implicit_vr;
    f.transfer_syntax.big_endian = enc.big_endian;
  }

  std::unique_ptr<InflateBackend> inflater;
  std::unique_ptr<Reader> inflated;
  Reader* data = &r;
  if (f.transfer_syntax.deflated) {
    inflater = std::make_unique<InflateBackend>(r, name, f.dataset_offset,
                                                options.max_inflated_size);
    inflated = std::make_unique<Reader>(*inflater, 0);
    data = inflated.get();
    f.offsets_in_inflated_stream = true;
  }
  // The first element wins over the transfer syntax when they disagree (pydicom warns, then
  // reads it the way the bytes are written).
  {
    std::uint8_t first[6];
    if (data->peek(first, 6) == 6) enc.implicit_vr = looks_implicit(first);
  }
  f.implicit_vr = enc.implicit_vr;
  f.big_endian = enc.big_endian;
  f.dataset = parser.parse_dataset(*data, enc, UINT64_MAX, Kind::top, 0);

  std::vector<const DicomDataset*> ancestors;
  resolve_ambiguous_vrs(f.dataset, ancestors);
  if (parser.pixel_data) {
    DicomPixelData& px = *parser.pixel_data;
    if (const DicomElement* e = f.dataset.find(px.tag)) px.vr = e->vr;
    if (px.encapsulated) {
      px.extended_offsets = load_u64s(f.dataset.find(kExtendedOffsetTable), enc.big_endian);
      px.extended_lengths = load_u64s(f.dataset.find(kExtendedOffsetTableLengths), enc.big_endian);
    }
    f.pixel_data = std::move(parser.pixel_data);
  }
  return f;
}

}  // namespace
}  // namespace voxpipe::dicom

namespace voxpipe {

DicomFile read_dicom(const std::string& path, const DicomReadOptions& options) {
  core::InputFile file(path);
  dicom::FileBackend backend(file);
  DicomFile parsed = dicom::parse(backend, path, options);
  parsed.identity = file.identity();
  return parsed;
}

DicomFile parse_dicom(std::span<const std::uint8_t> bytes, const std::string& name,
                      const DicomReadOptions& options) {
  dicom::MemoryBackend backend(bytes);
  return dicom::parse(backend, name, options);
}

}  // namespace voxpipe
