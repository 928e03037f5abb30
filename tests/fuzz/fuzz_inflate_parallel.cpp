// inflate_parallel (2 threads, tiny chunks so that inputs of a few KiB span many chunks) against
// a sequential zlib decode of the same bytes: the same output, or both an error. Every failure
// must be a voxpipe::Error; the sink must see each byte once. With stop_after at the length of
// what zlib produced (a read of a whole image), the engine still checks the trailer and what
// follows it: an error when zlib fails, zlib's bytes when it succeeds.
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <vector>

#include "fuzz_support.hpp"
#include "gz/parallel_inflate.hpp"
#include "voxpipe/error.hpp"

namespace {

constexpr std::size_t kMaxOutput = std::size_t{4} << 20;

// zlib: all members, zero padding after a member; nullopt on any error or beyond kMaxOutput.
// `produced`: the bytes zlib output before it stopped, error or not; `framing_error`: it failed
// outside the deflate data (a trailer, a member header, the file ending), where deflate decoders
// never disagree on where the damage is noticed (they may on some bad Huffman tables).
std::optional<std::vector<std::uint8_t>> zlib_gunzip(const std::uint8_t* data, std::size_t size,
                                                     std::uint64_t* produced = nullptr,
                                                     bool* framing_error = nullptr) {
  std::vector<std::uint8_t> out;
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
      out.insert(out.end(), buf.data(), buf.data() + (buf.size() - z.avail_out));
      if (rc == Z_BUF_ERROR && z.avail_in == 0) {
        rc = Z_DATA_ERROR;
        z.msg = nullptr;  // the input ends
      }
      if (out.size() > kMaxOutput) rc = Z_MEM_ERROR;
    } while (rc == Z_OK);
    pos += z.total_in;
    if (framing_error)
      *framing_error = rc == Z_DATA_ERROR &&
                       (z.msg == nullptr || std::strstr(z.msg, "check") ||
                        std::strstr(z.msg, "header") || std::strstr(z.msg, "method") ||
                        std::strstr(z.msg, "flags"));
    inflateEnd(&z);
    if (produced) *produced = out.size();
    if (rc != Z_STREAM_END) return std::nullopt;
  }
  return out;
}

// inflate_parallel with stop_after = `stop`: true when it succeeded (then the first `stop` bytes
// were delivered into `got`).
bool stopped_read(const std::string& path, std::uint64_t stop, std::vector<std::uint8_t>& got) {
  try {
    voxpipe::core::InputFile file(path);
    voxpipe::gz::ParallelInflateOptions o;
    o.threads = 2;
    o.chunk_size = 512;
    o.max_output = kMaxOutput;
    o.stop_after = stop;
    voxpipe::gz::inflate_parallel(
        file,
        [&](std::uint64_t offset, std::span<const std::byte> d) {
          if (offset + d.size() > kMaxOutput) std::abort();
          std::memcpy(got.data() + offset, d.data(), d.size());
        },
        o);
  } catch (const voxpipe::Error&) {
    return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = vpfuzz::scratch_file("in.gz");
  vpfuzz::write_bytes(path, data, size);
  std::uint64_t produced = 0;
  bool framing_error = false;
  const std::optional<std::vector<std::uint8_t>> want =
      zlib_gunzip(data, size, &produced, &framing_error);
  // Allocated once: touching fresh pages on every input would dominate the run time.
  static std::vector<std::uint8_t> got(kMaxOutput);
  static std::vector<std::uint8_t> seen(kMaxOutput);
  std::uint64_t seen_end = 0;
  std::mutex mu;
  std::uint64_t n = 0;
  bool failed = false;
  try {
    voxpipe::core::InputFile file(path);
    voxpipe::gz::ParallelInflateOptions o;
    o.threads = 2;
    o.chunk_size = 512;
    o.max_output = kMaxOutput;
    n = voxpipe::gz::inflate_parallel(
        file,
        [&](std::uint64_t offset, std::span<const std::byte> d) {
          if (offset + d.size() > kMaxOutput) std::abort();
          std::memcpy(got.data() + offset, d.data(), d.size());
          std::lock_guard lock(mu);
          seen_end = std::max<std::uint64_t>(seen_end, offset + d.size());
          for (std::size_t i = 0; i < d.size(); ++i)
            if (seen[offset + i]++) std::abort();  // delivered twice
        },
        o);
  } catch (const voxpipe::Error&) {
    failed = true;
  }
  bool all_seen = true;
  for (std::size_t i = 0; i < n && !failed; ++i) all_seen = all_seen && seen[i];
  std::fill(seen.begin(), seen.begin() + static_cast<std::ptrdiff_t>(seen_end), 0);
  if (failed) {
    if (want) std::abort();  // zlib reads it, we do not
  } else {
    // zlib stops at kMaxOutput (we throw limit there), so success implies zlib success.
    if (!want || n != want->size() || !all_seen) std::abort();
    if (n && std::memcmp(got.data(), want->data(), n) != 0) std::abort();
  }
  if (produced > 0 && produced <= kMaxOutput && (want || framing_error)) {
    const bool ok = stopped_read(path, produced, got);
    if (ok != want.has_value()) std::abort();
    if (ok && std::memcmp(got.data(), want->data(), produced) != 0) std::abort();
  }
  return 0;
}
