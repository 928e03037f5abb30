#include "foreign_formats.hpp"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <vector>

#include "core/file.hpp"
#include "voxpipe/remote.hpp"

namespace voxpipe::cli {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The first bytes of the file at `path` (up to 64 KiB), or empty when it cannot be read (a
// missing file, a folder, a FIFO: InputFile refuses those without waiting).
std::vector<std::uint8_t> head(const std::string& path) {
  try {
    const core::InputFile f(path);
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(std::min<std::uint64_t>(f.size(), 64u << 10)));
    bytes.resize(f.read_at(0, std::as_writable_bytes(std::span(bytes))));
    return bytes;
  } catch (const Error&) {
    return {};
  }
}

bool is_gzip(const std::vector<std::uint8_t>& b) { return b.size() >= 2 && b[0] == 0x1f && b[1] == 0x8b; }

// The first bytes inflated from the gzip stream `gz` (as many as its first 64 KiB give, at most
// 1 KiB: enough for every header sniffed here); empty when it does not inflate.
std::vector<std::uint8_t> inflate_head(const std::vector<std::uint8_t>& gz) {
  std::vector<std::uint8_t> out(1024);
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return {};
  z.next_in = const_cast<Bytef*>(gz.data());
  z.avail_in = static_cast<uInt>(gz.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&z, Z_SYNC_FLUSH);
  const std::size_t n = out.size() - z.avail_out;
  inflateEnd(&z);
  if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) return {};
  out.resize(n);
  return out;
}

std::int32_t int32_at(const std::vector<std::uint8_t>& b, std::size_t at, bool big) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::uint32_t{b[at + i]} << (big ? 8 * (3 - i) : 8 * i);
  return static_cast<std::int32_t>(v);
}

// What the header bytes `b` are, when one of the formats voxpipe does not read: "MGH", "MINC1",
// "MINC2", "Analyze"; "" otherwise (NIfTI, or not recognised).
std::string sniff(const std::vector<std::uint8_t>& b) {
  static const std::uint8_t kHdf5[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  if (b.size() >= 4 && std::memcmp(b.data(), "CDF", 3) == 0 && (b[3] == 1 || b[3] == 2)) return "MINC1";
  // HDF5's superblock is at 0, or after a user block of 512, 1024, ... bytes.
  for (std::size_t at = 0; at + 8 <= b.size(); at = at ? 2 * at : 512)
    if (std::memcmp(b.data() + at, kHdf5, 8) == 0) return "MINC2";
  if (b.size() >= 348) {
    for (bool big : {false, true}) {
      if (int32_at(b, 0, big) != 348) continue;
      const char* magic = reinterpret_cast<const char*>(b.data()) + 344;
      if (std::memcmp(magic, "ni1", 4) != 0 && std::memcmp(magic, "n+1", 4) != 0) return "Analyze";
      return "";
    }
  }
  // MGH (nibabel.freesurfer.mghformat): big-endian version 1, width, height, depth, frames,
  // type (0 uchar, 1 int32, 3 float32, 4 int16); 284 header bytes.
  if (b.size() >= 284 && int32_at(b, 0, true) == 1) {
    const std::int32_t type = int32_at(b, 20, true);
    bool dims = true;
    for (std::size_t k = 0; k < 4; ++k) dims = dims && int32_at(b, 4 + 4 * k, true) > 0;
    if (dims && (type == 0 || type == 1 || type == 3 || type == 4)) return "MGH";
  }
  return "";
}

Error not_read(const std::string& path, const std::string& format, const std::string& load_path) {
  return Error(ErrorCode::unsupported, path, "",
               format + " is not read by voxpipe; nibabel reads it: nibabel.load('" + load_path + "')");
}

}  // namespace

std::optional<Error> foreign_format_error(const std::string& path) {
  std::string name = lower(path);
  const bool remote = is_object_url(path) || is_zarr_path(path);
  if (ends_with(name, ".gz")) name.resize(name.size() - 3);
  // An .img is the data of a pair: its header, in the .hdr beside it, says what it is.
  std::string header_path = path;
  if (!remote && ends_with(name, ".img")) {
    const std::string stem = path.substr(0, name.size() - 4);
    const std::string ext = path.substr(name.size() - 4, 4), gz = path.substr(name.size());
    const std::string hdr = stem + (ext == ".IMG" ? ".HDR" : ".hdr") + gz;
    std::error_code ec;
    if (!std::filesystem::exists(hdr, ec))
      return Error(ErrorCode::not_found, path, "",
                   "no header " + hdr +
                       " beside it: an .img holds only the data of an Analyze 7.5 or NIfTI "
                       "pair, whose header is the .hdr (nibabel and voxpipe read the pair from both "
                       "files)");
    header_path = hdr;
  }
  std::string found;
  if (!remote) {
    std::vector<std::uint8_t> b = head(header_path);
    if (is_gzip(b)) b = inflate_head(b);
    found = sniff(b);
  }
  if (found.empty()) {
    if (ends_with(name, ".mgh") || ends_with(name, ".mgz"))
      found = "MGH";
    else if (ends_with(name, ".mnc"))
      found = "MINC";
  }
  if (found == "MGH") return not_read(path, "MGH/MGZ (FreeSurfer)", path);
  if (found == "MINC1") return not_read(path, "MINC1 (netCDF)", path);
  if (found == "MINC2") return not_read(path, "MINC2 (HDF5)", path);
  if (found == "MINC") return not_read(path, "MINC", path);
  if (found == "Analyze")
    return not_read(path, "Analyze 7.5 (a 348-byte header without NIfTI's magic)", header_path);
  return std::nullopt;
}

}  // namespace voxpipe::cli
