// Our deflate decoder against zlib: fixed, stored and dynamic blocks decode to zlib's bytes,
// block boundaries are reported where zlib's Z_BLOCK sees them, marker mode resolves to the
// same bytes once the window is known, and invalid streams fail as zlib's rules say.
#include "gz/deflate_decoder.hpp"

#include <zlib.h>

#include "test_support.hpp"

namespace {

using voxpipe::gz::BitReader;
using voxpipe::gz::DecodeStatus;
using voxpipe::gz::DeflateDecoder;
using vptest::Bytes;
using vptest::raw_deflate;

struct Boundary {
  std::uint64_t bit;
  std::uint64_t out;
};

// Block ends as zlib sees them (inflate with Z_BLOCK), final block excluded.
std::vector<Boundary> zlib_boundaries(const Bytes& stream) {
  std::vector<Boundary> b;
  z_stream z{};
  inflateInit2(&z, -15);
  z.next_in = const_cast<Bytef*>(stream.data());
  z.avail_in = static_cast<uInt>(stream.size());
  std::vector<std::uint8_t> out(1 << 16);
  std::uint64_t total = 0;
  for (;;) {
    z.next_out = out.data();
    z.avail_out = static_cast<uInt>(out.size());
    const int rc = inflate(&z, Z_BLOCK);
    total += out.size() - z.avail_out;
    if (rc == Z_STREAM_END || rc < 0) break;
    if ((z.data_type & 128) && !(z.data_type & 64) && z.total_in > 0)
      b.push_back(Boundary{z.total_in * 8 - (z.data_type & 7), total});
  }
  inflateEnd(&z);
  // Z_BLOCK also stops right after the last header of a stream; keep only distinct positions.
  b.erase(std::unique(b.begin(), b.end(), [](auto& x, auto& y) { return x.bit == y.bit; }), b.end());
  return b;
}

// Decodes a whole raw stream in plain mode; records block ends.
Bytes decode_plain(const Bytes& stream, std::vector<Boundary>* ends = nullptr,
                   std::string* error = nullptr) {
  BitReader reader(std::span(stream.data(), stream.size()));
  DeflateDecoder<std::uint8_t> dec(reader);
  dec.start_with_window(0, {});
  Bytes out;
  std::size_t emitted = 0;
  for (;;) {
    const DecodeStatus s = dec.decode(dec.size() + 100000);
    if (s == DecodeStatus::error) {
      if (error) *error = dec.error_message();
      return {};
    }
    out.insert(out.end(), dec.data() + emitted, dec.data() + dec.size());
    dec.discard_front(32768);
    emitted = dec.size();
    if (s == DecodeStatus::block_end) {
      if (dec.block_final()) return out;
      if (ends) ends->push_back(Boundary{reader.position(), out.size()});
    }
    if (reader.overrun()) {
      if (error) *error = "overrun";
      return {};
    }
  }
}

TEST(DeflateDecoder, FixedStoredAndDynamicBlocksMatchZlib) {
  const Bytes data = vptest::concat({vptest::text_bytes(300000, 1), vptest::random_bytes(70000, 2),
                                     Bytes(100000, 7), vptest::text_bytes(50000, 3)});
  struct Case {
    int level;
    int strategy;
  };
  for (Case c : {Case{0, Z_DEFAULT_STRATEGY}, Case{1, Z_DEFAULT_STRATEGY}, Case{6, Z_FIXED},
                 Case{6, Z_DEFAULT_STRATEGY}, Case{9, Z_DEFAULT_STRATEGY}, Case{6, Z_RLE},
                 Case{6, Z_HUFFMAN_ONLY}}) {
    const Bytes z = raw_deflate(data, c.level, c.strategy);
    std::vector<Boundary> ends;
    EXPECT_TRUE(decode_plain(z, &ends) == data) << c.level << "/" << c.strategy;
    const std::vector<Boundary> want = zlib_boundaries(z);
    ASSERT_EQ(ends.size(), want.size()) << c.level << "/" << c.strategy;
    for (std::size_t i = 0; i < ends.size(); ++i) {
      EXPECT_EQ(ends[i].bit, want[i].bit);
      EXPECT_EQ(ends[i].out, want[i].out);
    }
  }
  EXPECT_TRUE(decode_plain(raw_deflate(Bytes{}, 6)).empty());
}

TEST(DeflateDecoder, MarkerModeResolvesToTheBytesOnceTheWindowIsKnown) {
  const Bytes data = vptest::concat({vptest::text_bytes(400000, 5), vptest::random_bytes(40000, 6),
                                     vptest::text_bytes(200000, 7)});
  for (int level : {1, 6, 9}) {
    const Bytes z = raw_deflate(data, level);
    const std::vector<Boundary> bounds = zlib_boundaries(z);
    int tested = 0;
    for (const Boundary& b : bounds) {
      if (b.out < 32768) continue;
      BitReader reader(std::span(z.data(), z.size()));
      DeflateDecoder<std::uint16_t> dec(reader);
      dec.start_with_markers(b.bit);
      bool saw_marker = false;
      for (;;) {
        const DecodeStatus s = dec.decode(SIZE_MAX);
        ASSERT_NE(s, DecodeStatus::error) << dec.error_message();
        if (s == DecodeStatus::block_end && dec.block_final()) break;
      }
      ASSERT_EQ(dec.size() - 32768, data.size() - b.out);
      for (std::size_t i = 32768; i < dec.size(); ++i) {
        std::uint16_t v = dec.data()[i];
        if (v >= 256) {
          saw_marker = true;
          v = data[b.out - 32768 + (v - voxpipe::gz::kMarkerBase)];
        }
        ASSERT_EQ(v, data[b.out + i - 32768]) << "level " << level << " at " << i;
      }
      if (saw_marker) ++tested;
      if (tested >= 3) break;
    }
    EXPECT_GE(tested, 1) << "no boundary whose output refers to the window, level " << level;
  }
}

// MarkerResolver against the rule it implements, symbol by symbol: runs with and without
// markers, lengths that are not multiples of its 64-symbol runs, full and short windows.
TEST(DeflateDecoder, MarkerResolverMapsSymbolsThroughTheWindow) {
  std::mt19937 rng(11);
  for (std::size_t window_size : {std::size_t{32768}, std::size_t{1000}, std::size_t{0}}) {
    Bytes window(window_size);
    for (auto& b : window) b = static_cast<std::uint8_t>(rng());
    const voxpipe::gz::MarkerResolver resolver(window);
    const std::size_t missing = 32768 - window_size;
    for (int trial = 0; trial < 40; ++trial) {
      // Marker density from none to every symbol; markers only into the window, except in the
      // trials that plant one before it.
      const std::size_t n = 1 + rng() % 1000;
      const unsigned per_mille = trial % 5 == 0 ? 0 : rng() % 1001;
      const bool plant = window_size < 32768 && trial % 4 == 3;
      std::vector<std::uint16_t> symbols(n);
      for (auto& v : symbols)
        v = rng() % 1000 < per_mille && window_size
                ? static_cast<std::uint16_t>(voxpipe::gz::kMarkerBase + missing + rng() % window_size)
                : static_cast<std::uint16_t>(rng() % 256);
      if (plant) symbols[rng() % n] = static_cast<std::uint16_t>(voxpipe::gz::kMarkerBase + rng() % missing);
      Bytes out(n, 0xAA);
      const bool ok = resolver.resolve(symbols.data(), n, out.data());
      EXPECT_EQ(ok, !plant) << "window " << window_size << " trial " << trial;
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint16_t v = symbols[i];
        const std::size_t at = v - voxpipe::gz::kMarkerBase;
        const std::uint8_t expect = v < 256 ? static_cast<std::uint8_t>(v) : at < missing ? 0 : window[at - missing];
        ASSERT_EQ(out[i], expect) << "window " << window_size << " trial " << trial << " at " << i;
      }
    }
  }
}

// LSB-first bit writer for hand-made streams; Huffman codes go most significant bit first.
struct BitWriter {
  Bytes bytes;
  unsigned used = 0;
  void put(std::uint32_t v, unsigned n) {
    for (unsigned i = 0; i < n; ++i) {
      if (used % 8 == 0) bytes.push_back(0);
      bytes.back() |= static_cast<std::uint8_t>(((v >> i) & 1) << (used % 8));
      ++used;
    }
  }
  void code(std::uint32_t c, unsigned len) {
    for (unsigned i = len; i-- > 0;) put((c >> i) & 1, 1);
  }
};

// A final dynamic block header with the given literal/length and distance code lengths (values
// 0..2), written with the precode {0: '0', 1: '10', 2: '11'}.
BitWriter dynamic_header(const std::vector<int>& lit, const std::vector<int>& dist) {
  BitWriter w;
  w.put(1, 1);
  w.put(2, 2);
  w.put(static_cast<std::uint32_t>(lit.size() - 257), 5);
  w.put(static_cast<std::uint32_t>(dist.size() - 1), 5);
  w.put(18 - 4, 4);
  const int order[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
  for (int i = 0; i < 18; ++i) w.put(order[i] == 0 ? 1 : (order[i] == 1 || order[i] == 2) ? 2 : 0, 3);
  auto put_len = [&](int l) {
    if (l == 0) w.code(0, 1);
    if (l == 1) w.code(2, 2);
    if (l == 2) w.code(3, 2);
  };
  for (int l : lit) put_len(l);
  for (int l : dist) put_len(l);
  return w;
}

std::string error_of(const Bytes& stream) {
  std::string e;
  decode_plain(stream, nullptr, &e);
  return e;
}

TEST(DeflateDecoder, InvalidStreamsFailAsZlibRulesSay) {
  EXPECT_EQ(error_of(Bytes{0x07, 0, 0, 0}), "invalid block type");
  EXPECT_EQ(error_of(Bytes{0x01, 0x05, 0x00, 0x00, 0x00, 1, 2, 3, 4, 5}), "invalid stored block lengths");
  {
    // Fixed block whose first symbol copies from distance 1: nothing to copy from.
    BitWriter w;
    w.put(1, 1);
    w.put(1, 2);
    w.code(1, 7);  // length 3
    w.code(0, 5);  // distance 1
    w.code(0, 7);  // end of block
    EXPECT_EQ(error_of(w.bytes), "invalid distance too far back");
    // With a known window of one byte the same stream is valid.
    BitReader reader(std::span(w.bytes.data(), w.bytes.size()));
    DeflateDecoder<std::uint8_t> dec(reader);
    const std::uint8_t window[1] = {'x'};
    dec.start_with_window(0, window);
    EXPECT_EQ(dec.decode(SIZE_MAX), DecodeStatus::block_end);
    EXPECT_EQ(std::string(dec.data(), dec.data() + dec.size()), "xxxx");
  }
  std::vector<int> lit(257, 0), dist(1, 0);
  {
    // Only the end-of-block code, of length 1: incomplete but accepted (zlib's single-code rule),
    // and no distance codes at all.
    lit[256] = 1;
    BitWriter w = dynamic_header(lit, dist);
    w.code(0, 1);
    std::string e;
    EXPECT_TRUE(decode_plain(w.bytes, nullptr, &e).empty());
    EXPECT_EQ(e, "");
  }
  {
    lit[256] = 2;
    lit['A'] = 2;  // two codes of length 2: incomplete, not allowed
    EXPECT_EQ(error_of(dynamic_header(lit, dist).bytes), "invalid literal/lengths set");
    lit['B'] = 1;  // 1/4 + 1/4 + 1/2: complete
    BitWriter w = dynamic_header(lit, dist);
    // Canonical codes: 'B' = 0, 'A' = 10, EOB = 11.
    w.code(2, 2);
    w.code(0, 1);
    w.code(3, 2);
    EXPECT_EQ(decode_plain(w.bytes), (Bytes{'A', 'B'}));
    lit['C'] = 1;  // over-subscribed
    EXPECT_EQ(error_of(dynamic_header(lit, dist).bytes), "invalid literal/lengths set");
  }
  {
    std::vector<int> l2(257, 0);
    l2[256] = 1;
    l2['A'] = 1;
    std::vector<int> d2 = {2, 2};  // incomplete distance code with codes of length 2
    EXPECT_EQ(error_of(dynamic_header(l2, d2).bytes), "invalid distances set");
    // Missing end-of-block code.
    std::vector<int> l3(257, 0);
    l3['A'] = 1;
    l3['B'] = 1;
    EXPECT_EQ(error_of(dynamic_header(l3, dist).bytes), "invalid code -- missing end-of-block");
  }
  {
    // Over-subscribed precode: every code length symbol with length 1.
    BitWriter w;
    w.put(1, 1);
    w.put(2, 2);
    w.put(0, 5);
    w.put(0, 5);
    w.put(15, 4);
    for (int i = 0; i < 19; ++i) w.put(1, 3);
    w.put(0, 32);
    EXPECT_EQ(error_of(w.bytes), "invalid code lengths set");
  }
  // Truncated stream: the reader reports the overrun.
  const Bytes z = raw_deflate(vptest::text_bytes(10000, 1), 6);
  EXPECT_EQ(error_of(Bytes(z.begin(), z.begin() + static_cast<std::ptrdiff_t>(z.size() / 2))).empty(), false);
}

TEST(DeflateDecoder, OutputLimitResumesMidBlock) {
  const Bytes data = vptest::text_bytes(200000, 9);
  const Bytes z = raw_deflate(data, 6);
  BitReader reader(std::span(z.data(), z.size()));
  DeflateDecoder<std::uint8_t> dec(reader);
  dec.start_with_window(0, {});
  Bytes out;
  std::size_t emitted = 0;
  int full = 0;
  for (;;) {
    const DecodeStatus s = dec.decode(dec.size() + 1000);  // stops every ~1000 bytes
    ASSERT_NE(s, DecodeStatus::error);
    full += s == DecodeStatus::output_full;
    out.insert(out.end(), dec.data() + emitted, dec.data() + dec.size());
    dec.discard_front(40000);
    emitted = dec.size();
    if (s == DecodeStatus::block_end && dec.block_final()) break;
  }
  EXPECT_GT(full, 100);
  EXPECT_TRUE(out == data);
}

}  // namespace
