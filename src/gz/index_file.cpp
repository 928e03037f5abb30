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
#include <libdeflate.h>
#include <zlib.h>

#include <algorithm>
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
constexpr std::uint8_t kKeyVersion = 1;
constexpr std::size_t kTrailerSize = 5 + 1 + 8 + 8 + 4 + 4;
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

}  // namespace

namespace {

// The bytes read_gzidx parses: an index in memory, or an index file read piece by piece.
struct IndexBytes {
  std::span<const std::uint8_t> memory;   // when file is null
  const core::InputFile* file = nullptr;
  const std::string& name;

  std::uint64_t size() const { return file ? file->size() : memory.size(); }

  void read(std::uint64_t offset, std::span<std::uint8_t> dst) const {
    if (dst.empty()) return;  // an index without points: memcpy must not see its null pointer
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
  const std::uint64_t rest = total - windows_end;
  if (rest != 0) {
    std::uint8_t t[kTrailerSize];
    if (rest == kTrailerSize) src.read(windows_end, t);
    if (rest != kTrailerSize || std::memcmp(t, kKeyMagic, 5) != 0)
      fail(ErrorCode::format, name, "trailer",
           "expected the end of the file or a " + std::to_string(kTrailerSize) +
               "-byte VPKEY trailer after the windows, but found " + std::to_string(rest) +
               " other bytes",
           windows_end);
    if (t[5] != kKeyVersion)
      fail(ErrorCode::format, name, "trailer version",
           "expected " + std::to_string(kKeyVersion) + ", but found " + std::to_string(t[5]),
           windows_end + 5);
    const auto stored = static_cast<std::uint32_t>(core::load_le(t + kTrailerSize - 4, 4));
    if (stored != src.crc(total - 4))
      fail(ErrorCode::corrupt, name, "trailer CRC32",
           "the index file is damaged: the CRC32 of its contents does not match the trailer",
           total - 4);
    key = IndexKey{core::load_le(t + 6, 8), static_cast<std::int64_t>(core::load_le(t + 14, 8)),
                   static_cast<std::uint32_t>(core::load_le(t + 22, 4))};
  }

  std::uint64_t window_at = points_end;
  for (std::uint32_t i = 0; i < npoints; ++i) {
    const Raw& r = raw[i];
    std::uint64_t w = 0;  // the point's window's offset, when it has one
    if (r.has_window) {
      w = window_at;
      window_at += window_size;
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
      }
    }
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

std::span<const std::uint8_t> SeekIndex::window_of(const SeekPoint& p,
                                                   std::vector<std::uint8_t>& scratch) const {
  if (p.window_length == 0) return p.window;
  if (!window_file)
    throw Error(ErrorCode::invalid_argument, "", "seek index",
                "a point's window is in an index file, but the index has none open");
  scratch.resize(p.window_length);
  if (window_file->read_at(p.window_offset, std::as_writable_bytes(std::span(scratch))) !=
      scratch.size())
    throw Error(ErrorCode::io, window_file->path(), "window",
                "the index file became shorter after it was read", p.window_offset);
  return scratch;
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
  out.reserve(kHeaderSize + npoints * 18 + nwindows * kWindowSize + kTrailerSize);
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
    for (char c : kKeyMagic) out.push_back(static_cast<std::uint8_t>(c));
    out.push_back(kKeyVersion);
    put_le(out, key->size, 8);
    put_le(out, static_cast<std::uint64_t>(key->mtime_ns), 8);
    put_le(out, key->tail_crc, 4);
    put_le(out, crc32_of(out), 4);
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
