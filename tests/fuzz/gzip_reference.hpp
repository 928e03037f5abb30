// The reference the gzip fuzz targets are compared with: zlib, read with Python gzip's rules
// (members one after another, zero padding after a member, anything else an error).
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace vpfuzz {

struct GunzipResult {
  std::vector<std::uint8_t> out;  // what zlib produced before it stopped, error or not
  bool ok = false;                // the whole input is valid and inflates to at most max_output
  // It failed outside the deflate data (a trailer, a member header, the input ending), where
  // deflate decoders never disagree on where the damage is noticed (they may on some bad
  // Huffman tables).
  bool framing_error = false;
};

inline GunzipResult zlib_gunzip(const std::uint8_t* data, std::size_t size,
                                std::size_t max_output) {
  GunzipResult r;
  std::size_t pos = 0;
  bool first = true;
  static std::vector<std::uint8_t> buf(1 << 16);
  while (first || pos < size) {
    if (!first) {
      while (pos < size && data[pos] == 0) ++pos;
      if (pos == size) break;
    }
    first = false;
    z_stream z{};
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) std::abort();
    z.next_in = const_cast<Bytef*>(data + pos);
    z.avail_in = static_cast<uInt>(size - pos);
    int rc;
    do {
      z.next_out = buf.data();
      z.avail_out = static_cast<uInt>(buf.size());
      rc = inflate(&z, Z_NO_FLUSH);
      r.out.insert(r.out.end(), buf.data(), buf.data() + (buf.size() - z.avail_out));
      if (rc == Z_BUF_ERROR && z.avail_in == 0) {
        rc = Z_DATA_ERROR;
        z.msg = nullptr;  // the input ends
      }
      if (r.out.size() > max_output) rc = Z_MEM_ERROR;
    } while (rc == Z_OK);
    pos += z.total_in;
    r.framing_error = rc == Z_DATA_ERROR &&
                      (z.msg == nullptr || std::strstr(z.msg, "check") ||
                       std::strstr(z.msg, "header") || std::strstr(z.msg, "method") ||
                       std::strstr(z.msg, "flags"));
    inflateEnd(&z);
    if (rc != Z_STREAM_END) return r;
  }
  r.ok = true;
  return r;
}

}  // namespace vpfuzz
