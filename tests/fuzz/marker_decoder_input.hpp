// How fuzz_marker_decoder reads its input, shared with make_seeds.cpp (which writes inputs whose
// streams refer into the window the parameters make).
//
// Input: a body, then 8 parameter bytes (an input of 8 bytes or fewer is all body, parameters 0).
// The body is used twice: as a raw deflate stream exactly as it is (with the parameters after it,
// which follow the final block of a valid stream), and as a program that builds data for zlib to
// compress (decode_program).
//   p[0] bits 0-1: window size: 32768, 0, 1 + p[1] % 128, 1 + (p[1] | p[2] << 8) % 32768;
//        bits 2-3: window content: pseudo-random (seed p[1], p[2]), text, skewed bytes, the body.
//   p[3]: zlib level p[3] % 10, strategy (p[3] / 10) % 5 (default, filtered, Huffman only, RLE,
//        fixed).
//   p[4] bits 0-2: zlib memLevel (8, 1, 2, 3, 5, 7, 9, 8); 0x08: also decode from a block end in
//        the middle of zlib's stream; 0x10: also with one bit of zlib's stream flipped; 0x20: also
//        with zlib's stream cut short.
//   p[5] bits 0-2: the bit the body's stream is decoded from; bits 3-4, 5-6: how the plain and
//        the marker decoder are driven (drive_kind); bit 7: bits read through a ByteFetch.
//   p[6]: seed of the output limits; p[7]: which block end / bit / length the options above pick.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

namespace vpfuzz::marker {

using Bytes = std::vector<std::uint8_t>;

inline constexpr std::size_t kParams = 8;
// Data the program may build: enough for several blocks of every memLevel, small enough for
// thousands of inputs a second.
inline constexpr std::size_t kMaxData = std::size_t{128} << 10;

struct Input {
  std::span<const std::uint8_t> body;
  std::uint8_t p[kParams] = {};
};

inline Input split(const std::uint8_t* data, std::size_t size) {
  Input in;
  if (size <= kParams) {
    in.body = std::span(data, size);
    return in;
  }
  in.body = std::span(data, size - kParams);
  std::memcpy(in.p, data + size - kParams, kParams);
  return in;
}

// splitmix64: a small generator whose sequence make_seeds.cpp can rely on.
struct Rng {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

// Bytes whose frequencies halve from one value to the next: Huffman codes up to 15 bits.
inline std::uint8_t skewed_byte(Rng& rng) {
  return static_cast<std::uint8_t>(5 * __builtin_ctzll(rng.next() | (std::uint64_t{1} << 40)));
}

inline Bytes make_window(const Input& in) {
  const std::uint8_t* p = in.p;
  std::size_t n = 32768;
  switch (p[0] & 3) {
    case 1: n = 0; break;
    case 2: n = 1 + p[1] % 128u; break;
    case 3: n = 1 + (p[1] | p[2] << 8) % 32768u; break;
    default: break;
  }
  Bytes w(n);
  Rng rng{static_cast<std::uint64_t>(p[1] | p[2] << 8)};
  static constexpr char kText[] = "the volume of the brain, the voxels of the mask; ";
  for (std::size_t i = 0; i < n; ++i) {
    switch ((p[0] >> 2) & 3) {
      case 0: w[i] = static_cast<std::uint8_t>(rng.next()); break;
      case 1: w[i] = static_cast<std::uint8_t>(kText[i % (sizeof kText - 1)]); break;
      case 2: w[i] = skewed_byte(rng); break;
      default: w[i] = in.body.empty() ? 0 : in.body[i % in.body.size()]; break;
    }
  }
  return w;
}

// A point where the compressor is told to flush, or to change its parameters.
struct Flush {
  std::size_t at;   // data offset
  int mode;         // Z_PARTIAL_FLUSH, Z_SYNC_FLUSH, Z_FULL_FLUSH, Z_BLOCK; or -1: deflateParams
  int level = 0;    // mode -1
  int strategy = 0; // mode -1
};

inline constexpr int kStrategies[5] = {Z_DEFAULT_STRATEGY, Z_FILTERED, Z_HUFFMAN_ONLY, Z_RLE,
                                       Z_FIXED};

// The body as a program: each op byte b, by b >> 5:
//   0, 1: (b & 63) + 1 literal bytes that follow;  2: 3 + 8 * (b & 31) bytes of the window from
//   the offset in the next 2 bytes;  3: 3 + 16 * (b & 31) bytes repeated from 1 + (next 2 bytes)
//   back;  4: a run of 32 * ((b & 31) + 1) copies of the next byte;  5: 64 * ((b & 31) + 1)
//   random bytes;  6: a flush (b & 7: 1 partial, 2 sync, 3 full, 4 block, 5-7 new parameters
//   from the next byte; 0 nothing);  7: 64 * ((b & 31) + 1) skewed bytes.
inline Bytes decode_program(std::span<const std::uint8_t> prog, std::span<const std::uint8_t> window,
                            std::vector<Flush>& flushes) {
  Bytes d;
  Rng rng{0x5eed};
  std::size_t i = 0;
  auto next = [&]() -> unsigned { return i < prog.size() ? prog[i++] : 0u; };
  while (i < prog.size() && d.size() < kMaxData) {
    const unsigned b = prog[i++];
    const unsigned a = b & 31;
    switch (b >> 5) {
      case 0:
      case 1:
        for (unsigned k = 0; k < (b & 63) + 1 && i < prog.size(); ++k) d.push_back(prog[i++]);
        break;
      case 2: {
        const unsigned off = next() | next() << 8;
        if (window.empty()) break;
        for (unsigned k = 0; k < 3 + 8 * a; ++k) d.push_back(window[(off + k) % window.size()]);
        break;
      }
      case 3: {
        const std::size_t dist = 1 + (next() | next() << 8);
        if (dist > d.size()) break;
        for (unsigned k = 0; k < 3 + 16 * a; ++k) d.push_back(d[d.size() - dist]);
        break;
      }
      case 4: d.insert(d.end(), 32 * (a + 1), static_cast<std::uint8_t>(next())); break;
      case 5:
        for (unsigned k = 0; k < 64 * (a + 1); ++k) d.push_back(static_cast<std::uint8_t>(rng.next()));
        break;
      case 6: {
        const unsigned m = b & 7;
        if (m == 0) break;
        if (m <= 4) {
          static constexpr int kModes[5] = {0, Z_PARTIAL_FLUSH, Z_SYNC_FLUSH, Z_FULL_FLUSH, Z_BLOCK};
          flushes.push_back(Flush{d.size(), kModes[m]});
        } else {
          const unsigned q = next();
          flushes.push_back(Flush{d.size(), -1, static_cast<int>(q % 10), kStrategies[(q / 10) % 5]});
        }
        break;
      }
      default:
        for (unsigned k = 0; k < 64 * (a + 1); ++k) d.push_back(skewed_byte(rng));
        break;
    }
  }
  if (d.size() > kMaxData) d.resize(kMaxData);
  return d;
}

// zlib's memLevel for a parameter byte's low 3 bits.
inline constexpr int kMemLevels[8] = {8, 1, 2, 3, 5, 7, 9, 8};

// Runs `z`, set up for deflate, over `data` with the flushes (offsets in increasing order) and
// finishes the stream; returns what zlib wrote and ends `z`.
inline Bytes deflate_with_flushes(z_stream& z, std::span<const std::uint8_t> data,
                                  const std::vector<Flush>& flushes) {
  Bytes out;
  auto room = [&](std::size_t n) {
    if (out.size() - z.total_out >= n) return;
    out.resize(std::max(2 * out.size(), static_cast<std::size_t>(z.total_out) + n));
    z.next_out = out.data() + z.total_out;
    z.avail_out = static_cast<uInt>(out.size() - z.total_out);
  };
  // Feeds data[from, to) with `mode`; done when zlib has taken it all and left output room.
  auto feed = [&](std::size_t from, std::size_t to, int mode) {
    z.next_in = const_cast<Bytef*>(data.data() + from);
    z.avail_in = static_cast<uInt>(to - from);
    for (;;) {
      room(4096);
      const int rc = deflate(&z, mode);
      if (rc == Z_STREAM_END) return;
      if (rc != Z_OK && rc != Z_BUF_ERROR) std::abort();
      if (mode != Z_FINISH && z.avail_in == 0 && z.avail_out != 0) return;
    }
  };
  std::size_t done = 0;
  for (const Flush& f : flushes) {
    const std::size_t at = std::min(f.at, data.size());
    if (at < done) continue;
    if (f.mode >= 0) {
      feed(done, at, f.mode);
    } else {
      feed(done, at, Z_NO_FLUSH);
      // deflateParams compresses what it holds first; Z_BUF_ERROR asks for room and a retry.
      for (int tries = 0; tries < 8; ++tries) {
        room(std::size_t{1} << 18);
        const int rc = deflateParams(&z, f.level, f.strategy);
        if (rc == Z_OK) break;
        if (rc != Z_BUF_ERROR) std::abort();
      }
    }
    done = at;
  }
  feed(done, data.size(), Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// zlib's raw deflate of `data` after the dictionary `window`, with the flushes (offsets in
// increasing order) and the parameters of `in`.
inline Bytes compress(const Input& in, std::span<const std::uint8_t> data,
                      std::span<const std::uint8_t> window, const std::vector<Flush>& flushes) {
  z_stream z{};
  if (deflateInit2(&z, in.p[3] % 10, Z_DEFLATED, -15, kMemLevels[in.p[4] & 7],
                   kStrategies[(in.p[3] / 10) % 5]) != Z_OK)
    std::abort();
  if (!window.empty() &&
      deflateSetDictionary(&z, window.data(), static_cast<uInt>(window.size())) != Z_OK)
    std::abort();
  return deflate_with_flushes(z, data, flushes);
}

}  // namespace vpfuzz::marker
