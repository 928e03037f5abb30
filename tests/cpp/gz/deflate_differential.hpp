// gz::DeflateDecoder against zlib's inflate, shared by the unit tests
// (deflate_decoder_zlib_test.cpp) and the fuzz target (tests/fuzz/fuzz_marker_decoder.cpp), so
// that both hold the decoder to one definition of "the same as zlib".
//
// zlib decodes a raw deflate stream from a bit position after a known window (up to 32 KiB): the
// reference. The decoder decodes the same bits as the parallel engine drives it (one fixed output
// limit and no discarding, as speculate() does; or small limits with discard_front() after each
// call, as the known-window run does; bits read from memory or through a ByteFetch), in plain mode
// after the window and in marker mode. compare() then says where they disagree, or returns "".
//
// Agreement, precisely:
// - zlib ends the stream: the decoder ends it too (final block, no bits past the end), with the
//   same bytes, the same block ends (bit, output offset, final flag), at the same byte.
// - zlib fails (Z_DATA_ERROR): the decoder fails with zlib's message after exactly zlib's bytes
//   and block ends, its error_bit() within kErrorBitSlack bits of zlib's position (a code-length
//   code without codes excepted: empty_code_length_code()). In marker mode
//   with a window shorter than 32 KiB, zlib's "invalid distance too far back" may instead be a
//   marker for a window byte before the known ones: the first such marker must be at zlib's
//   output offset, after zlib's bytes and block ends; what follows is not compared.
// - zlib runs out of input: the decoder must not end cleanly (an error, or bits past the end),
//   and starts with zlib's bytes and block ends.
// - zlib fills `cap` bytes first: the decoder agrees on those bytes and the block ends before.
// Values in marker mode: < 256 a byte; kMarkerBase + i window byte i of the 32 KiB (i = 0 the
// oldest), standing for window[i - (32768 - window.size())]; anything else is wrong.
// On the way the decoder must keep its own invariants: dropped() + size() counts every element,
// block_start_bit() is the previous block end, decode() makes progress with 1 KiB of headroom,
// and (marker mode) window_has_markers() is true exactly when the last 32768 elements hold a
// marker (the engine hands a chunk to a known-window decoder on false).
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "gz/deflate_decoder.hpp"

namespace deflate_diff {

using Bytes = std::vector<std::uint8_t>;

// A block end: the bit after its end-of-block code (or stored data), the output produced by then
// (window excluded), and whether the block was the final one.
struct Boundary {
  std::uint64_t bit = 0;
  std::uint64_t out = 0;
  bool final = false;
  bool operator==(const Boundary&) const = default;
};

enum class End {
  done,       // final block decoded
  error,      // invalid data
  truncated,  // zlib: needs more input; decoder: read bits past the end of the stream
  capped,     // produced more than the cap first (zlib: exactly the cap)
};

inline const char* end_name(End e) {
  switch (e) {
    case End::done: return "done";
    case End::error: return "error";
    case End::truncated: return "truncated";
    case End::capped: return "capped";
  }
  return "?";
}

// What a decode produced; `out` holds bytes (plain) or marker-mode values.
struct Result {
  End end = End::done;
  std::string message;         // End::error
  std::uint64_t error_bit = 0;  // End::error
  std::uint64_t error_block = 0;  // End::error, decoder only: the header bit of the failing block
  std::uint64_t end_bit = 0;   // End::done: the bit after the final block (zlib: rounded up to a byte)
  std::vector<std::uint16_t> out;
  std::vector<Boundary> boundaries;
  std::string broken;  // decoder only: an invariant it broke on the way, "" when none
};

// error_bit() names the offending part of the stream; zlib stops elsewhere inside it (after a
// code the decoder did not consume, before the 32 bits of stored lengths the decoder read): at
// most a length code, its extra bits and a distance code apart.
inline constexpr std::uint64_t kErrorBitSlack = 48;

inline std::span<const std::uint8_t> last_32k(std::span<const std::uint8_t> window) {
  return window.size() > 32768 ? window.subspan(window.size() - 32768) : window;
}

// zlib's inflate from `start_bit` after `window`, stopping at each block end (Z_BLOCK) and after
// `cap` bytes of output.
inline Result zlib_inflate(std::span<const std::uint8_t> stream, std::uint64_t start_bit,
                           std::span<const std::uint8_t> window, std::size_t cap) {
  Result r;
  if (cap == 0) std::abort();
  window = last_32k(window);
  z_stream z{};
  if (inflateInit2(&z, -15) != Z_OK) std::abort();
  if (!window.empty() &&
      inflateSetDictionary(&z, window.data(), static_cast<uInt>(window.size())) != Z_OK)
    std::abort();
  std::uint64_t byte = start_bit / 8;
  const unsigned shift = static_cast<unsigned>(start_bit % 8);
  if (byte >= stream.size()) {
    inflateEnd(&z);
    r.end = End::truncated;
    return r;
  }
  if (shift) {
    // The bits of the first byte after start_bit go in through inflatePrime (as zran.c does).
    if (inflatePrime(&z, static_cast<int>(8 - shift), stream[byte] >> shift) != Z_OK) std::abort();
    ++byte;
  }
  // The output grows as it fills (a fuzz target runs this for every input: fresh pages cost).
  Bytes out;
  z.next_in = const_cast<Bytef*>(stream.data() + byte);
  z.avail_in = static_cast<uInt>(stream.size() - byte);
  auto bit_now = [&] { return (byte + z.total_in) * 8 - static_cast<unsigned>(z.data_type & 7); };
  for (;;) {
    if (z.avail_out == 0 && out.size() < cap) {
      out.resize(std::min(cap, std::max<std::size_t>(2 * out.size(), 65536)));
      z.next_out = out.data() + z.total_out;
      z.avail_out = static_cast<uInt>(out.size() - z.total_out);
    }
    const int rc = inflate(&z, Z_BLOCK);
    // Bit 128: stopped at a block end (mode TYPE); bit 64: that block was the final one.
    if (rc == Z_OK && (z.data_type & 128))
      r.boundaries.push_back(Boundary{bit_now(), z.total_out, (z.data_type & 64) != 0});
    if (rc == Z_STREAM_END) {
      r.end = End::done;
      r.end_bit = (byte + z.total_in) * 8;  // zlib drops the bits to the byte boundary
      break;
    }
    if (rc == Z_DATA_ERROR) {
      r.end = End::error;
      r.message = z.msg ? z.msg : "";
      r.error_bit = bit_now();
      break;
    }
    if (rc == Z_BUF_ERROR) {
      r.end = z.total_out == cap ? End::capped : End::truncated;
      break;
    }
    if (rc != Z_OK) std::abort();
  }
  out.resize(z.total_out);
  r.out.assign(out.begin(), out.end());
  inflateEnd(&z);
  return r;
}

// How the decoder is driven.
struct Drive {
  // Output headroom of each decode() call, cycled; empty: one limit of window + cap + 1 KiB
  // for the whole run (speculate()'s form).
  std::vector<std::uint32_t> steps;
  // discard_front(keep) after each call (the known-window run keeps 32768); 0: never.
  std::size_t keep = 0;
  // Bits through a ByteFetch with a buffer of this many bytes (the engine's form); 0: a span.
  std::size_t fetch_buffer = 0;
};

// Runs DeflateDecoder<T> from `start_bit`: T = uint8_t after `window` (start_with_window),
// T = uint16_t in marker mode (start_with_markers; `window` unused). Stops after more than `cap`
// elements of output.
template <class T>
Result run_decoder(std::span<const std::uint8_t> stream, std::uint64_t start_bit,
                   std::span<const std::uint8_t> window, std::size_t cap, const Drive& drive) {
  using voxpipe::gz::BitReader;
  using voxpipe::gz::DecodeStatus;
  constexpr bool kMarkers = std::is_same_v<T, std::uint16_t>;
  Result r;
  window = last_32k(window);
  BitReader reader =
      drive.fetch_buffer
          ? BitReader(
                [stream](std::uint64_t offset, std::span<std::uint8_t> dst) -> std::size_t {
                  if (offset >= stream.size()) return 0;
                  const std::size_t n = std::min<std::size_t>(dst.size(), stream.size() - offset);
                  std::memcpy(dst.data(), stream.data() + offset, n);
                  return n;
                },
                stream.size(), drive.fetch_buffer)
          : BitReader(stream);
  voxpipe::gz::DeflateDecoder<T> dec(reader);
  if constexpr (kMarkers) {
    dec.start_with_markers(start_bit);
  } else {
    dec.start_with_window(start_bit, window);
  }
  const std::size_t ws = kMarkers ? 32768 : window.size();
  auto broke = [&](const std::string& what) {
    if (r.broken.empty()) r.broken = what + " (output " + std::to_string(r.out.size()) + ")";
  };
  if (dec.window_size() != ws) broke("window_size() " + std::to_string(dec.window_size()));
  // Output limits never reach past this (absolute, window included): zero bits past the end of
  // a stream can decode to anything up to the limit.
  const std::uint64_t last_limit = ws + cap + 1024;
  std::uint64_t block_start = start_bit;
  // Absolute index (window included) of the last marker: the window's last element at first.
  std::uint64_t last_marker = 32767;
  std::size_t step_index = 0;
  std::size_t extra = 0;  // headroom added after a call that could not progress
  for (;;) {
    std::size_t limit = static_cast<std::size_t>(last_limit - dec.dropped());
    if (!drive.steps.empty()) {
      limit = std::min(limit, dec.size() + drive.steps[step_index++ % drive.steps.size()] + extra);
    }
    const std::uint64_t total_before = dec.dropped() + dec.size();
    const std::uint64_t bit_before = reader.position();
    const DecodeStatus s = dec.decode(limit);
    const std::uint64_t total = dec.dropped() + dec.size();
    if (total < ws + r.out.size()) {
      broke("dropped() + size() went back");
      r.end = End::error;
      return r;
    }
    // Collect what is new; every element is looked at once (the brute-force marker scan).
    const std::size_t from = ws + r.out.size() - static_cast<std::size_t>(dec.dropped());
    for (std::size_t i = from; i < dec.size(); ++i) {
      const std::uint16_t v = dec.data()[i];
      if (kMarkers && v >= 256) last_marker = dec.dropped() + i;
      r.out.push_back(v);
    }
    if (s == DecodeStatus::error) {
      r.end = End::error;
      r.message = dec.error_message() ? dec.error_message() : "(no message)";
      r.error_bit = dec.error_bit();
      r.error_block = block_start;
      return r;
    }
    if (reader.overrun()) {
      r.end = End::truncated;
      return r;
    }
    if constexpr (kMarkers) {
      const bool has = dec.window_has_markers();
      if (has != (total - last_marker <= 32768))
        broke(std::string("window_has_markers() ") + (has ? "true" : "false") +
              " with the last marker " + std::to_string(total - last_marker) + " elements from the end");
    }
    if (s == DecodeStatus::block_end) {
      if (dec.in_block()) broke("in_block() after block_end");
      if (dec.block_start_bit() != block_start)
        broke("block_start_bit() " + std::to_string(dec.block_start_bit()) + ", the block began at " +
              std::to_string(block_start));
      block_start = reader.position();
      r.boundaries.push_back(Boundary{block_start, r.out.size(), dec.block_final()});
      if (dec.block_final()) {
        r.end = End::done;
        r.end_bit = block_start;
        return r;
      }
    }
    if (r.out.size() > cap) {
      r.end = End::capped;
      return r;
    }
    if (s == DecodeStatus::output_full && total == total_before && reader.position() == bit_before) {
      if (limit >= dec.size() + 1024) {
        broke("decode() returned output_full without progress with " +
              std::to_string(limit - dec.size()) + " elements of headroom");
        r.end = End::error;
        return r;
      }
      extra += 1024;  // callers give at least this much; less may legitimately be too little
    } else {
      extra = 0;
    }
    if (drive.keep) dec.discard_front(std::max<std::size_t>(drive.keep, 32768));
  }
}

inline std::string describe(const Result& r) {
  std::string s = end_name(r.end);
  if (r.end == End::error)
    s += " \"" + r.message + "\" at bit " + std::to_string(r.error_bit);
  if (r.end == End::done) s += " at bit " + std::to_string(r.end_bit);
  s += ", " + std::to_string(r.out.size()) + " elements, " + std::to_string(r.boundaries.size()) +
       " block ends";
  return s;
}

// True when the block at `bit` of `stream` is a dynamic block whose code-length code has no
// codes at all. zlib accepts such a code and reads every code length as 0 from one bit each
// (inflate_table's table "to force an error" is never checked there), to fail at the missing
// end-of-block code; the decoder refuses the code itself, "invalid code lengths set". Both
// refuse the block; only the message and the bit differ.
inline bool empty_code_length_code(std::span<const std::uint8_t> stream, std::uint64_t bit) {
  auto read = [&](unsigned n) {
    std::uint32_t v = 0;
    for (unsigned i = 0; i < n; ++i, ++bit)
      if (bit / 8 < stream.size()) v |= static_cast<std::uint32_t>((stream[bit / 8] >> (bit % 8)) & 1) << i;
    return v;
  };
  if (((read(3) >> 1) & 3) != 2) return false;
  read(10);
  const unsigned ncode = read(4) + 4;
  for (unsigned i = 0; i < ncode; ++i)
    if (read(3) != 0) return false;
  return true;
}

// Where `got` (a decoder's run in plain or marker mode over `stream`, after `window`) disagrees
// with `want` (zlib's from the same bit after the same window, capped at `cap`); "" when they
// agree.
inline std::string compare(const Result& want, const Result& got, std::span<const std::uint8_t> stream,
                           std::span<const std::uint8_t> window, bool markers, std::size_t cap) {
  window = last_32k(window);
  const std::string mode = markers ? "marker mode: " : "plain mode: ";
  const std::string both = " (zlib: " + describe(want) + "; decoder: " + describe(got) + ")";
  if (!got.broken.empty()) return mode + got.broken + both;
  const std::size_t unknown = 32768 - window.size();  // markers standing for no known byte
  // Maps the decoder's output to bytes up to the first marker of an unknown byte (`bad`).
  std::size_t bad = got.out.size();
  for (std::size_t i = 0; i < got.out.size(); ++i) {
    const std::uint16_t v = got.out[i];
    if (v < 256) continue;
    if (!markers || v < voxpipe::gz::kMarkerBase)
      return mode + "value " + std::to_string(v) + " at " + std::to_string(i) + both;
    if (static_cast<std::size_t>(v - voxpipe::gz::kMarkerBase) < unknown) {
      bad = i;
      break;
    }
  }
  auto byte_at = [&](std::size_t i) -> int {
    const std::uint16_t v = got.out[i];
    return v < 256 ? v : window[v - voxpipe::gz::kMarkerBase - unknown];
  };
  // The first `n` elements equal zlib's bytes.
  auto same_bytes = [&](std::size_t n) -> std::string {
    if (got.out.size() < n || want.out.size() < n)
      return mode + "needed " + std::to_string(n) + " elements to compare" + both;
    for (std::size_t i = 0; i < n; ++i) {
      if (i >= bad)
        return mode + "marker for a window byte before the known " + std::to_string(window.size()) +
               " at " + std::to_string(i) + both;
      if (byte_at(i) != want.out[i])
        return mode + "byte " + std::to_string(i) + " is " + std::to_string(byte_at(i)) +
               " (value " + std::to_string(got.out[i]) + "), zlib has " +
               std::to_string(want.out[i]) + both;
    }
    return "";
  };
  // The block ends with output up to `n` (all of them when n is SIZE_MAX; `below`: output < n).
  auto same_boundaries = [&](std::uint64_t n, bool below) -> std::string {
    auto keep = [&](const std::vector<Boundary>& v) {
      std::vector<Boundary> k;
      for (const Boundary& b : v)
        if (below ? b.out < n : b.out <= n) k.push_back(b);
      return k;
    };
    const std::vector<Boundary> a = keep(want.boundaries), b = keep(got.boundaries);
    for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
      if (i < a.size() && i < b.size() && a[i] == b[i]) continue;
      auto show = [](const std::vector<Boundary>& v, std::size_t i) {
        if (i >= v.size()) return std::string("none");
        return "bit " + std::to_string(v[i].bit) + " output " + std::to_string(v[i].out) +
               (v[i].final ? " final" : "");
      };
      return mode + "block end " + std::to_string(i) + ": zlib " + show(a, i) + ", decoder " +
             show(b, i) + both;
    }
    return "";
  };
  std::string e;
  switch (want.end) {
    case End::done:
      if (got.end != End::done || got.out.size() != want.out.size())
        return mode + "zlib ends the stream, the decoder does not" + both;
      if (!(e = same_bytes(want.out.size())).empty()) return e;
      if (!(e = same_boundaries(UINT64_MAX, false)).empty()) return e;
      if ((got.end_bit + 7) / 8 * 8 != want.end_bit) return mode + "the stream ends elsewhere" + both;
      return "";
    case End::error:
      if (markers && want.message == "invalid distance too far back" && bad < got.out.size()) {
        if (bad != want.out.size())
          return mode + "first marker for an unknown byte at " + std::to_string(bad) +
                 ", zlib's distance too far back at " + std::to_string(want.out.size()) + both;
        if (!(e = same_bytes(bad)).empty()) return e;
        return same_boundaries(bad, false);
      }
      if (got.end != End::error || got.out.size() != want.out.size())
        return mode + "zlib fails, the decoder does not fail at the same output" + both;
      if (!(e = same_bytes(want.out.size())).empty()) return e;
      if (!(e = same_boundaries(UINT64_MAX, false)).empty()) return e;
      if (got.message == "invalid code lengths set" &&
          want.message == "invalid code -- missing end-of-block" &&
          empty_code_length_code(stream, got.error_block))
        return "";
      if (got.message != want.message) return mode + "another error than zlib's" + both;
      if (got.error_bit + kErrorBitSlack < want.error_bit ||
          got.error_bit > want.error_bit + kErrorBitSlack)
        return mode + "error_bit() far from where zlib failed" + both;
      return "";
    case End::truncated:
      if (got.end != End::error && got.end != End::truncated)
        return mode + "zlib needs more input, the decoder does not" + both;
      if (!(e = same_bytes(want.out.size())).empty()) return e;
      if (got.boundaries.size() < want.boundaries.size() ||
          !std::equal(want.boundaries.begin(), want.boundaries.end(), got.boundaries.begin()))
        return mode + "block ends differ before the end of the input" + both;
      return "";
    case End::capped:
      if (!(e = same_bytes(cap)).empty()) return e;
      return same_boundaries(cap, true);
  }
  return "";
}

// zlib once (its result in *reference when asked), then the decoder in plain mode and in marker
// mode under each drive given; "" when all agree. The decoder runs until a little past zlib's
// output: after that it can only be reading zero bits past the end, or be wrong already.
inline std::string check(std::span<const std::uint8_t> stream, std::uint64_t start_bit,
                         std::span<const std::uint8_t> window, std::size_t cap,
                         std::span<const Drive> plain, std::span<const Drive> marker,
                         Result* reference = nullptr) {
  const Result want = zlib_inflate(stream, start_bit, window, cap);
  if (reference) *reference = want;
  const std::size_t run_cap = std::min(cap, want.out.size() + 1024);
  for (std::size_t i = 0; i < plain.size(); ++i) {
    const std::string e =
        compare(want, run_decoder<std::uint8_t>(stream, start_bit, window, run_cap, plain[i]),
                stream, window, false, cap);
    if (!e.empty()) return "drive " + std::to_string(i) + ", " + e;
  }
  for (std::size_t i = 0; i < marker.size(); ++i) {
    const std::string e =
        compare(want, run_decoder<std::uint16_t>(stream, start_bit, window, run_cap, marker[i]),
                stream, window, true, cap);
    if (!e.empty()) return "drive " + std::to_string(i) + ", " + e;
  }
  return "";
}

}  // namespace deflate_diff
