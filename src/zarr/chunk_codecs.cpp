#include "zarr/chunk_codecs.hpp"

#include <blosc.h>
#include <libdeflate.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <optional>

#include "core/checked.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::zarr {

namespace {

// Deflate's largest ratio: a 258-byte match coded in 2 bits at best, 1032 bytes per input byte.
constexpr std::uint64_t kDeflateMaxRatio = 1032;
// A zstd block decodes to at most 128 KiB (ZSTD_BLOCKSIZE_MAX) and costs at least its 3-byte
// header: no frame decodes to more than that per 3 bytes.
constexpr std::uint64_t kZstdBlockMax = 128 * 1024;
constexpr std::uint64_t kZstdBlockHeader = 3;
// c-blosc 1's header (BLOSC_MIN_HEADER_LENGTH): version, versionlz, flags, typesize, then the
// decoded size, the block size and the buffer's own size, 32-bit little-endian each.
constexpr std::size_t kBloscHeader = BLOSC_MIN_HEADER_LENGTH;

[[noreturn]] void fail(ErrorCode code, const ChunkLabel& label, ZarrCompressor compressor,
                       const std::string& what, std::optional<std::uint64_t> offset = std::nullopt) {
  throw Error(code, label.array, "chunk",
              label.key + " (" + compressor_name(compressor) + "): " + what, offset);
}

std::string bytes_text(std::uint64_t n) { return std::to_string(n) + (n == 1 ? " byte" : " bytes"); }

[[noreturn]] void wrong_size(const ChunkLabel& label, ZarrCompressor compressor,
                             std::uint64_t expected, std::uint64_t got) {
  fail(ErrorCode::format, label, compressor,
       "expected the chunk to decode to " + bytes_text(expected) + ", but it decodes to " +
           std::to_string(got));
}

[[noreturn]] void too_large(const ChunkLabel& label, ZarrCompressor compressor,
                            std::uint64_t expected) {
  fail(ErrorCode::format, label, compressor,
       "expected the chunk to decode to " + bytes_text(expected) + ", but it decodes to more");
}

// Refuses, before anything is allocated for it, a chunk whose encoded bytes cannot decode to
// `expected` bytes at the codec's largest ratio.
void check_bound(std::uint64_t bound, std::uint64_t encoded, std::uint64_t expected,
                 const ChunkLabel& label, ZarrCompressor compressor) {
  if (bound < expected)
    fail(ErrorCode::format, label, compressor,
         "expected the chunk to decode to " + bytes_text(expected) + ", but its " +
             bytes_text(encoded) + " decode to at most " + std::to_string(bound));
}

std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b) {
  return core::checked_mul(a, b).value_or(std::numeric_limits<std::uint64_t>::max());
}

const std::uint8_t* u8(std::span<const std::byte> s) {
  return reinterpret_cast<const std::uint8_t*>(s.data());
}

// Whether `p[0..n)` starts (or, when shorter, could start) a zstd frame or a skippable frame.
bool zstd_magic_prefix(const std::uint8_t* p, std::size_t n) {
  static constexpr std::uint8_t kFrame[4] = {0x28, 0xb5, 0x2f, 0xfd};  // 0xFD2FB528, LE
  static constexpr std::uint8_t kSkippable[3] = {0x2a, 0x4d, 0x18};    // 0x184D2A5?, LE
  const std::size_t m = std::min<std::size_t>(n, 4);
  if (std::memcmp(p, kFrame, m) == 0) return true;
  if (m >= 1 && (p[0] & 0xf0) != 0x50) return false;
  return m <= 1 || std::memcmp(p + 1, kSkippable, m - 1) == 0;
}

// Why zlib refuses the deflate stream (gzip member or zlib stream) at `src`, which libdeflate
// found invalid: truncated when the data end before the stream does, corrupt otherwise (zlib's
// message then says what is wrong). Runs on the error path only; inflates into a small sink, at
// most about `expected` bytes.
void explain_inflate_failure(bool gzip, std::span<const std::byte> src, std::uint64_t at,
                             std::uint64_t expected, const ChunkLabel& label,
                             ZarrCompressor compressor) {
  z_stream z{};
  if (inflateInit2(&z, gzip ? 16 + MAX_WBITS : MAX_WBITS) != Z_OK) throw std::bad_alloc();
  const char* what = gzip ? "gzip member" : "zlib stream";
  z.next_in = const_cast<Bytef*>(u8(src));
  z.avail_in = static_cast<uInt>(std::min<std::size_t>(src.size(), std::numeric_limits<uInt>::max()));
  unsigned char sink[16384];
  std::uint64_t produced = 0;
  int rc = Z_OK;
  while (rc == Z_OK && produced <= expected) {
    z.next_out = sink;
    z.avail_out = sizeof sink;
    rc = inflate(&z, Z_NO_FLUSH);
    produced += sizeof sink - z.avail_out;
  }
  const std::string message = z.msg ? z.msg : "";
  const std::uint64_t stopped = at + z.total_in;
  inflateEnd(&z);
  if (rc == Z_DATA_ERROR)
    fail(ErrorCode::corrupt, label, compressor,
         std::string("expected a valid ") + what + ", but zlib finds " +
             (message.empty() ? "invalid data" : message),
         stopped);
  if (rc == Z_BUF_ERROR && z.avail_in == 0)
    fail(ErrorCode::truncated, label, compressor,
         std::string("expected more compressed data, but the chunk ends inside a ") + what,
         at + src.size());
  if (produced > expected) too_large(label, compressor, expected);
  fail(ErrorCode::corrupt, label, compressor,
       std::string("expected a valid ") + what + ", but libdeflate refuses it", at);
}

}  // namespace

const char* compressor_name(ZarrCompressor compressor) noexcept {
  switch (compressor) {
    case ZarrCompressor::none: return "none";
    case ZarrCompressor::zstd: return "zstd";
    case ZarrCompressor::gzip: return "gzip";
    case ZarrCompressor::zlib: return "zlib";
    case ZarrCompressor::blosc: return "blosc";
  }
  return "unknown";
}

void check_stored_size(std::uint64_t size, std::uint64_t expected, const ChunkLabel& label) {
  if (size < expected)
    fail(ErrorCode::truncated, label, ZarrCompressor::none,
         "expected " + bytes_text(expected) + ", but the chunk has " + std::to_string(size), size);
  if (size > expected)
    fail(ErrorCode::format, label, ZarrCompressor::none,
         "expected " + bytes_text(expected) + ", but the chunk has " + std::to_string(size));
}

ChunkDecoder::~ChunkDecoder() {
  if (zstd_) ZSTD_freeDCtx(zstd_);
  if (libdeflate_) libdeflate_free_decompressor(libdeflate_);
}

void ChunkDecoder::decode(ZarrCompressor compressor, std::span<const std::byte> encoded,
                          std::size_t expected, const std::function<std::span<std::byte>()>& output,
                          const ChunkLabel& label) {
  switch (compressor) {
    case ZarrCompressor::zstd: return zstd(encoded, expected, output, label);
    case ZarrCompressor::gzip: return deflate(true, encoded, expected, output, label);
    case ZarrCompressor::zlib: return deflate(false, encoded, expected, output, label);
    case ZarrCompressor::blosc: return blosc(encoded, expected, output, label);
    case ZarrCompressor::none: break;
  }
  throw Error(ErrorCode::invalid_argument, label.array, "compressor",
              "expected zstd, gzip, zlib or blosc, but received " +
                  std::string(compressor_name(compressor)));
}

// zstd frames, each with or without its content size, one after another; skippable frames
// allowed. The frames are walked first (each must be whole, nothing may follow the last), the
// content sizes they state and the most they can decode to checked against `expected`; then one
// ZSTD_decompressDCtx call decodes them all straight into the output, which it never writes
// beyond, and fails on a frame that decodes to more or on a checksum mismatch.
void ChunkDecoder::zstd(std::span<const std::byte> encoded, std::size_t expected,
                        const std::function<std::span<std::byte>()>& output,
                        const ChunkLabel& label) {
  constexpr ZarrCompressor kCodec = ZarrCompressor::zstd;
  const std::uint8_t* src = u8(encoded);
  const std::size_t size = encoded.size();
  if (size == 0)
    fail(ErrorCode::truncated, label, kCodec, "expected a zstd frame, but the chunk is empty", 0);
  std::uint64_t stated = 0, bound = 0;
  bool all_stated = true;
  for (std::size_t pos = 0, frame = 0; pos < size; ++frame) {
    const std::uint8_t* p = src + pos;
    const std::size_t rest = size - pos;
    const std::size_t frame_size = ZSTD_findFrameCompressedSize(p, rest);
    if (ZSTD_isError(frame_size)) {
      if (!zstd_magic_prefix(p, rest)) {
        if (pos == 0)
          fail(ErrorCode::corrupt, label, kCodec, "expected a zstd frame, but found other data", 0);
        fail(ErrorCode::corrupt, label, kCodec,
             "expected another zstd frame or the end of the chunk, but found " +
                 bytes_text(rest) + " of other data",
             pos);
      }
      if (ZSTD_getErrorCode(frame_size) == ZSTD_error_srcSize_wrong)
        fail(ErrorCode::truncated, label, kCodec,
             "expected more compressed data, but the chunk ends inside zstd frame " +
                 std::to_string(frame),
             size);
      fail(ErrorCode::corrupt, label, kCodec,
           "expected a valid zstd frame " + std::to_string(frame) + ", but zstd finds: " +
               ZSTD_getErrorName(frame_size),
           pos);
    }
    const unsigned long long content = ZSTD_getFrameContentSize(p, rest);
    if (content == ZSTD_CONTENTSIZE_ERROR)
      fail(ErrorCode::corrupt, label, kCodec,
           "expected a valid zstd frame header, but zstd cannot read it", pos);
    if (content == ZSTD_CONTENTSIZE_UNKNOWN) {
      all_stated = false;
      bound = core::checked_add(bound, saturating_mul(frame_size / kZstdBlockHeader, kZstdBlockMax))
                  .value_or(std::numeric_limits<std::uint64_t>::max());
    } else {
      stated = core::checked_add(stated, content).value_or(std::numeric_limits<std::uint64_t>::max());
      bound = core::checked_add(bound, content).value_or(std::numeric_limits<std::uint64_t>::max());
    }
    pos += frame_size;
  }
  if (stated > expected || (all_stated && stated != expected))
    fail(ErrorCode::format, label, kCodec,
         "expected the chunk to decode to " + bytes_text(expected) +
             ", but its zstd frame headers say " + std::to_string(stated));
  check_bound(bound, size, expected, label, kCodec);

  if (!zstd_ && !(zstd_ = ZSTD_createDCtx())) throw std::bad_alloc();
  const std::span<std::byte> out = output();
  const std::size_t r = ZSTD_decompressDCtx(zstd_, out.data(), expected, src, size);
  if (ZSTD_isError(r)) {
    switch (ZSTD_getErrorCode(r)) {
      case ZSTD_error_dstSize_tooSmall: too_large(label, kCodec, expected);
      case ZSTD_error_checksum_wrong:
        fail(ErrorCode::corrupt, label, kCodec,
             "expected the decoded data to match the zstd frame checksum, but they do not");
      case ZSTD_error_memory_allocation: throw std::bad_alloc();
      default:
        fail(ErrorCode::corrupt, label, kCodec,
             std::string("expected valid zstd data, but zstd finds: ") + ZSTD_getErrorName(r));
    }
  }
  if (r != expected) wrong_size(label, kCodec, expected, r);
}

// gzip: members one after another (zero bytes allowed after each, as Python's gzip reads them);
// zlib: one stream, nothing after it. libdeflate decodes each member or stream whole, with its
// CRC32/ISIZE or Adler-32 checked, straight into the output and never beyond it; when it finds
// the data invalid, zlib says why (explain_inflate_failure).
void ChunkDecoder::deflate(bool gzip, std::span<const std::byte> encoded, std::size_t expected,
                           const std::function<std::span<std::byte>()>& output,
                           const ChunkLabel& label) {
  const ZarrCompressor codec = gzip ? ZarrCompressor::gzip : ZarrCompressor::zlib;
  const std::uint8_t* src = u8(encoded);
  const std::size_t size = encoded.size();
  if (size == 0)
    fail(ErrorCode::truncated, label, codec,
         std::string("expected a ") + (gzip ? "gzip member" : "zlib stream") +
             ", but the chunk is empty",
         0);
  check_bound(saturating_mul(size, kDeflateMaxRatio), size, expected, label, codec);
  if (!libdeflate_ && !(libdeflate_ = libdeflate_alloc_decompressor())) throw std::bad_alloc();
  const std::span<std::byte> out = output();
  std::size_t pos = 0, produced = 0;
  for (;;) {
    if (gzip && pos > 0 && src[pos] != 0x1f)
      fail(ErrorCode::corrupt, label, codec,
           "expected a gzip member (1f 8b) or the end of the chunk, but found other data", pos);
    std::size_t in_used = 0, got = 0;
    const auto run = gzip ? libdeflate_gzip_decompress_ex : libdeflate_zlib_decompress_ex;
    const libdeflate_result r = run(libdeflate_, src + pos, size - pos, out.data() + produced,
                                    expected - produced, &in_used, &got);
    if (r == LIBDEFLATE_INSUFFICIENT_SPACE) too_large(label, codec, expected);
    if (r != LIBDEFLATE_SUCCESS)
      explain_inflate_failure(gzip, encoded.subspan(pos), pos, expected - produced, label, codec);
    pos += in_used;
    produced += got;
    if (!gzip) break;
    while (pos < size && src[pos] == 0) ++pos;
    if (pos == size) break;
  }
  if (pos < size)
    fail(ErrorCode::corrupt, label, codec,
         "expected the end of the chunk after the zlib stream, but found " +
             bytes_text(size - pos) + " more",
         pos);
  if (produced != expected) wrong_size(label, codec, expected, produced);
}

// One Blosc 1 buffer. c-blosc's decoder trusts the sizes in its 16-byte header (it is not given
// the buffer's length), so they are checked here first: the buffer's own size must be the
// chunk's, the decoded size the chunk's, and blosc_cbuffer_validate must accept the rest; then
// blosc_decompress_ctx (no global state, one internal thread) decodes into the output.
void ChunkDecoder::blosc(std::span<const std::byte> encoded, std::size_t expected,
                         const std::function<std::span<std::byte>()>& output,
                         const ChunkLabel& label) {
  constexpr ZarrCompressor kCodec = ZarrCompressor::blosc;
  const std::uint8_t* src = u8(encoded);
  const std::size_t size = encoded.size();
  if (size < kBloscHeader)
    fail(ErrorCode::truncated, label, kCodec,
         "expected the " + std::to_string(kBloscHeader) + "-byte Blosc header, but the chunk has " +
             bytes_text(size),
         size);
  std::size_t nbytes = 0, cbytes = 0, blocksize = 0;
  blosc_cbuffer_sizes(src, &nbytes, &cbytes, &blocksize);
  if (cbytes == 0)
    fail(ErrorCode::corrupt, label, kCodec,
         "expected a Blosc 1 buffer (format version " + std::to_string(BLOSC_VERSION_FORMAT) +
             "), but found version " +
             std::to_string(src[0]),
         0);
  if (cbytes > size)
    fail(ErrorCode::truncated, label, kCodec,
         "expected " + bytes_text(cbytes) + " (the Blosc header's size), but the chunk has " +
             std::to_string(size),
         size);
  if (cbytes < size)
    fail(ErrorCode::corrupt, label, kCodec,
         "expected the end of the chunk after the " + bytes_text(cbytes) +
             " of the Blosc buffer, but found " + bytes_text(size - cbytes) + " more",
         cbytes);
  if (nbytes != expected)
    fail(ErrorCode::format, label, kCodec,
         "expected the chunk to decode to " + bytes_text(expected) +
             ", but its Blosc header says " + std::to_string(nbytes));
  std::size_t validated = 0;
  if (blosc_cbuffer_validate(src, size, &validated) != 0 || validated != expected)
    fail(ErrorCode::corrupt, label, kCodec,
         "expected a valid Blosc header, but c-blosc's validation refuses it", 0);
  const std::span<std::byte> out = output();
  const int r = blosc_decompress_ctx(src, out.data(), expected, 1);
  if (r < 0 || (r == 0 && expected > 0))
    fail(ErrorCode::corrupt, label, kCodec,
         "expected valid Blosc data, but c-blosc fails with error " + std::to_string(r));
  if (static_cast<std::size_t>(r) != expected) wrong_size(label, kCodec, expected, static_cast<std::size_t>(r));
}

}  // namespace voxpipe::zarr
