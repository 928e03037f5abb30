// inflate_parallel (2 threads, tiny chunks so that inputs of a few KiB span many chunks) against
// a sequential zlib decode of the same bytes: the same output, or both an error. Every failure
// must be a voxpipe::Error; the sink must see each byte once. With stop_after at the length of
// what zlib produced (a read of a whole image), the engine still checks the trailer and what
// follows it: an error when zlib fails, zlib's bytes when it succeeds.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <vector>

#include "fuzz_support.hpp"
#include "gzip_reference.hpp"
#include "gz/parallel_inflate.hpp"
#include "voxpipe/error.hpp"

namespace {

constexpr std::size_t kMaxOutput = std::size_t{4} << 20;

// inflate_parallel as every run here calls it (2 threads, tiny chunks), stopping after `stop`.
std::uint64_t run(const std::string& path, std::uint64_t stop, const voxpipe::gz::Sink& sink) {
  voxpipe::core::InputFile file(path);
  voxpipe::gz::ParallelInflateOptions o;
  o.threads = 2;
  o.chunk_size = 512;
  o.max_output = kMaxOutput;
  o.stop_after = stop;
  return voxpipe::gz::inflate_parallel(file, sink, o);
}

// A run stopped after `stop`: true when it succeeded (then the first `stop` bytes were
// delivered into `got`).
bool stopped_read(const std::string& path, std::uint64_t stop, std::vector<std::uint8_t>& got) {
  try {
    run(path, stop, [&](std::uint64_t offset, std::span<const std::byte> d) {
      if (offset + d.size() > kMaxOutput) std::abort();
      std::memcpy(got.data() + offset, d.data(), d.size());
    });
  } catch (const voxpipe::Error&) {
    return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = vpfuzz::scratch_file("in.gz");
  vpfuzz::write_bytes(path, data, size);
  const vpfuzz::GunzipResult ref = vpfuzz::zlib_gunzip(data, size, kMaxOutput);
  const std::optional<std::vector<std::uint8_t>> want =
      ref.ok ? std::optional(ref.out) : std::nullopt;
  const std::uint64_t produced = ref.out.size();
  const bool framing_error = ref.framing_error;
  // Allocated once: touching fresh pages on every input would dominate the run time.
  static std::vector<std::uint8_t> got(kMaxOutput);
  static std::vector<std::uint8_t> seen(kMaxOutput);
  std::uint64_t seen_end = 0;
  std::mutex mu;
  std::uint64_t n = 0;
  bool failed = false;
  try {
    n = run(path, UINT64_MAX, [&](std::uint64_t offset, std::span<const std::byte> d) {
      if (offset + d.size() > kMaxOutput) std::abort();
      std::memcpy(got.data() + offset, d.data(), d.size());
      std::lock_guard lock(mu);
      seen_end = std::max<std::uint64_t>(seen_end, offset + d.size());
      for (std::size_t i = 0; i < d.size(); ++i)
        if (seen[offset + i]++) std::abort();  // delivered twice
    });
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
