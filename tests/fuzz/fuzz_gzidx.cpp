// gz::read_gzidx over arbitrary bytes: it either throws voxpipe::Error or returns an index that
// keeps the SeekIndex invariants and survives encode -> read unchanged; and decoding a real gzip
// file through such an index (however wrong its points and windows) throws voxpipe::Error or
// succeeds, never crashes. The same bytes as an object read by ranges (gz::read_gzidx_toc: the
// version-2 trailer, then windows as decodes need them, each checked by its CRC32): an error or
// an index with the same invariants, which decodes as above; when the whole read succeeds too,
// both give the same points and key.
//
// Windows are 32 KiB, more than -max_len allows, so an input whose windows are cut short is
// also tried with its windows completed by zero bytes.
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "core/file.hpp"
#include "core/range_input.hpp"
#include "fuzz_support.hpp"
#include "gz/seek_index.hpp"
#include "voxpipe/error.hpp"

namespace {

namespace gz = voxpipe::gz;

// The sample's uncompressed bytes.
std::vector<std::uint8_t>& sample_payload() {
  static std::vector<std::uint8_t> payload;
  return payload;
}

// A two-member gzip file of 96 KiB of text, written once per process.
const std::string& sample_gz() {
  static const std::string path = [] {
    std::vector<std::uint8_t> data;
    for (int m = 0; m < 2; ++m) {
      std::vector<std::uint8_t> text(48 << 10);
      std::uint32_t x = 12345u + static_cast<std::uint32_t>(m);
      for (auto& c : text) {
        x = x * 1103515245u + 12345u;
        c = static_cast<std::uint8_t>("abcdefgh \n"[(x >> 16) % 10]);
      }
      sample_payload().insert(sample_payload().end(), text.begin(), text.end());
      z_stream z{};
      if (deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        std::abort();
      std::vector<std::uint8_t> out(deflateBound(&z, static_cast<uLong>(text.size())) + 64);
      z.next_in = text.data();
      z.avail_in = static_cast<uInt>(text.size());
      z.next_out = out.data();
      z.avail_out = static_cast<uInt>(out.size());
      if (deflate(&z, Z_FINISH) != Z_STREAM_END) std::abort();
      out.resize(z.total_out);
      deflateEnd(&z);
      data.insert(data.end(), out.begin(), out.end());
    }
    const std::string p = vpfuzz::scratch_file("sample.gz");
    vpfuzz::write_bytes(p, data.data(), data.size());
    return p;
  }();
  return path;
}

void decode_through(const gz::SeekIndex& index);

void check_invariants(const gz::SeekIndex& index) {
  const auto& pts = index.points;
  if (index.uncompressed_size > 0 && pts.empty()) std::abort();
  for (std::size_t i = 0; i < pts.size(); ++i) {
    const auto& p = pts[i];
    if (i == 0 && p.uncompressed != 0) std::abort();
    if (i > 0 && (p.compressed_bit <= pts[i - 1].compressed_bit ||
                  p.uncompressed < pts[i - 1].uncompressed))
      std::abort();
    if (p.compressed_bit >= index.compressed_size * 8) std::abort();
    if (p.uncompressed >= index.uncompressed_size) std::abort();
    const std::size_t w = p.window_length != 0 ? p.window_length : p.window.size();
    if (w > gz::kWindowSize || w > p.uncompressed) std::abort();
  }
  if (index.window_slot != 0 && index.window_crcs.size() != pts.size()) std::abort();
}

void check(const gz::SeekIndex& index, const std::optional<gz::IndexKey>& key) {
  const auto& pts = index.points;
  check_invariants(index);
  // encode -> read gives the same index (encode must accept whatever read returns).
  std::optional<gz::IndexKey> key2;
  const gz::SeekIndex again = gz::read_gzidx(gz::encode_gzidx(index, key), "again", &key2);
  if (key2 != key || again.compressed_size != index.compressed_size ||
      again.uncompressed_size != index.uncompressed_size || again.spacing != index.spacing ||
      again.points.size() != pts.size())
    std::abort();
  for (std::size_t i = 0; i < pts.size(); ++i)
    if (again.points[i].compressed_bit != pts[i].compressed_bit ||
        again.points[i].uncompressed != pts[i].uncompressed ||
        again.points[i].window != pts[i].window)
      std::abort();

  decode_through(index);
}

void decode_through(const gz::SeekIndex& index) {
  const auto& pts = index.points;
  // Decode a real file through it.
  voxpipe::core::InputFile file(sample_gz());
  gz::SeekIndex use = index;
  use.compressed_size = file.size();
  if (pts.empty() || pts.back().compressed_bit >= file.size() * 8) return;
  const std::uint64_t end = std::min<std::uint64_t>(index.uncompressed_size, 1 << 18);
  const std::uint64_t begin = end / 3;
  std::uint64_t delivered = 0;
  try {
    gz::inflate_range(file, use, begin, end, pts.size() % 2 + 1,
                      [&](std::uint64_t offset, std::span<const std::byte> data) {
                        if (offset < begin || offset + data.size() > end) std::abort();
                        __atomic_add_fetch(&delivered, data.size(), __ATOMIC_RELAXED);
                      });
  } catch (const voxpipe::Error&) {
    return;
  }
  if (delivered != end - begin) std::abort();

  // A read of the whole stream is checked against the members' trailers, however wrong the
  // index's points and windows: it either fails or gives exactly the file's bytes.
  const std::vector<std::uint8_t>& truth = sample_payload();
  if (index.uncompressed_size != truth.size()) return;
  std::vector<std::uint8_t> out(truth.size());
  for (unsigned threads : {1u, 2u}) {
    try {
      gz::inflate_range(file, use, 0, truth.size(), threads,
                        [&](std::uint64_t offset, std::span<const std::byte> data) {
                          std::memcpy(out.data() + offset, data.data(), data.size());
                        });
    } catch (const voxpipe::Error&) {
      continue;
    }
    if (out != truth) std::abort();
  }
}

std::uint64_t le(const std::uint8_t* p, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void try_read(const std::uint8_t* data, std::size_t size, bool pad) {
  try {
    std::optional<gz::IndexKey> key;
    const gz::SeekIndex index = gz::read_gzidx(std::span(data, size), "in.gzidx", &key);
    check(index, key);
  } catch (const voxpipe::Error& e) {
    if (!pad || e.field() != "windows") return;
    // The points are complete but the windows are cut short: complete them with zeros, as
    // the header and the points say (at most 4 MiB more).
    const int point_size = data[5] == 0 ? 17 : 18;
    const std::uint64_t npoints = le(data + 31, 4), window_size = le(data + 27, 4);
    const std::uint64_t points_end = 35 + npoints * point_size;
    std::uint64_t nwindows = 0;
    for (std::uint64_t i = 0; i < npoints; ++i)
      nwindows += point_size == 17 ? (i != 0) : (data[35 + i * 18 + 17] != 0);
    const std::uint64_t needed = points_end + nwindows * window_size;
    if (needed <= size || needed - size > (std::uint64_t{4} << 20)) return;
    std::vector<std::uint8_t> longer(data, data + size);
    longer.resize(needed, 0);
    try_read(longer.data(), longer.size(), false);
  }
}

// The bytes as an object read by ranges, served from memory.
void try_read_by_ranges(const std::uint8_t* data, std::size_t size) {
  auto object = std::make_shared<std::vector<std::byte>>(
      reinterpret_cast<const std::byte*>(data), reinterpret_cast<const std::byte*>(data) + size);
  voxpipe::RangeFetcher fetch = [object](std::span<const voxpipe::ByteRange> ranges) {
    std::vector<voxpipe::FetchedBytes> out;
    for (const voxpipe::ByteRange& r : ranges) {
      if (r.offset > object->size() || r.size > object->size() - r.offset) std::abort();
      out.push_back({std::span<const std::byte>(object->data() + r.offset, r.size), object});
    }
    return out;
  };
  auto input = std::make_shared<voxpipe::core::RangeInput>(
      "s3://b/in.gzidx", size, fetch, voxpipe::FetchedBytes{}, voxpipe::RemoteInputOptions{});
  std::optional<gz::IndexKey> key;
  gz::SeekIndex index;
  try {
    index = gz::read_gzidx_toc(input, &key);
  } catch (const voxpipe::Error&) {
    return;
  }
  check_invariants(index);
  try {
    std::optional<gz::IndexKey> key2;
    const gz::SeekIndex whole = gz::read_gzidx(std::span(data, size), "in.gzidx", &key2);
    if (key2 != key || whole.points.size() != index.points.size()) std::abort();
    for (std::size_t i = 0; i < whole.points.size(); ++i)
      if (whole.points[i].compressed_bit != index.points[i].compressed_bit ||
          whole.points[i].uncompressed != index.points[i].uncompressed)
        std::abort();
  } catch (const voxpipe::Error&) {
    // A damaged window or head is found by the whole read at once, by ranges when it is used.
  }
  decode_through(index);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try_read(data, size, true);
  try_read_by_ranges(data, size);
  return 0;
}
