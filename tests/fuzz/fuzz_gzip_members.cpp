// Sized-member gzip ('VP', BGZF) over arbitrary bytes: the member table, parallel inflation of
// all members, and random reads through GzipSource either throw voxpipe::Error or give exactly
// the bytes zlib inflates from the same file.
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/file.hpp"
#include "fuzz_support.hpp"
#include "gz/gzip_source.hpp"
#include "gz/members.hpp"
#include "voxpipe/error.hpp"

namespace {

constexpr std::size_t kMaxOutput = std::size_t{4} << 20;

// zlib's reading of the same bytes: every member, as gzip -d would (nullopt on any error).
std::optional<std::vector<std::uint8_t>> zlib_gunzip(const std::uint8_t* data, std::size_t size) {
  std::vector<std::uint8_t> out;
  std::size_t pos = 0;
  while (pos < size) {
    z_stream z{};
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return std::nullopt;
    z.next_in = const_cast<Bytef*>(data + pos);
    z.avail_in = static_cast<uInt>(size - pos);
    std::uint8_t buf[16384];
    int rc;
    do {
      z.next_out = buf;
      z.avail_out = sizeof buf;
      rc = inflate(&z, Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END) {
        inflateEnd(&z);
        return std::nullopt;
      }
      out.insert(out.end(), buf, buf + (sizeof buf - z.avail_out));
      if (out.size() > kMaxOutput) {
        inflateEnd(&z);
        return std::nullopt;
      }
    } while (rc != Z_STREAM_END);
    pos = size - z.avail_in;
    inflateEnd(&z);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = vpfuzz::scratch_file("members.gz");
  vpfuzz::write_bytes(path, data, size);
  std::optional<std::vector<voxpipe::gz::Member>> members;
  try {
    voxpipe::core::InputFile file(path);
    members = voxpipe::gz::read_member_table(file);
    if (!members) return 0;
    std::uint64_t total = 0, at = 0;
    for (const auto& m : *members) {
      if (m.offset != at || m.uncompressed_offset != total) std::abort();  // tiles the file
      at += m.size;
      total += m.uncompressed_size;
    }
    if (at > size) std::abort();
    if (total > kMaxOutput) return 0;
    std::vector<std::uint8_t> out(total);
    std::vector<std::uint8_t> seen(total, 0);
    voxpipe::gz::inflate_members(file, *members, 0, total, 2,
                                 [&](std::uint64_t o, std::span<const std::byte> d) {
                                   std::memcpy(out.data() + o, d.data(), d.size());
                                   for (std::size_t i = 0; i < d.size(); ++i) ++seen[o + i];
                                 });
    for (auto s : seen)
      if (s != 1) std::abort();
    // Everything we accept, zlib accepts and inflates to the same bytes.
    const auto expect = zlib_gunzip(data, size);
    if (!expect) {
      // Zero padding after the last member: zlib's loop above treats it as a broken member.
      bool padded = true;
      for (std::size_t i = at; i < size; ++i) padded = padded && data[i] == 0;
      if (!padded) std::abort();
    } else if (*expect != out) {
      std::abort();
    }
    // Random access through the source agrees.
    voxpipe::gz::GzipSource source(path);
    if (!source.random_access()) std::abort();
    std::vector<std::byte> piece(777);
    for (std::uint64_t o = 0; o < total; o += 1000) {
      const std::size_t got = source.read_at(o, piece);
      const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(piece.size(), total - o));
      if (got != want || std::memcmp(piece.data(), out.data() + o, got) != 0) std::abort();
    }
  } catch (const voxpipe::Error&) {
  }
  return 0;
}
