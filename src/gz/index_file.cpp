// The GZIDX index file format, as written by indexed_gzip's zran_export_index and read by its
// zran_import_index (pauldmccarthy/indexed_gzip, indexed_gzip/zran.c and zran.h), and read and
// written by rapidgzip (mxmlnkn/rapidgzip, src/core/rapidgzip/IndexFileFormat.hpp, namespace
// indexed_gzip). Little-endian (neither tool converts byte order; both run on little-endian
// machines in practice):
//
//   0  "GZIDX"  5 B
//   5  version  u8   0 or 1
//   6  flags    u8   unused, 0
//   7  compressed size    u64
//  15  uncompressed size  u64
//  23  spacing            u32
//  27  window size        u32   32768 (indexed_gzip requires >= 32768, rapidgzip == 32768)
//  31  number of points   u32
//  35  points: compressed offset u64, uncompressed offset u64, bits u8, and in version 1 only a
//      data flag u8 (1: the point has a window). In version 0 every point but the first has one.
//      then the windows of the points that have one, in point order, window-size bytes each.
//
// `bits` (zran.c: point->bits = data_type & 7 after inflate(Z_BLOCK)) is the number of bits of
// the byte before `compressed offset` that belong to the block: the block's first bit is the LSB-
// first bit position offset * 8 - bits. Both tools agree (rapidgzip: compressedOffsetInBits =
// offset * 8 - bits on read; offset = ceil(bit / 8), bits = (8 - bit % 8) % 8 on write), and
// tests/python/test_gzidx_interop.py checks it against both. A window holds the window-size
// bytes of output before the point; when fewer exist, the window is zero-padded at the front
// (rapidgzip) or holds stale bytes there (zran's ring buffer), so only the last
// min(32 KiB, offset) bytes mean anything. Member starts: indexed_gzip puts a point at each
// member's first deflate block with bits 0 and data flag 0; rapidgzip writes none there. Both
// end with a point at (compressed size, uncompressed size), which cannot be decoded from.
//
// After the windows, voxpipe writes a trailer both tools ignore (seek_index.hpp describes its
// versions). Version 2, written since windows became read one by one from objects, is a table
// of contents that is checked on its own and found from the end of the file:
//
//   0  "VPKEY"  5 B, version u8 = 2
//   6  gzip file size u64, mtime ns i64, CRC32 of the gzip file's last 64 KiB u32
//  26  window count u32, then the CRC32 of each window (all window-size bytes), u32 each
//   .  head length u32, then a copy of the GZIDX header and point table (head length bytes)
//   .  trailer length u32 (from "VPKEY" to the end of the file)
//   .  CRC32 of the trailer's bytes before this field u32
//
// So a reader by ranges fetches the end of the file (the trailer length is in its last 8
// bytes), and has the points, the key and every window's checksum without the windows; then
// it fetches and checks only the windows it decodes from. A copy of the head rather than a
// second request for the file's start: it costs 18 bytes a point, a request costs a round trip.
#include <libdeflate.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "core/bytes.hpp"
#include "core/checked.hpp"
#include "core/file.hpp"
#include "gz/seek_index.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::gz {
namespace {

constexpr char kMagic[5] = {'G', 'Z', 'I', 'D', 'X'};
constexpr std::size_t kHeaderSize = 35;
constexpr char kKeyMagic[5] = {'V', 'P', 'K', 'E', 'Y'};
constexpr std::uint8_t kKeyVersion = 2;  // written; 1 is read too
// Version 1: the key and a CRC32 of the whole index file.
constexpr std::size_t kTrailerSize = 5 + 1 + 8 + 8 + 4 + 4;
// Version 2: the key, then the window count, the head length, the trailer length and its CRC32
// around the variable parts (window CRC32s, the head's copy).
constexpr std::size_t kKeyFields = 5 + 1 + 8 + 8 + 4;
constexpr std::size_t kTocFixed = kKeyFields + 4 + 4 + 4 + 4;
// The largest version-2 trailer read: 3.7 million points, far more than any file needs
// (a point per 4 MiB of a 14 TB file), and what a lying trailer can make a reader allocate.
constexpr std::uint64_t kMaxTocSize = std::uint64_t{64} << 20;
// What read_gzidx_toc reads first from the end of an index (the trailer of 300 points is 7 KB).
constexpr std::uint64_t kTocGuess = std::uint64_t{64} << 10;
// Windows larger than this are not written by any tool (deflate needs 32 KiB); the cap keeps a
// hostile header from making us skip over absurd amounts of data per point.
constexpr std::uint32_t kMaxWindowSize = 1u << 20;
// Bit positions must fit in 64 bits.
constexpr std::uint64_t kMaxCompressedSize = std::numeric_limits<std::uint64_t>::max() / 8;

void put_le(std::vector<std::uint8_t>& out, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

// libdeflate's CRC32 (PCLMUL): an index of 300 windows is ~10 MB, checked on every load, and
// zlib's table CRC made that check half of the time to read one volume.
std::uint32_t crc32_of(std::span<const std::uint8_t> bytes) {
  return libdeflate_crc32(0, bytes.data(), bytes.size());
}

[[noreturn]] void fail(ErrorCode code, const std::string& name, const std::string& field,
                       const std::string& detail, std::uint64_t at) {
  throw Error(code, name, field, detail, at);
}

std::string hex32(std::uint32_t v) {
  char s[11];
  std::snprintf(s, sizeof s, "0x%08x", v);
  return s;
}

// A window whose bytes do not have the CRC32 the table of contents lists: the index (file or
// object) is damaged, and decoding from it would give wrong data.
void check_window(const std::string& name, std::size_t point, std::uint64_t at,
                  std::uint32_t expected, std::uint32_t found) {
  if (expected != found)
    fail(ErrorCode::corrupt, name, "window of point " + std::to_string(point),
         "the index is damaged: expected a window of CRC32 " + hex32(expected) +
             ", but its bytes have CRC32 " + hex32(found),
         at);
}

}  // namespace

namespace {

// The bytes read_gzidx parses: an index in memory, or an index file or object read piece by
// piece. `head`, when set, serves the bytes [0, head.size()) (the header and point table, from
// a version-2 trailer's copy: an object read by ranges is never asked for its start).
struct IndexBytes {
  std::span<const std::uint8_t> memory;   // when file is null
  const core::RandomAccessInput* file = nullptr;
  const std::string& name;
  std::span<const std::uint8_t> head = {};

  std::uint64_t size() const { return file ? file->size() : memory.size(); }

  void read(std::uint64_t offset, std::span<std::uint8_t> dst) const {
    if (dst.empty()) return;  // an index without points: memcpy must not see its null pointer
    if (offset + dst.size() <= head.size()) {
      std::memcpy(dst.data(), head.data() + offset, dst.size());
      return;
    }
    if (!file) {
      std::memcpy(dst.data(), memory.data() + offset, dst.size());
      return;
    }
    if (file->read_at(offset, std::as_writable_bytes(dst)) != dst.size())
      throw Error(ErrorCode::io, name, "", "the index file shrank while being read");
  }

  // CRC32 of the first n bytes.
  std::uint32_t crc(std::uint64_t n) const {
    if (!file) return crc32_of(memory.first(static_cast<std::size_t>(n)));
    // Small pieces through one reused buffer: a whole-file buffer would cost a page fault per
    // 4 KiB, which on a 10 MB index is more than the read itself.
    constexpr std::size_t kPiece = 256 * 1024;
    std::vector<std::uint8_t> buf(static_cast<std::size_t>(std::min<std::uint64_t>(n, kPiece)));
    std::uint32_t c = 0;
    for (std::uint64_t at = 0; at < n;) {
      const auto len = static_cast<std::size_t>(std::min<std::uint64_t>(n - at, kPiece));
      read(at, std::span(buf.data(), len));
      c = libdeflate_crc32(c, buf.data(), len);
      at += len;
    }
    return c;
  }
};

// Parses `src`; windows are copied from memory, or left in the file (recorded by offset).
SeekIndex parse_gzidx(const IndexBytes& src, std::optional<IndexKey>* key_out) {
  const std::string& name = src.name;
  const std::uint64_t total = src.size();
  if (total < kHeaderSize)
    fail(ErrorCode::truncated, name, "GZIDX header",
         "expected " + std::to_string(kHeaderSize) + " bytes, but the file has " +
             std::to_string(total),
         0);
  std::uint8_t header[kHeaderSize];
  src.read(0, header);
  if (std::memcmp(header, kMagic, 5) != 0)
    fail(ErrorCode::format, name, "magic", "expected \"GZIDX\", but found other bytes", 0);
  const std::uint8_t version = header[5];
  if (version > 1)
    fail(ErrorCode::format, name, "version",
         "expected 0 or 1, but found " + std::to_string(version), 5);
  SeekIndex index;
  index.compressed_size = core::load_le(&header[7], 8);
  index.uncompressed_size = core::load_le(&header[15], 8);
  index.spacing = static_cast<std::uint32_t>(core::load_le(&header[23], 4));
  const auto window_size = static_cast<std::uint32_t>(core::load_le(&header[27], 4));
  const auto npoints = static_cast<std::uint32_t>(core::load_le(&header[31], 4));
  if (index.compressed_size > kMaxCompressedSize)
    fail(ErrorCode::format, name, "compressed size",
         "expected at most " + std::to_string(kMaxCompressedSize) + ", but found " +
             std::to_string(index.compressed_size),
         7);
  if (window_size < kWindowSize || window_size > kMaxWindowSize)
    fail(ErrorCode::format, name, "window size",
         "expected " + std::to_string(kWindowSize) + " to " + std::to_string(kMaxWindowSize) +
             ", but found " + std::to_string(window_size),
         27);

  // Everything the header promises must be in the file before anything is allocated.
  const std::size_t point_size = version == 0 ? 17 : 18;
  const std::uint64_t points_end = kHeaderSize + std::uint64_t{npoints} * point_size;
  if (points_end > total)
    fail(ErrorCode::truncated, name, "points",
         "expected " + std::to_string(npoints) + " points (" +
             std::to_string(points_end - kHeaderSize) + " bytes), but the file has " +
             std::to_string(total - kHeaderSize) + " bytes after the header",
         kHeaderSize);
  std::vector<std::uint8_t> table(static_cast<std::size_t>(points_end - kHeaderSize));
  src.read(kHeaderSize, table);

  struct Raw {
    std::uint64_t bit, uncompressed;
    bool has_window;
  };
  std::vector<Raw> raw(npoints);
  std::uint64_t nwindows = 0;
  for (std::uint32_t i = 0; i < npoints; ++i) {
    const std::size_t at = kHeaderSize + std::size_t{i} * point_size;
    const std::uint8_t* e = table.data() + (at - kHeaderSize);
    const std::string field = "point " + std::to_string(i);
    const std::uint64_t offset = core::load_le(e, 8);
    const std::uint64_t uncompressed = core::load_le(e + 8, 8);
    const std::uint8_t bits = e[16];
    const bool has_window = version == 0 ? i != 0 : e[17] != 0;
    if (offset > index.compressed_size)
      fail(ErrorCode::format, name, field,
           "compressed offset " + std::to_string(offset) + " is beyond the compressed size " +
               std::to_string(index.compressed_size),
           at);
    if (uncompressed > index.uncompressed_size)
      fail(ErrorCode::format, name, field,
           "uncompressed offset " + std::to_string(uncompressed) +
               " is beyond the uncompressed size " + std::to_string(index.uncompressed_size),
           at + 8);
    if (bits > 7 || (bits > 0 && offset == 0))
      fail(ErrorCode::format, name, field,
           "expected a bit count of 0 to 7 (0 at offset 0), but found " + std::to_string(bits),
           at + 16);
    const std::uint64_t bit = offset * 8 - bits;
    if (i > 0 && (bit <= raw[i - 1].bit || uncompressed < raw[i - 1].uncompressed))
      fail(ErrorCode::format, name, field,
           "expected to follow point " + std::to_string(i - 1) + " (bit " +
               std::to_string(raw[i - 1].bit) + ", uncompressed offset " +
               std::to_string(raw[i - 1].uncompressed) + "), but found bit " +
               std::to_string(bit) + ", uncompressed offset " + std::to_string(uncompressed),
           at);
    if (i == 0 && uncompressed != 0)
      fail(ErrorCode::format, name, field,
           "expected the first point at uncompressed offset 0, but found " +
               std::to_string(uncompressed),
           at + 8);
    raw[i] = {bit, uncompressed, has_window};
    nwindows += has_window ? 1 : 0;
  }
  const std::uint64_t windows_end = points_end + nwindows * window_size;  // < 2^32 * 2^20 + ...
  if (windows_end > total)
    fail(ErrorCode::truncated, name, "windows",
         "expected " + std::to_string(nwindows) + " windows of " + std::to_string(window_size) +
             " bytes, but the file ends after " + std::to_string(total - points_end),
         points_end);
  if (npoints == 0 && index.uncompressed_size > 0)
    fail(ErrorCode::format, name, "number of points",
         "expected at least one point for " + std::to_string(index.uncompressed_size) +
             " bytes of data, but found none",
         31);

  // The trailer, if any.
  std::optional<IndexKey> key;
  std::vector<std::uint32_t> window_crcs;  // version 2: one per window, in file order
  const std::uint64_t rest = total - windows_end;
  if (rest != 0) {
    std::uint8_t t[kKeyFields];
    if (rest >= kKeyFields) src.read(windows_end, t);
    if (rest < kKeyFields || std::memcmp(t, kKeyMagic, 5) != 0)
      fail(ErrorCode::format, name, "trailer",
           "expected the end of the file or a VPKEY trailer after the windows, but found " +
               std::to_string(rest) + " other bytes",
           windows_end);
    if (t[5] != 1 && t[5] != 2)
      fail(ErrorCode::format, name, "trailer version",
           "expected 1 or 2, but found " + std::to_string(t[5]), windows_end + 5);
    key = IndexKey{core::load_le(t + 6, 8), static_cast<std::int64_t>(core::load_le(t + 14, 8)),
                   static_cast<std::uint32_t>(core::load_le(t + 22, 4))};
    if (t[5] == 1) {
      if (rest != kTrailerSize)
        fail(ErrorCode::format, name, "trailer",
             "expected a " + std::to_string(kTrailerSize) + "-byte version 1 trailer, but " +
                 std::to_string(rest) + " bytes follow the windows",
             windows_end);
      std::uint8_t c[4];
      src.read(total - 4, c);
      if (core::load_le(c, 4) != src.crc(total - 4))
        fail(ErrorCode::corrupt, name, "trailer CRC32",
             "the index file is damaged: the CRC32 of its contents does not match the trailer",
             total - 4);
    } else {
      // Every length in it follows from the header: checked before the trailer is read.
      const std::uint64_t expected = kTocFixed + 4 * nwindows + points_end;
      if (rest != expected || rest > kMaxTocSize)
        fail(ErrorCode::format, name, "trailer",
             "expected a version 2 trailer of " + std::to_string(expected) + " bytes (" +
                 std::to_string(nwindows) + " windows, " + std::to_string(npoints) +
                 " points; at most " + std::to_string(kMaxTocSize) + "), but " +
                 std::to_string(rest) + " bytes follow the windows",
             windows_end);
      std::vector<std::uint8_t> toc(static_cast<std::size_t>(rest));
      src.read(windows_end, toc);
      const std::size_t n = toc.size();
      if (core::load_le(&toc[n - 4], 4) != crc32_of(std::span(toc).first(n - 4)))
        fail(ErrorCode::corrupt, name, "trailer CRC32",
             "the index file is damaged: the CRC32 of its table of contents does not match",
             total - 4);
      const std::uint64_t count = core::load_le(&toc[kKeyFields], 4);
      const std::size_t heads_at = kKeyFields + 4 + 4 * static_cast<std::size_t>(nwindows);
      const std::uint64_t head_length = core::load_le(&toc[heads_at], 4);
      const std::uint64_t length = core::load_le(&toc[n - 8], 4);
      const auto field_error = [&](const char* field, std::uint64_t found, std::uint64_t want,
                                   std::size_t at) {
        fail(ErrorCode::format, name, field,
             "expected " + std::to_string(want) + ", but the trailer says " +
                 std::to_string(found),
             windows_end + at);
      };
      if (count != nwindows) field_error("trailer window count", count, nwindows, kKeyFields);
      if (head_length != points_end)
        field_error("trailer head length", head_length, points_end, heads_at);
      if (length != rest) field_error("trailer length", length, rest, n - 8);
      // The head parsed above must be the one the checked trailer holds.
      if (std::memcmp(&toc[heads_at + 4], header, kHeaderSize) != 0 ||
          (!table.empty() &&
           std::memcmp(&toc[heads_at + 4 + kHeaderSize], table.data(), table.size()) != 0))
        fail(ErrorCode::corrupt, name, "points",
             "the index file is damaged: its header and points differ from the copy in its "
             "trailer",
             0);
      window_crcs.resize(static_cast<std::size_t>(nwindows));
      for (std::size_t k = 0; k < window_crcs.size(); ++k)
        window_crcs[k] = static_cast<std::uint32_t>(core::load_le(&toc[kKeyFields + 4 + 4 * k], 4));
    }
  }

  std::uint64_t window_at = points_end;
  std::size_t window_number = 0;
  if (!window_crcs.empty()) index.window_slot = window_size;
  for (std::uint32_t i = 0; i < npoints; ++i) {
    const Raw& r = raw[i];
    std::uint64_t w = 0;  // the point's window's offset, when it has one
    std::uint32_t w_crc = 0;
    if (r.has_window) {
      w = window_at;
      window_at += window_size;
      if (!window_crcs.empty()) w_crc = window_crcs[window_number];
      ++window_number;
    }
    // End-of-stream points (both tools write one) cannot be inflated from.
    if (r.uncompressed == index.uncompressed_size) continue;
    if (r.bit >= index.compressed_size * 8)
      fail(ErrorCode::format, name, "point " + std::to_string(i),
           "expected a point inside the compressed data, but it is at its end while " +
               std::to_string(index.uncompressed_size - r.uncompressed) +
               " uncompressed bytes remain",
           kHeaderSize + std::size_t{i} * point_size);
    SeekPoint p;
    p.compressed_bit = r.bit;
    p.uncompressed = r.uncompressed;
    if (r.has_window && r.uncompressed > 0) {
      // Only the last min(32 KiB, uncompressed) bytes mean anything.
      const auto keep = static_cast<std::uint32_t>(
          std::min<std::uint64_t>(kWindowSize, r.uncompressed));
      const std::uint64_t from = w + window_size - keep;
      if (src.file) {
        p.window_offset = from;
        p.window_length = keep;
      } else {
        p.window.resize(keep);
        src.read(from, p.window);
        if (!window_crcs.empty()) {
          std::vector<std::uint8_t> slot(window_size);
          src.read(w, slot);
          check_window(name, i, w, w_crc, crc32_of(slot));
        }
      }
    }
    if (index.window_slot != 0) index.window_crcs.push_back(w_crc);
    index.points.push_back(std::move(p));
  }
  if (key_out) *key_out = key;
  return index;
}

}  // namespace

SeekIndex read_gzidx(std::span<const std::uint8_t> bytes, const std::string& name) {
  return read_gzidx(bytes, name, nullptr);
}

SeekIndex read_gzidx(std::span<const std::uint8_t> bytes, const std::string& name,
                     std::optional<IndexKey>* key) {
  return parse_gzidx(IndexBytes{bytes, nullptr, name}, key);
}

SeekIndex read_gzidx_file(const std::string& path, std::optional<IndexKey>* key) {
  auto file = std::make_shared<const core::InputFile>(path);
  SeekIndex index = parse_gzidx(IndexBytes{{}, file.get(), path}, key);
  index.window_file = std::move(file);
  return index;
}

SeekIndex read_gzidx_toc(std::shared_ptr<const core::RandomAccessInput> input,
                         std::optional<IndexKey>* key) {
  const std::string& name = input->path();
  const std::uint64_t total = input->size();
  // The footer: the trailer's length and CRC32.
  if (total < kHeaderSize + kTocFixed)
    fail(ErrorCode::truncated, name, "trailer",
         "expected an index with a version 2 trailer (at least " +
             std::to_string(kHeaderSize + kTocFixed) + " bytes), but it has " +
             std::to_string(total),
         0);
  // One read of the end, which holds the whole trailer of an index of up to ~2,900 points; a
  // larger one is read on from there.
  const std::uint64_t guess = std::min(total, kTocGuess);
  std::vector<std::uint8_t> tail(static_cast<std::size_t>(guess));
  if (input->read_at(total - guess, std::as_writable_bytes(std::span(tail))) != tail.size())
    fail(ErrorCode::truncated, name, "trailer", "the index ended before its size", total - guess);
  const std::uint64_t length = core::load_le(&tail[tail.size() - 8], 4);
  if (length < kTocFixed + kHeaderSize || length > total - kHeaderSize || length > kMaxTocSize)
    fail(ErrorCode::format, name, "trailer length",
         "expected a version 2 trailer of " + std::to_string(kTocFixed + kHeaderSize) + " to " +
             std::to_string(std::min(total - kHeaderSize, kMaxTocSize)) +
             " bytes, but found a length of " + std::to_string(length),
         total - 8);
  const std::uint64_t at = total - length;
  std::vector<std::uint8_t> toc;
  if (length <= guess) {
    toc.assign(tail.end() - static_cast<std::ptrdiff_t>(length), tail.end());
  } else {
    toc.resize(static_cast<std::size_t>(length));
    const std::size_t before = toc.size() - tail.size();
    if (input->read_at(at, std::as_writable_bytes(std::span(toc).first(before))) != before)
      fail(ErrorCode::truncated, name, "trailer", "the index ended before its size", at);
    std::memcpy(toc.data() + before, tail.data(), tail.size());
  }
  tail = {};
  if (std::memcmp(toc.data(), kKeyMagic, 5) != 0 || toc[5] != 2)
    fail(ErrorCode::format, name, "trailer",
         "expected a VPKEY version 2 trailer (a table of contents: an index read by ranges "
         "needs one), but found other bytes",
         at);
  if (core::load_le(&toc[toc.size() - 4], 4) != crc32_of(std::span(toc).first(toc.size() - 4)))
    fail(ErrorCode::corrupt, name, "trailer CRC32",
         "the index is damaged: the CRC32 of its table of contents does not match", total - 4);
  // The head's copy, where the checked window count says it is; parse_gzidx then checks every
  // length against the header the copy holds, and the copy against itself.
  const std::uint64_t nwindows = core::load_le(&toc[kKeyFields], 4);
  const std::uint64_t heads_at = kKeyFields + 4 + 4 * nwindows;
  if (heads_at + 4 + kHeaderSize + 8 > length)
    fail(ErrorCode::format, name, "trailer window count",
         "expected at most " + std::to_string((length - kTocFixed - kHeaderSize) / 4) +
             " windows for a trailer of " + std::to_string(length) + " bytes, but found " +
             std::to_string(nwindows),
         at + kKeyFields);
  const std::uint64_t head_length = core::load_le(&toc[heads_at], 4);
  if (head_length != length - kTocFixed - 4 * nwindows)
    fail(ErrorCode::format, name, "trailer head length",
         "expected " + std::to_string(length - kTocFixed - 4 * nwindows) +
             " (the trailer's length less its other parts), but found " +
             std::to_string(head_length),
         at + heads_at);
  const std::span<const std::uint8_t> head(&toc[heads_at + 4],
                                           static_cast<std::size_t>(head_length));
  SeekIndex index = parse_gzidx(IndexBytes{{}, input.get(), name, head}, key);
  index.window_file = std::move(input);
  return index;
}

std::optional<ByteRange> SeekIndex::window_range(const SeekPoint& p) const {
  if (p.window_length == 0) return std::nullopt;
  if (window_slot == 0) return ByteRange{p.window_offset, p.window_length};
  return ByteRange{p.window_offset + p.window_length - window_slot, window_slot};
}

std::span<const std::uint8_t> SeekIndex::window_of(const SeekPoint& p,
                                                   std::vector<std::uint8_t>& scratch) const {
  if (p.window_length == 0) return p.window;
  if (!window_file)
    throw Error(ErrorCode::invalid_argument, "", "seek index",
                "a point's window is in an index file, but the index has none open");
  const ByteRange r = *window_range(p);
  scratch.resize(static_cast<std::size_t>(r.size));
  if (window_file->read_at(r.offset, std::as_writable_bytes(std::span(scratch))) !=
      scratch.size())
    throw Error(ErrorCode::io, window_file->path(), "window",
                "the index file became shorter after it was read", r.offset);
  if (window_slot == 0) return scratch;
  // Version 2: the window's own CRC32, from the checked table of contents.
  const auto it = std::lower_bound(
      points.begin(), points.end(), p.compressed_bit,
      [](const SeekPoint& x, std::uint64_t bit) { return x.compressed_bit < bit; });
  if (it == points.end() || it->compressed_bit != p.compressed_bit)
    throw Error(ErrorCode::invalid_argument, window_file->path(), "seek index",
                "expected a point of this index");
  const auto k = static_cast<std::size_t>(it - points.begin());
  check_window(window_file->path(), k, r.offset, window_crcs[k], crc32_of(scratch));
  return std::span<const std::uint8_t>(scratch).last(p.window_length);
}

std::vector<std::uint8_t> encode_gzidx(const SeekIndex& index,
                                       const std::optional<IndexKey>& key) {
  const auto invalid = [](const std::string& detail) {
    throw Error(ErrorCode::invalid_argument, "", "seek index", detail);
  };
  if (index.compressed_size > kMaxCompressedSize) invalid("compressed size too large");
  // +1: the end point.
  if (index.points.size() >= std::numeric_limits<std::uint32_t>::max())
    invalid("more than 2^32 - 2 points");
  std::uint64_t nwindows = 0;
  for (std::size_t i = 0; i < index.points.size(); ++i) {
    const SeekPoint& p = index.points[i];
    const std::size_t wsize = p.window_length != 0 ? p.window_length : p.window.size();
    if (wsize > kWindowSize || wsize > p.uncompressed)
      invalid("point " + std::to_string(i) + " has a window longer than the output before it");
    if (p.compressed_bit >= index.compressed_size * 8 ||
        p.uncompressed >= index.uncompressed_size)
      invalid("point " + std::to_string(i) + " is at or beyond the end of the stream");
    if (i == 0 ? p.uncompressed != 0
               : (p.compressed_bit <= index.points[i - 1].compressed_bit ||
                  p.uncompressed < index.points[i - 1].uncompressed))
      invalid("point " + std::to_string(i) + " is out of order");
    nwindows += p.has_window() ? 1 : 0;
  }
  if (index.points.empty() && index.uncompressed_size > 0) invalid("no points");

  const std::uint64_t npoints = index.points.size() + 1;
  std::vector<std::uint8_t> out;
  out.reserve(kHeaderSize + npoints * 18 + nwindows * (kWindowSize + 4) + kTocFixed +
              kHeaderSize + npoints * 18);
  for (char c : kMagic) out.push_back(static_cast<std::uint8_t>(c));
  out.push_back(1);  // version
  out.push_back(0);  // flags
  put_le(out, index.compressed_size, 8);
  put_le(out, index.uncompressed_size, 8);
  put_le(out, index.spacing, 4);
  put_le(out, kWindowSize, 4);
  put_le(out, npoints, 4);
  const auto put_point = [&](std::uint64_t bit, std::uint64_t uncompressed, bool window) {
    put_le(out, (bit + 7) / 8, 8);
    put_le(out, uncompressed, 8);
    out.push_back(static_cast<std::uint8_t>((8 - bit % 8) % 8));
    out.push_back(window ? 1 : 0);
  };
  for (const SeekPoint& p : index.points)
    put_point(p.compressed_bit, p.uncompressed, p.has_window());
  put_point(index.compressed_size * 8, index.uncompressed_size, false);
  std::vector<std::uint8_t> scratch;
  for (const SeekPoint& p : index.points) {
    if (!p.has_window()) continue;
    const std::span<const std::uint8_t> w = index.window_of(p, scratch);
    out.insert(out.end(), kWindowSize - w.size(), 0);
    out.insert(out.end(), w.begin(), w.end());
  }
  if (key) {
    const std::size_t head_length = kHeaderSize + static_cast<std::size_t>(npoints) * 18;
    const std::size_t toc_at = out.size();
    for (char c : kKeyMagic) out.push_back(static_cast<std::uint8_t>(c));
    out.push_back(kKeyVersion);
    put_le(out, key->size, 8);
    put_le(out, static_cast<std::uint64_t>(key->mtime_ns), 8);
    put_le(out, key->tail_crc, 4);
    put_le(out, nwindows, 4);
    for (std::uint64_t k = 0; k < nwindows; ++k) {
      const std::size_t w = kHeaderSize + static_cast<std::size_t>(npoints) * 18 +
                            static_cast<std::size_t>(k) * kWindowSize;
      put_le(out, crc32_of(std::span(out).subspan(w, kWindowSize)), 4);
    }
    put_le(out, head_length, 4);
    const std::vector<std::uint8_t> head(out.begin(),
                                         out.begin() + static_cast<std::ptrdiff_t>(head_length));
    out.insert(out.end(), head.begin(), head.end());
    const std::size_t length = out.size() + 8 - toc_at;
    if (length > kMaxTocSize) invalid("more points than a table of contents holds");
    put_le(out, length, 4);
    put_le(out, crc32_of(std::span(out).subspan(toc_at)), 4);
  }
  return out;
}

void write_gzidx_file(const std::string& path, const SeekIndex& index,
                      const std::optional<IndexKey>& key) {
  const std::vector<std::uint8_t> bytes = encode_gzidx(index, key);
  core::AtomicOutputFile out(path);
  out.write(std::as_bytes(std::span(bytes)));
  out.commit();
}

}  // namespace voxpipe::gz
