// Hand-built DICOM byte streams for the parser tests, written independently of the parser:
// elements in any of the encodings, sequences and items of defined and undefined length,
// encapsulated pixel data, and Part 10 files with or without preamble and meta group.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace vptest {

using DBytes = std::vector<std::uint8_t>;

class DicomWriter {
 public:
  explicit DicomWriter(bool implicit_vr = false, bool big_endian = false, std::size_t base = 0)
      : implicit_(implicit_vr), big_(big_endian), base_(base) {}

  const DBytes& bytes() const { return out_; }
  // Offset of the next byte, counting `base` (where these bytes will sit in the file).
  std::size_t pos() const { return base_ + out_.size(); }

  void u16(std::uint32_t v) {
    if (big_) {
      put(v >> 8);
      put(v);
    } else {
      put(v);
      put(v >> 8);
    }
  }
  void u32(std::uint32_t v) {
    if (big_) {
      u16(v >> 16);
      u16(v & 0xFFFF);
    } else {
      u16(v & 0xFFFF);
      u16(v >> 16);
    }
  }
  void tag(std::uint32_t t) {
    u16(t >> 16);
    u16(t & 0xFFFF);
  }
  void raw(const DBytes& b) { out_.insert(out_.end(), b.begin(), b.end()); }

  // An element with a defined length; returns the offset of its value.
  std::size_t element(std::uint32_t t, const std::string& vr, const DBytes& value) {
    header(t, vr, static_cast<std::uint32_t>(value.size()));
    const std::size_t at = pos();
    raw(value);
    return at;
  }
  std::size_t text(std::uint32_t t, const std::string& vr, const std::string& s) {
    return element(t, vr, DBytes(s.begin(), s.end()));
  }
  std::size_t us(std::uint32_t t, std::uint32_t v) {
    DicomWriter w(false, big_);
    w.u16(v);
    return element(t, "US", w.bytes());
  }
  // The header of an element (length as given, 0xFFFFFFFF for undefined); returns the offset
  // of the value.
  std::size_t header(std::uint32_t t, const std::string& vr, std::uint32_t length) {
    tag(t);
    if (implicit_) {
      u32(length);
    } else {
      put(vr[0]);
      put(vr[1]);
      static const char* kLong[] = {"OB", "OD", "OF", "OL", "OV", "OW", "SQ",
                                    "SV", "UC", "UN", "UR", "UT", "UV"};
      bool long_form = false;
      for (const char* l : kLong) long_form = long_form || vr == l;
      if (long_form) {
        u16(0);
        u32(length);
      } else {
        if (length > 0xFFFF) throw std::logic_error("short-form length too large");
        u16(length);
      }
    }
    return pos();
  }
  void item(std::uint32_t length) {
    tag(0xFFFEE000);
    u32(length);
  }
  void item_delimiter() {
    tag(0xFFFEE00D);
    u32(0);
  }
  void sequence_delimiter() {
    tag(0xFFFEE0DD);
    u32(0);
  }

 private:
  void put(std::uint32_t b) { out_.push_back(static_cast<std::uint8_t>(b)); }

  bool implicit_, big_;
  std::size_t base_;
  DBytes out_;
};

inline constexpr const char* kImplicitLE = "1.2.840.10008.1.2";
inline constexpr const char* kExplicitLE = "1.2.840.10008.1.2.1";
inline constexpr const char* kExplicitBE = "1.2.840.10008.1.2.2";
inline constexpr const char* kDeflatedLE = "1.2.840.10008.1.2.1.99";
inline constexpr const char* kJpegBaseline = "1.2.840.10008.1.2.4.50";

// UID values are padded with NUL to an even length.
inline std::string uid_value(std::string uid) {
  if (uid.size() % 2) uid.push_back('\0');
  return uid;
}

// The meta group (explicit VR LE, with its group length) for `ts`, starting at `base`.
inline DBytes meta_group(const std::string& ts, std::size_t base) {
  DicomWriter body(false, false, base + 12);
  body.element(0x00020001, "OB", {0, 1});
  body.text(0x00020002, "UI", uid_value("1.2.840.10008.5.1.4.1.1.4"));
  body.text(0x00020003, "UI", uid_value("1.2.3.4"));
  body.text(0x00020010, "UI", uid_value(ts));
  DicomWriter meta(false, false, base);
  DicomWriter len(false, false);
  len.u32(static_cast<std::uint32_t>(body.bytes().size()));
  meta.element(0x00020000, "UL", len.bytes());
  meta.raw(body.bytes());
  return meta.bytes();
}

// Preamble + "DICM" + meta group for `ts`: the dataset starts at the returned size.
inline DBytes part10_head(const std::string& ts) {
  DBytes out(132, 0);
  out[128] = 'D';
  out[129] = 'I';
  out[130] = 'C';
  out[131] = 'M';
  const DBytes meta = meta_group(ts, out.size());
  out.insert(out.end(), meta.begin(), meta.end());
  return out;
}

inline DBytes deflate_raw(const DBytes& data) {
  z_stream z{};
  if (deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("deflateInit2");
  DBytes out(deflateBound(&z, static_cast<uLong>(data.size())) + 64);
  z.next_in = const_cast<Bytef*>(data.data());
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) throw std::runtime_error("deflate");
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace vptest
