// How fuzz_index_build reads its input, shared with make_seeds.cpp.
//
// Input: a mode byte m and 4 parameter bytes p (missing ones 0), then a body.
//   m bit 0: 0, the body is the gzip file; 1, the body is a program (marker_decoder_input.hpp's
//        decode_program, without a window) for data that zlib compresses into gzip members:
//        p[0] % 3 + 1 members (data cut into that many parts by p[3]); p[0] bit 2: zero padding
//        after the first member, bit 3: after the last;
//        p[1]: level p[1] % 10, strategy (p[1] / 10) % 5 (default, filtered, Huffman only, RLE,
//        fixed), for the first member; the others take the level and strategy of p[1] + 37 * k;
//        p[2] bits 0-2: memLevel (8, 1, 2, 3, 5, 7, 9, 8), bits 3-5: window bits 9 + (bits % 7);
//        bits 6-7: the file as it is (0, 3), one bit flipped (1; which by p[3]), or cut short
//        (2; where by p[3]).
//   m bits 1-2: spacing 0, 1, 1000, 32768; bits 3-4: 0-3 wanted offsets (from p[3]);
//   m bit 5: the two-thread build decodes every chunk ahead first.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "marker_decoder_input.hpp"

namespace vpfuzz::index_build {

using Bytes = std::vector<std::uint8_t>;

inline constexpr std::size_t kHead = 5;

struct Input {
  std::uint8_t mode = 0;
  std::uint8_t p[4] = {};
  std::span<const std::uint8_t> body;
};

inline Input split(const std::uint8_t* data, std::size_t size) {
  Input in;
  if (size > 0) in.mode = data[0];
  for (std::size_t i = 1; i < kHead && i < size; ++i) in.p[i - 1] = data[i];
  if (size > kHead) in.body = std::span(data + kHead, size - kHead);
  return in;
}

inline std::uint64_t spacing(const Input& in) {
  static constexpr std::uint64_t kSpacings[4] = {0, 1, 1000, 32768};
  return kSpacings[(in.mode >> 1) & 3];
}

// Ascending offsets up to a little past the output's end.
inline std::vector<std::uint64_t> wanted(const Input& in, std::uint64_t total) {
  std::vector<std::uint64_t> w;
  const unsigned n = (in.mode >> 3) & 3;
  marker::Rng rng{in.p[3] + 0x100u * n};
  for (unsigned k = 0; k < n; ++k) w.push_back(rng.next() % (total + 2));
  std::sort(w.begin(), w.end());
  return w;
}

inline bool decode_ahead_first(const Input& in) { return (in.mode & 0x20) != 0; }

// One gzip member of `data` with zlib: level, strategy, memLevel, window bits and the flushes
// (offsets relative to `data`, ascending).
inline Bytes gzip_member(std::span<const std::uint8_t> data, int level, int strategy,
                         int mem_level, int window_bits,
                         const std::vector<marker::Flush>& flushes) {
  z_stream z{};
  if (deflateInit2(&z, level, Z_DEFLATED, 16 + window_bits, mem_level, strategy) != Z_OK)
    std::abort();
  return marker::deflate_with_flushes(z, data, flushes);
}

// The gzip file the input stands for.
inline Bytes gzip_file(const Input& in) {
  if (!(in.mode & 1)) return Bytes(in.body.begin(), in.body.end());
  std::vector<marker::Flush> flushes;
  const Bytes data = marker::decode_program(in.body, {}, flushes);
  const unsigned members = in.p[0] % 3 + 1;
  // Cut points, ascending.
  std::vector<std::size_t> cuts{0};
  marker::Rng rng{in.p[3]};
  for (unsigned k = 1; k < members; ++k)
    cuts.push_back(data.empty() ? 0 : static_cast<std::size_t>(rng.next() % (data.size() + 1)));
  std::sort(cuts.begin(), cuts.end());
  cuts.push_back(data.size());
  Bytes file;
  for (unsigned k = 0; k < members; ++k) {
    const unsigned q = in.p[1] + 37u * k;
    std::vector<marker::Flush> mine;
    for (marker::Flush f : flushes) {
      if (f.at < cuts[k] || f.at > cuts[k + 1]) continue;
      f.at -= cuts[k];
      mine.push_back(f);
    }
    const Bytes m = gzip_member(std::span(data).subspan(cuts[k], cuts[k + 1] - cuts[k]),
                                static_cast<int>(q % 10), marker::kStrategies[(q / 10) % 5],
                                marker::kMemLevels[in.p[2] & 7], 9 + ((in.p[2] >> 3) & 7) % 7,
                                mine);
    file.insert(file.end(), m.begin(), m.end());
    if ((k == 0 && (in.p[0] & 4)) || (k + 1 == members && (in.p[0] & 8)))
      file.insert(file.end(), 3 + k, 0);
  }
  switch (in.p[2] >> 6) {
    case 1: {
      const std::size_t at = (in.p[3] * 2654435761u) % file.size();
      file[at] ^= static_cast<std::uint8_t>(1u << (in.p[3] & 7));
      break;
    }
    case 2: file.resize((in.p[3] * 2654435761u) % file.size()); break;
    default: break;
  }
  return file;
}

}  // namespace vpfuzz::index_build
