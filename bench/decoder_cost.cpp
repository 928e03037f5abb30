// The deflate decoder alone, one thread, on chunks of a real gzip file: what decoding a chunk costs
// in marker mode (16-bit symbols, the window unknown: a speculative chunk of the parallel inflate)
// and with plain bytes after the known window, against ISA-L (what a known-window chunk runs)
// and zlib's inflate, each after the same 32 KiB window from the same block boundary to the same
// end. Issue 36's goal for the decoder: marker mode near ISA-L.
//
// The file is inflated once with our decoder (every block boundary recorded, the output kept,
// so the whole output must fit in memory); each chunk then starts at the first block boundary
// at or after k x CHUNK compressed bytes and runs to the first one at or after (k + 1) x CHUNK.
// Every decode is checked against the kept output (markers mapped to the window). Each decoder
// decodes each chunk --repeat times into a buffer it reuses (warm memory: first touch is the
// engine's business, bench/chunk_cost.cpp); the fastest time counts. Prints per chunk the output,
// where its window became clean in marker mode, each rate, and the ratios to ISA-L.
//
// Usage: voxpipe_bench_decoder_cost FILE.gz [--chunk MIB] [--chunks N] [--repeat R]
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if VOXPIPE_HAVE_ISAL
#include <isa-l/igzip_lib.h>
#endif

#include "core/file.hpp"
#include "gz/deflate_decoder.hpp"
#include "gz/known_window.hpp"
#include "voxpipe/error.hpp"

namespace {

using voxpipe::gz::BitReader;
using voxpipe::gz::DecodeStatus;
using voxpipe::gz::DeflateDecoder;

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int usage() {
  std::fprintf(stderr,
               "usage: voxpipe_bench_decoder_cost FILE.gz [--chunk MIB] [--chunks N] "
               "[--repeat R]\n");
  return 2;
}

struct Boundary {
  std::uint64_t bit;
  std::uint64_t offset;
};

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "voxpipe_bench_decoder_cost: %s\n", what.c_str());
  std::exit(1);
}

// Decodes [from, to) (block boundaries) with `decoder` started by `start`, to the end bit.
template <class T, class Start>
void decode_span(DeflateDecoder<T>& dec, BitReader& reader, Start start, std::uint64_t end_bit) {
  start();
  while (reader.position() < end_bit) {
    if (dec.decode(SIZE_MAX) != DecodeStatus::block_end) fail("decode failed");
  }
}

int run(int argc, char** argv) {
  if (argc < 2) return usage();
  std::size_t chunk = std::size_t{8} << 20;
  std::size_t chunks = 4;
  int repeat = 5;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    const std::string v = argv[++i];
    if (a == "--chunk") {
      chunk = static_cast<std::size_t>(std::stod(v) * (1 << 20));
    } else if (a == "--chunks") {
      chunks = std::stoul(v);
    } else if (a == "--repeat") {
      repeat = std::max(1, std::stoi(v));
    } else {
      return usage();
    }
  }
  voxpipe::core::InputFile input(argv[1]);
  std::vector<std::uint8_t> file(static_cast<std::size_t>(input.size()));
  if (input.read_at(0, std::as_writable_bytes(std::span(file))) != file.size()) fail("short read");
  const std::uint64_t first_bit = voxpipe::gz::inflate_detail::read_gzip_header(input, 0, true) * 8;

  // The whole member once, recording every block boundary.
  BitReader whole(std::span<const std::uint8_t>(file.data(), file.size()));
  DeflateDecoder<std::uint8_t> all(whole);
  all.start_with_window(first_bit, {});
  std::vector<Boundary> blocks;
  for (;;) {
    blocks.push_back({whole.position(), all.size()});
    if (all.decode(SIZE_MAX) != DecodeStatus::block_end) fail("the file does not inflate");
    if (all.block_final()) break;
  }
  blocks.push_back({whole.position(), all.size()});
  const std::uint8_t* out = all.data();

  std::printf("%s: %zu bytes compressed, %zu inflated, %zu blocks; chunks of %.1f MiB, best of %d\n",
              argv[1], file.size(), all.size(), blocks.size() - 1,
              static_cast<double>(chunk) / (1 << 20), repeat);
  double sum_marker = 0, sum_plain = 0, sum_isal = 0, sum_zlib = 0;
  for (std::size_t c = 1; c <= chunks; ++c) {
    const std::uint64_t from = std::uint64_t{c} * chunk * 8;
    const std::uint64_t to = from + std::uint64_t{chunk} * 8;
    std::size_t b = 0;
    while (b < blocks.size() && blocks[b].bit < from) ++b;
    std::size_t e = b;
    while (e < blocks.size() && blocks[e].bit < to) ++e;
    if (e >= blocks.size() || blocks[b].offset < 32768) break;
    const std::uint64_t bit = blocks[b].bit, end_bit = blocks[e].bit;
    const std::size_t offset = blocks[b].offset;
    const std::size_t n = blocks[e].offset - offset;
    const std::span<const std::uint8_t> window(out + offset - 32768, 32768);

    BitReader rm(std::span<const std::uint8_t>(file.data(), file.size()));
    DeflateDecoder<std::uint16_t> marker(rm);
    marker.reserve_output(32768 + n + 1024);
    double t_marker = 1e30;
    std::size_t clean_at = n;
    for (int r = 0; r < repeat; ++r) {
      const double t = now();
      decode_span(marker, rm, [&] { marker.start_with_markers(bit); }, end_bit);
      t_marker = std::min(t_marker, now() - t);
    }
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint16_t v = marker.data()[32768 + i];
      const std::uint8_t got = v < 256 ? static_cast<std::uint8_t>(v) : window[v - 0x8000];
      if (got != out[offset + i]) fail("marker mode differs at output byte " + std::to_string(i));
    }
    {  // Where the window became clean (the engine switches to ISA-L there).
      marker.start_with_markers(bit);
      while (rm.position() < end_bit && marker.window_has_markers()) {
        if (marker.decode(SIZE_MAX) != DecodeStatus::block_end) fail("decode failed");
      }
      if (!marker.window_has_markers()) clean_at = marker.size() - 32768;
    }

    BitReader rp(std::span<const std::uint8_t>(file.data(), file.size()));
    DeflateDecoder<std::uint8_t> plain(rp);
    plain.reserve_output(32768 + n + 1024);
    double t_plain = 1e30;
    for (int r = 0; r < repeat; ++r) {
      const double t = now();
      decode_span(plain, rp, [&] { plain.start_with_window(bit, window); }, end_bit);
      t_plain = std::min(t_plain, now() - t);
    }
    if (std::memcmp(plain.data() + 32768, out + offset, n) != 0) fail("plain mode differs");

    std::vector<std::uint8_t> buffer(n + 4096);
    // zlib: raw inflate primed with the bits before the first whole byte.
    double t_zlib = 1e30;
    for (int r = 0; r < repeat; ++r) {
      z_stream z{};
      if (inflateInit2(&z, -15) != Z_OK) fail("zlib init");
      const double t = now();
      inflateSetDictionary(&z, window.data(), 32768);
      std::uint64_t byte = bit / 8;
      if (bit % 8) {
        inflatePrime(&z, static_cast<int>(8 - bit % 8), file[byte] >> (bit % 8));
        ++byte;
      }
      z.next_in = file.data() + byte;
      z.avail_in = static_cast<uInt>((end_bit + 7) / 8 - byte);
      z.next_out = buffer.data();
      z.avail_out = static_cast<uInt>(n);
      inflate(&z, Z_SYNC_FLUSH);
      t_zlib = std::min(t_zlib, now() - t);
      if (z.total_out != n || std::memcmp(buffer.data(), out + offset, n) != 0) fail("zlib differs");
      inflateEnd(&z);
    }
    double t_isal = 0;
#if VOXPIPE_HAVE_ISAL
    t_isal = 1e30;
    for (int r = 0; r < repeat; ++r) {
      inflate_state st;
      const double t = now();
      isal_inflate_init(&st);
      st.crc_flag = ISAL_DEFLATE;
      isal_inflate_set_dict(&st, const_cast<std::uint8_t*>(window.data()), 32768);
      std::uint64_t byte = bit / 8;
      if (bit % 8) {
        st.read_in = file[byte] >> (bit % 8);
        st.read_in_length = static_cast<std::int32_t>(8 - bit % 8);
        ++byte;
      }
      st.next_in = file.data() + byte;
      st.avail_in = static_cast<std::uint32_t>((end_bit + 7) / 8 - byte);
      st.next_out = buffer.data();
      st.avail_out = static_cast<std::uint32_t>(n);
      isal_inflate(&st);
      t_isal = std::min(t_isal, now() - t);
      if (st.total_out != n || std::memcmp(buffer.data(), out + offset, n) != 0)
        fail("ISA-L differs");
    }
#endif
    const double mb = static_cast<double>(n) / 1e6;
    std::printf("chunk %zu: %.1f MB out, window clean after %.1f MB; MB/s: marker %.0f, plain %.0f, "
                "zlib %.0f",
                c, mb, static_cast<double>(clean_at) / 1e6, mb / t_marker, mb / t_plain, mb / t_zlib);
    if (t_isal > 0)
      std::printf(", ISA-L %.0f; time / ISA-L's: marker %.2f, plain %.2f, zlib %.2f", mb / t_isal,
                  t_marker / t_isal, t_plain / t_isal, t_zlib / t_isal);
    std::printf("\n");
    sum_marker += t_marker;
    sum_plain += t_plain;
    sum_zlib += t_zlib;
    sum_isal += t_isal;
  }
  if (sum_isal > 0)
    std::printf("all chunks, time / ISA-L's: marker %.2f, plain %.2f, zlib %.2f\n",
                sum_marker / sum_isal, sum_plain / sum_isal, sum_zlib / sum_isal);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "voxpipe_bench_decoder_cost: %s\n", e.what());
    return 1;
  }
}
