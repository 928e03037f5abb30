// read_zarr_chunks over one chunk of arbitrary bytes. The first 3 bytes choose the array: byte 0
// the compressor (none, zstd, gzip, zlib, blosc) and the chunk order (C or F); byte 1 the stored
// element type (uint8, int16, uint16, float32, float64, complex64) and byte order; byte 2 the
// chunk shape (1..8 x 1..8) and whether the array ends inside the chunk (an edge chunk). The rest
// is the encoded chunk.
//
// Every failure must be a voxpipe::Error naming the chunk (field "chunk") or its conversion. The
// chunk is accepted exactly when a reference decoder written here from the formats (the codec
// libraries called directly: ZSTD_decompress, zlib's inflate with Python's gzip framing, c-blosc
// after its own validation) decodes it to exactly the chunk's size with nothing left over, and
// then the stored bytes read back (file_byte_order) are the reference's, element by element; a
// second read, reversed and scaled into float64 through the scratch buffer, succeeds exactly when
// the first does.
#include <blosc.h>
#include <zlib.h>
#include <zstd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "voxpipe/error.hpp"
#include "voxpipe/zarr.hpp"

namespace {

using voxpipe::DType;
using voxpipe::ZarrCompressor;
using Bytes = std::vector<std::uint8_t>;

// zstd: one-shot decode of every frame (skippable ones included); the whole input must be frames.
std::optional<Bytes> ref_zstd(std::span<const std::uint8_t> in, std::size_t expected) {
  Bytes out(expected + 1);
  const std::size_t r = ZSTD_decompress(out.data(), out.size(), in.data(), in.size());
  if (ZSTD_isError(r) || in.empty()) return std::nullopt;
  out.resize(r);
  return out;
}

// One deflate stream (raw) from `in` at `pos`, appended to `out` (at most `cap` bytes in all);
// advances pos past it. False when invalid or cut off.
bool inflate_raw(std::span<const std::uint8_t> in, std::size_t& pos, Bytes& out, std::size_t cap,
                 int window_bits) {
  z_stream z{};
  if (inflateInit2(&z, window_bits) != Z_OK) std::abort();
  z.next_in = const_cast<Bytef*>(in.data() + pos);
  z.avail_in = static_cast<uInt>(in.size() - pos);
  std::uint8_t buf[4096];
  int rc = Z_OK;
  while (rc == Z_OK && out.size() <= cap) {
    z.next_out = buf;
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    out.insert(out.end(), buf, buf + (sizeof buf - z.avail_out));
  }
  pos += z.total_in;
  inflateEnd(&z);
  return rc == Z_STREAM_END;
}

std::uint32_t le32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
         std::uint32_t{p[3]} << 24;
}

// gzip as Python's gzip module reads it (RFC 1952 members one after another, zero bytes between
// or after them; the header CRC skipped, not checked), with reserved flag bits refused as zlib and
// libdeflate refuse them.
std::optional<Bytes> ref_gzip(std::span<const std::uint8_t> in, std::size_t expected) {
  Bytes out;
  std::size_t pos = 0;
  if (in.empty()) return std::nullopt;
  while (pos < in.size()) {
    if (in.size() - pos < 10 || in[pos] != 0x1f || in[pos + 1] != 0x8b || in[pos + 2] != 8) return std::nullopt;
    const std::uint8_t flags = in[pos + 3];
    if (flags & 0xe0) return std::nullopt;
    pos += 10;
    if (flags & 4) {
      if (in.size() - pos < 2) return std::nullopt;
      const std::size_t xlen = in[pos] | std::size_t{in[pos + 1]} << 8;
      pos += 2;
      if (in.size() - pos < xlen) return std::nullopt;
      pos += xlen;
    }
    for (int bit : {8, 16})
      if (flags & bit) {
        while (pos < in.size() && in[pos] != 0) ++pos;
        if (pos == in.size()) return std::nullopt;
        ++pos;
      }
    if (flags & 2) {
      if (in.size() - pos < 2) return std::nullopt;
      pos += 2;
    }
    const std::size_t start = out.size();
    if (!inflate_raw(in, pos, out, expected, -MAX_WBITS)) return std::nullopt;
    if (in.size() - pos < 8) return std::nullopt;
    const std::uint32_t crc = static_cast<std::uint32_t>(
        crc32(0, out.data() + start, static_cast<uInt>(out.size() - start)));
    if (le32(&in[pos]) != crc || le32(&in[pos + 4]) != static_cast<std::uint32_t>(out.size() - start))
      return std::nullopt;
    pos += 8;
    while (pos < in.size() && in[pos] == 0) ++pos;
  }
  return out;
}

// zlib: one stream, nothing after it.
std::optional<Bytes> ref_zlib(std::span<const std::uint8_t> in, std::size_t expected) {
  Bytes out;
  std::size_t pos = 0;
  if (!inflate_raw(in, pos, out, expected, MAX_WBITS) || pos != in.size()) return std::nullopt;
  return out;
}

// Blosc 1: the sizes its header states checked against the buffer, then c-blosc's decoder.
std::optional<Bytes> ref_blosc(std::span<const std::uint8_t> in, std::size_t expected) {
  std::size_t nbytes = 0;
  if (blosc_cbuffer_validate(in.data(), in.size(), &nbytes) != 0 || nbytes != expected)
    return std::nullopt;
  Bytes out(expected);
  if (blosc_decompress_ctx(in.data(), out.data(), out.size(), 1) != static_cast<int>(expected))
    return std::nullopt;
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace voxpipe;
  if (size < 3) return 0;
  static constexpr ZarrCompressor kCompressors[] = {ZarrCompressor::none, ZarrCompressor::zstd,
                                                    ZarrCompressor::gzip, ZarrCompressor::zlib,
                                                    ZarrCompressor::blosc};
  static constexpr DType kTypes[] = {DType::u8, DType::i16, DType::u16, DType::f32, DType::f64, DType::c64};
  ZarrArraySpec spec;
  spec.name = "fuzz.nii.zarr/0";
  spec.compressor = kCompressors[data[0] % 5];
  spec.chunk_f_order = data[0] & 0x80;
  spec.dtype = kTypes[(data[1] & 0x0f) % 6];
  spec.big_endian = data[1] & 0x10;
  const std::int64_t c0 = 1 + (data[2] & 7), c1 = 1 + ((data[2] >> 3) & 7);
  const bool edge = (data[2] & 0x40) && c0 > 1;
  spec.chunk_shape = {c0, c1};
  spec.shape = {edge ? c0 - 1 : c0, c1};
  const std::size_t item = dtype_size(spec.dtype);
  spec.fill_value.assign(item, std::byte{0});
  const std::span<const std::uint8_t> chunk_bytes(data + 3, size - 3);
  ZarrChunk chunk;
  chunk.grid_index = {0, 0};
  chunk.key = "c/0/0";
  chunk.bytes = std::as_bytes(chunk_bytes);
  const std::size_t expected = static_cast<std::size_t>(c0 * c1) * item;

  std::optional<Bytes> ref;
  switch (spec.compressor) {
    case ZarrCompressor::none:
      if (chunk_bytes.size() == expected) ref = Bytes(chunk_bytes.begin(), chunk_bytes.end());
      break;
    case ZarrCompressor::zstd: ref = ref_zstd(chunk_bytes, expected); break;
    case ZarrCompressor::gzip: ref = ref_gzip(chunk_bytes, expected); break;
    case ZarrCompressor::zlib: ref = ref_zlib(chunk_bytes, expected); break;
    case ZarrCompressor::blosc: ref = ref_blosc(chunk_bytes, expected); break;
  }
  if (ref && ref->size() != expected) ref.reset();

  // The stored bytes, as the chunk holds them: dest in C order of the array's shape.
  const std::int64_t rows = spec.shape[0];
  std::vector<std::byte> stored(static_cast<std::size_t>(rows * c1) * item, std::byte{0xee});
  const std::vector<AxisRange> all = {{0, 1, rows}, {0, 1, c1}};
  bool accepted = true;
  try {
    read_zarr_chunks(spec, std::span(&chunk, 1), all, OutputSpec{spec.dtype, false, true, false}, 1, 0,
                     stored, std::vector<std::int64_t>{c1, 1}, ReadOptions{1});
  } catch (const Error& e) {
    if (e.field() != "chunk" || e.path() != spec.name) std::abort();
    accepted = false;
  }
  if (accepted != ref.has_value()) std::abort();
  if (accepted)
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < c1; ++j) {
        const std::int64_t at = spec.chunk_f_order ? i + j * c0 : i * c1 + j;
        if (std::memcmp(stored.data() + (i * c1 + j) * item, ref->data() + at * item, item) != 0)
          std::abort();
      }

  // Reversed along both axes and scaled into float64 (complex: the real part): the scratch path.
  std::vector<double> scaled(static_cast<std::size_t>(rows * c1));
  bool scaled_ok = true;
  try {
    read_zarr_chunks(spec, std::span(&chunk, 1),
                     std::vector<AxisRange>{{rows - 1, -1, rows}, {c1 - 1, -1, c1}},
                     OutputSpec{DType::f64, true, false, spec.dtype == DType::c64}, 0.5, -1.0,
                     std::as_writable_bytes(std::span(scaled)), std::vector<std::int64_t>{1, rows},
                     ReadOptions{2});
  } catch (const Error& e) {
    if (e.field() != "chunk") std::abort();
    scaled_ok = false;
  }
  if (scaled_ok != accepted) std::abort();
  return 0;
}
