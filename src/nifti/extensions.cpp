#include <bit>
#include <cstring>
#include <string>

#include "nifti/internal.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::nifti {

namespace {
std::int32_t to_i32(const std::uint8_t* p, bool swap) {
  std::uint32_t u;
  std::memcpy(&u, p, 4);
  if (swap) u = __builtin_bswap32(u);
  return static_cast<std::int32_t>(u);
}
void put_i32(std::vector<std::uint8_t>& out, std::int32_t v, bool swap) {
  auto u = static_cast<std::uint32_t>(v);
  if (swap) u = __builtin_bswap32(u);
  std::uint8_t b[4];
  std::memcpy(b, &u, 4);
  out.insert(out.end(), b, b + 4);
}
constexpr bool kBig = std::endian::native == std::endian::big;
}  // namespace

std::vector<NiftiExtension> read_extensions(core::ByteSource& source, const NiftiHeader& h,
                                            std::span<const std::uint8_t> head, bool pair,
                                            const std::string& path, const NiftiLimits& limits) {
  std::vector<NiftiExtension> out;
  const std::size_t hsize = h.header_size();
  if (head.size() < hsize + 4 || head[hsize] == 0) return out;
  const bool swap = h.big_endian != kBig;
  std::uint64_t pos = hsize + 4;
  // Bytes available for extensions in a single file: up to the data. A single file whose data
  // starts inside the header region (vox_offset 0) has none (nibabel would parse the data).
  std::int64_t remaining = -1;
  if (!pair) {
    if (h.vox_offset < static_cast<double>(pos)) return out;
    remaining = static_cast<std::int64_t>(h.vox_offset) - static_cast<std::int64_t>(pos);
  }
  std::uint64_t total = 0;
  while (pair || remaining >= 16) {
    std::uint8_t def[8];
    std::size_t got = source.read_at(pos, std::as_writable_bytes(std::span(def)));
    if (got == 0 && pair) break;
    if (got != 8)
      throw Error(ErrorCode::truncated, path, "extension header",
                  "failed to read extension header: expected 8 bytes, but found " +
                      std::to_string(got),
                  pos);
    const std::int32_t esize = to_i32(def, swap);
    const std::int32_t ecode = to_i32(def + 4, swap);
    if (esize < 8)
      throw Error(ErrorCode::format, path, "extension esize",
                  "expected at least 8, but found " + std::to_string(esize), pos);
    if (!pair && esize > remaining)
      throw Error(ErrorCode::format, path, "extension esize",
                  "extension of " + std::to_string(esize) + " bytes runs past vox_offset (" +
                      std::to_string(remaining) + " bytes left for extensions)",
                  pos);
    total += static_cast<std::uint64_t>(esize);
    if (total > limits.max_extension_bytes)
      throw Error(ErrorCode::limit, path, "extension esize",
                  "extensions exceed the limit of " + std::to_string(limits.max_extension_bytes) +
                      " bytes",
                  pos);
    NiftiExtension ext;
    ext.code = ecode;
    // Read in bounded pieces so that a bogus esize cannot make us allocate what the file lacks.
    std::uint64_t left = static_cast<std::uint64_t>(esize) - 8, at = pos + 8;
    while (left > 0) {
      std::size_t piece = static_cast<std::size_t>(std::min<std::uint64_t>(left, 1 << 20));
      std::size_t old = ext.content.size();
      ext.content.resize(old + piece);
      std::size_t n = source.read_at(at, std::as_writable_bytes(std::span(ext.content).subspan(old)));
      if (n != piece)
        throw Error(ErrorCode::truncated, path, "extension",
                    "extension read failed: expected " + std::to_string(esize - 8) +
                        " bytes of content, but the file ends first",
                    pos);
      left -= piece;
      at += piece;
    }
    while (!ext.content.empty() && ext.content.back() == 0) ext.content.pop_back();
    out.push_back(std::move(ext));
    pos += static_cast<std::uint64_t>(esize);
    if (!pair) remaining -= esize;
  }
  return out;
}

std::vector<std::uint8_t> encode_extensions(const std::vector<NiftiExtension>& extensions,
                                            bool big_endian, bool single_file) {
  std::vector<std::uint8_t> out;
  const bool swap = big_endian != kBig;
  if (extensions.empty()) {
    if (single_file) out.assign(4, 0);
    return out;
  }
  out = {1, 0, 0, 0};
  for (const auto& e : extensions) {
    const std::size_t esize = (e.content.size() + 23) / 16 * 16;
    put_i32(out, static_cast<std::int32_t>(esize), swap);
    put_i32(out, e.code, swap);
    out.insert(out.end(), e.content.begin(), e.content.end());
    out.resize(out.size() + (esize - 8 - e.content.size()), 0);
  }
  return out;
}

}  // namespace voxpipe::nifti
