// gz::DeflateDecoder, plain after a known window and in marker mode (the parallel engine's
// speculative stage), against zlib's inflate after the same window (inflateSetDictionary): the
// same bytes once each marker is replaced by the window byte it stands for, the same block ends,
// final flag, errors and end of stream, and window_has_markers() true exactly while the last
// 32 KiB hold a marker. The rules are tests/cpp/gz/deflate_differential.hpp's, shared with the
// unit tests. Streams of two kinds (marker_decoder_input.hpp describes the input):
//   - zlib's own, of data the input builds (much of it copied from the window, so that the
//     stream refers into it), at the input's level, strategy, memLevel and flush points; also
//     decoded from a block end in the middle, with a bit flipped, and cut short;
//   - the input's bytes as they are, from one of the first 8 bits (mostly invalid streams).
// Each decoder is driven as the engine drives it: one output limit (speculate()), or small limits
// with discard_front() (the known-window run), bits from memory or through a ByteFetch.
// Any disagreement aborts with a description.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "../cpp/gz/deflate_differential.hpp"
#include "marker_decoder_input.hpp"

namespace {

namespace mi = vpfuzz::marker;
using deflate_diff::Drive;
using deflate_diff::Result;

// Output compared per stream: deflate expands at most 1032:1 (a 1-bit length 258 code and a
// 1-bit distance code), so zlib never fills this cap on a short stream, and a decoder reading
// zero bits past the end stops there; 1 MiB keeps a long input's cost small.
std::size_t cap_for(std::size_t stream_bytes) {
  return std::min<std::size_t>(std::size_t{1} << 20, 1032 * stream_bytes + 1024);
}

// kind 0: one limit for the whole run (speculate()); 1: limits of 1-300 elements, keeping
// 32768 (below the 258 a match may need: decode() must stop cleanly); 2: up to 64 KiB, keeping a
// little more; 3: 1 MiB steps keeping 32768 (run_known_window).
Drive drive_kind(unsigned kind, bool fetch, std::uint64_t seed) {
  mi::Rng rng{seed};
  Drive d;
  switch (kind & 3) {
    case 1:
      for (int i = 0; i < 16; ++i) d.steps.push_back(1 + static_cast<std::uint32_t>(rng.next() % 300));
      d.keep = 32768;
      break;
    case 2:
      for (int i = 0; i < 16; ++i) d.steps.push_back(1 + static_cast<std::uint32_t>(rng.next() % 65536));
      d.keep = 32768 + rng.next() % 5000;
      break;
    case 3:
      d.steps.push_back(std::uint32_t{1} << 20);
      d.keep = 32768;
      break;
    default: break;
  }
  if (fetch) d.fetch_buffer = 64 + rng.next() % 4096;
  return d;
}

// zlib's decode of `stream` from `bit` after `window` (returned for the caller's next choices),
// and both decoders against it; aborts on any disagreement.
Result check(const char* what, std::span<const std::uint8_t> stream, std::uint64_t bit,
             std::span<const std::uint8_t> window, const mi::Input& in) {
  const bool fetch = (in.p[5] & 0x80) != 0;
  const Drive plain = drive_kind(in.p[5] >> 3, fetch, in.p[6]);
  const Drive marker = drive_kind(in.p[5] >> 5, fetch, in.p[6] + 1u);
  Result want;
  const std::string e =
      deflate_diff::check(stream, bit, window, cap_for(stream.size()), std::span(&plain, 1),
                          std::span(&marker, 1), &want);
  if (!e.empty()) {
    std::fprintf(stderr, "fuzz_marker_decoder: %s stream of %zu bytes from bit %llu, window %zu: %s\n",
                 what, stream.size(), static_cast<unsigned long long>(bit), window.size(), e.c_str());
    std::abort();
  }
  return want;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const mi::Input in = mi::split(data, size);
  const mi::Bytes window = mi::make_window(in);

  // The input as a raw stream, parameters included (they follow the final block of a valid one).
  check("input", std::span(data, size), in.p[5] & 7, window, in);

  std::vector<mi::Flush> flushes;
  const mi::Bytes plain = mi::decode_program(in.body, window, flushes);
  const mi::Bytes z = mi::compress(in, plain, window, flushes);
  const Result whole = check("zlib's", z, 0, window, in);
  if (whole.end != deflate_diff::End::done) {
    std::fprintf(stderr, "fuzz_marker_decoder: zlib does not read back its own stream\n");
    std::abort();
  }

  if ((in.p[4] & 0x08) && whole.boundaries.size() > 1) {
    // From a block end in the middle, as a speculative chunk starts: the window is what came
    // before it.
    const deflate_diff::Boundary& b = whole.boundaries[in.p[7] % (whole.boundaries.size() - 1)];
    mi::Bytes history(window.begin(), window.end());
    history.insert(history.end(), whole.out.begin(), whole.out.begin() + static_cast<std::ptrdiff_t>(b.out));
    check("zlib's (from a block end)", z, b.bit,
          std::span(history).subspan(history.size() - std::min<std::size_t>(history.size(), 32768)), in);
  }
  if ((in.p[4] & 0x10) && !z.empty()) {
    mi::Bytes damaged = z;
    const std::size_t bit = (in.p[7] * 2654435761u) % (damaged.size() * 8);
    damaged[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
    check("zlib's (a bit flipped)", damaged, 0, window, in);
  }
  if ((in.p[4] & 0x20) && !z.empty()) {
    const std::size_t n = (in.p[6] | in.p[7] << 8) % z.size();
    check("zlib's (cut short)", std::span(z.data(), n), 0, window, in);
  }
  return 0;
}
