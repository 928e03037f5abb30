// The decoders of Zarr chunk compressors (voxpipe/zarr.hpp: ZarrCompressor): a chunk's encoded
// bytes in, exactly the chunk's decoded size out, every size the compressed data state checked
// against what the chunk shape says before anything is allocated or written for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "voxpipe/zarr.hpp"

struct libdeflate_decompressor;
struct ZSTD_DCtx_s;

namespace voxpipe::zarr {

// Names a chunk in errors: Error(code, array, "chunk", "<key> (<compressor>): ...").
struct ChunkLabel {
  const std::string& array;
  const std::string& key;
};

// The compressor's name as Zarr metadata spell it ("none" for none).
const char* compressor_name(ZarrCompressor compressor) noexcept;

// Checks the size of an uncompressed chunk: Error(truncated) when shorter than `expected`,
// Error(format) when longer.
void check_stored_size(std::uint64_t size, std::uint64_t expected, const ChunkLabel& label);

// Decodes chunks, one after another, reusing the decompressor states (a zstd context, a
// libdeflate decompressor, made on first use). One per thread: not thread-safe.
class ChunkDecoder {
 public:
  ChunkDecoder() = default;
  ~ChunkDecoder();
  ChunkDecoder(const ChunkDecoder&) = delete;
  ChunkDecoder& operator=(const ChunkDecoder&) = delete;

  // Decodes `encoded`, compressed with `compressor` (not none), into exactly `expected` bytes.
  // `output` is called once, after the encoded bytes have been checked as far as they can be
  // without decoding (headers, sizes, what the codec's largest ratio allows), and returns where
  // the `expected` bytes go. Throws Error(truncated / corrupt / format), field "chunk", as
  // read_zarr_chunks documents; the output is then unspecified.
  void decode(ZarrCompressor compressor, std::span<const std::byte> encoded, std::size_t expected,
              const std::function<std::span<std::byte>()>& output, const ChunkLabel& label);

 private:
  void zstd(std::span<const std::byte> encoded, std::size_t expected,
            const std::function<std::span<std::byte>()>& output, const ChunkLabel& label);
  void deflate(bool gzip, std::span<const std::byte> encoded, std::size_t expected,
               const std::function<std::span<std::byte>()>& output, const ChunkLabel& label);
  void blosc(std::span<const std::byte> encoded, std::size_t expected,
             const std::function<std::span<std::byte>()>& output, const ChunkLabel& label);

  ZSTD_DCtx_s* zstd_ = nullptr;
  libdeflate_decompressor* libdeflate_ = nullptr;
};

}  // namespace voxpipe::zarr
