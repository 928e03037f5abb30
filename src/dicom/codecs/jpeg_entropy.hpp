// The Huffman entropy decoding shared by the JPEG decoders written here (jpeg_lossless.cpp,
// process 14; jpeg12.cpp, 12-bit process 4): T.81 Annex C canonical tables and an MSB-first bit
// reader that removes stuffed bytes and stops at markers. Internal to src/dicom/codecs.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string>

#include "dicom/codecs/codec.hpp"
#include "dicom/codecs/codec_support.hpp"

namespace voxpipe::dicom::jpeg_entropy {

// Error codes of a decoder, thrown from nested helpers with the frame's context; damage the
// decoder can decode past goes to codec_support::damaged (an error, or a warning in `outcome`).
struct Context {
  const FrameSpec& spec;
  FrameOutcome& outcome;
  [[noreturn]] void fail(ErrorCode code, const std::string& detail) const {
    codec_support::fail(spec, code, detail);
  }
  [[noreturn]] void corrupt(const std::string& detail) const { fail(ErrorCode::corrupt, detail); }
  void damaged(std::string detail) const {
    codec_support::damaged(spec, outcome, std::move(detail));
  }
};

// Canonical Huffman table (T.81 Annex C) with a 9-bit first-level lookup: most codes (lossless
// difference categories, DCT symbols) have at most 9 bits, the rest take the per-length path.
constexpr int kLookupBits = 9;

struct HuffmanTable {
  bool defined = false;
  // (length << 8) | symbol for every 9-bit prefix that starts with a code of <= 9 bits; 0 else.
  std::array<std::uint16_t, 1u << kLookupBits> lookup{};
  std::array<std::int32_t, 17> max_code{};     // largest code of each length, -1 if none
  std::array<std::int32_t, 17> value_offset{};  // index into values = code + value_offset
  std::array<std::uint8_t, 256> values{};
};

inline void build_table(HuffmanTable& t, const std::uint8_t* counts, const std::uint8_t* values,
                        std::size_t total, const Context& ctx) {
  t = HuffmanTable{};
  std::memcpy(t.values.data(), values, total);
  std::int32_t code = 0;
  std::size_t k = 0;
  for (int length = 1; length <= 16; ++length) {
    const unsigned n = counts[length - 1];
    t.value_offset[length] = static_cast<std::int32_t>(k) - code;
    for (unsigned i = 0; i < n; ++i, ++code, ++k) {
      if (code >= (std::int32_t{1} << length))
        ctx.corrupt("bad Huffman table: code lengths overflow");
      if (length <= kLookupBits) {
        const int spare = kLookupBits - length;
        const std::uint16_t entry = static_cast<std::uint16_t>((length << 8) | values[k]);
        for (std::int32_t j = 0; j < (1 << spare); ++j) t.lookup[(code << spare) | j] = entry;
      }
    }
    t.max_code[length] = n ? code - 1 : -1;
    code <<= 1;
  }
  t.defined = true;
}

// Reads entropy-coded bits MSB first through a 64-bit buffer, removing stuffed zero bytes. At a
// marker or the end of the data it feeds zero bits and counts them, so that decoding never reads
// past `end` and a scan that used them can be refused.
class BitReader {
 public:
  BitReader(const std::uint8_t* p, const std::uint8_t* end) : p_(p), end_(end) {}

  void refill() {
    while (count_ <= 56) {
      std::uint64_t byte = 0;
      if (!stopped_ && p_ < end_) {
        if (*p_ != 0xFF) {
          byte = *p_++;
        } else if (p_ + 1 < end_ && p_[1] == 0x00) {
          byte = 0xFF;
          p_ += 2;
        } else {
          stopped_ = true;  // a marker (or 0xFF as the last byte): the scan's data ends here
        }
      } else {
        stopped_ = true;
      }
      if (stopped_) padding_ += 8;
      buffer_ |= byte << (56 - count_);
      count_ += 8;
    }
  }
  std::uint32_t peek(int n) const { return static_cast<std::uint32_t>(buffer_ >> (64 - n)); }
  void skip(int n) {
    buffer_ <<= n;
    count_ -= n;
  }
  std::uint32_t take(int n) {
    if (n == 0) return 0;
    const std::uint32_t v = peek(n);
    skip(n);
    return v;
  }
  int count() const { return count_; }
  // True when decoding used zero bits fed past the end of the data.
  bool overran() const { return count_ < padding_; }
  // Whole bytes of data taken into the buffer but not decoded (the bits of a partly used byte
  // are the encoder's padding).
  std::size_t unread_bytes() const {
    return count_ > padding_ ? static_cast<std::size_t>(count_ - padding_) / 8 : 0;
  }
  // Where the marker parser continues: the first byte not yet taken into the buffer.
  const std::uint8_t* position() const { return p_; }

 private:
  const std::uint8_t* p_;
  const std::uint8_t* end_;
  std::uint64_t buffer_ = 0;
  int count_ = 0;
  int padding_ = 0;
  bool stopped_ = false;
};

inline int decode_symbol(BitReader& r, const HuffmanTable& t, const Context& ctx) {
  const std::uint16_t entry = t.lookup[r.peek(kLookupBits)];
  if (entry) {
    r.skip(entry >> 8);
    return entry & 0xFF;
  }
  for (int length = kLookupBits + 1; length <= 16; ++length) {
    const std::int32_t code = static_cast<std::int32_t>(r.peek(length));
    if (code <= t.max_code[length]) {
      r.skip(length);
      return t.values[static_cast<std::size_t>(code + t.value_offset[length])];
    }
  }
  ctx.corrupt("bad Huffman code in the entropy-coded data");
}

// The end of a restart interval: the entropy-coded data must be followed by RSTn, n the
// interval's number modulo 8; returns the data after it, counting the intervals in `restarts`.
// Data left over before the marker, or the wrong RSTn, are damage (libjpeg's "Corrupt JPEG data:
// N extraneous bytes before marker" / "found marker 0xN instead of RSTn", decoded past);
// entropy-coded data that end before the interval does, or no RSTn at all, are corrupt.
inline const std::uint8_t* next_restart(const BitReader& reader, const std::uint8_t* end,
                                        std::uint32_t& restarts, const Context& ctx) {
  if (reader.overran()) ctx.corrupt("entropy-coded data ends before the restart interval");
  std::size_t extra = reader.unread_bytes();
  const std::uint8_t* p = reader.position();
  while (p + 1 < end && !(p[0] == 0xFF && p[1] >= 0xD0 && p[1] <= 0xD7)) {
    if (p[0] == 0xFF && p[1] != 0x00 && p[1] != 0xFF) break;
    if (p[0] != 0xFF) ++extra;
    ++p;
  }
  if (!(p + 1 < end && p[0] == 0xFF && p[1] >= 0xD0 && p[1] <= 0xD7))
    ctx.corrupt("expected an RSTn marker after a restart interval");
  if (extra != 0)
    ctx.damaged("Corrupt JPEG data: " + std::to_string(extra) +
                " extraneous bytes before an RST marker");
  const unsigned want = restarts++ % 8;
  if (p[1] - 0xD0u != want)
    ctx.damaged("Corrupt JPEG data: found RST" + std::to_string(p[1] - 0xD0) + " instead of RST" +
                std::to_string(want));
  return p + 2;
}

// After a scan: data left over before the next marker are damage (libjpeg's "extraneous bytes
// before marker"); a scan that used bits past the end of its data has been refused already.
inline void check_scan_end(const BitReader& reader, const std::uint8_t* end, const Context& ctx) {
  std::size_t extra = reader.unread_bytes();
  for (const std::uint8_t* p = reader.position(); p < end; ++p) {
    if (p[0] == 0xFF && (p + 1 == end || (p[1] != 0x00 && p[1] != 0xFF))) break;
    if (p[0] != 0xFF) ++extra;
  }
  if (extra != 0)
    ctx.damaged("Corrupt JPEG data: " + std::to_string(extra) +
                " extraneous bytes after the scan's entropy-coded data");
}

// A big-endian 16-bit marker segment field.
inline std::uint32_t be16(const std::uint8_t* p) { return (std::uint32_t{p[0]} << 8) | p[1]; }

}  // namespace voxpipe::dicom::jpeg_entropy
