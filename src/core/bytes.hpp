// Little-endian integers in byte buffers: the byte order of gzip headers and trailers, GZIDX
// indexes and voxpipe's own size fields, whatever the host's.
#pragma once

#include <cstdint>

namespace voxpipe::core {

// The n-byte (n <= 8) little-endian unsigned integer at p.
inline std::uint64_t load_le(const std::uint8_t* p, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Writes the low n bytes (n <= 8) of v at p, least significant first.
inline void store_le(std::uint8_t* p, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

}  // namespace voxpipe::core
