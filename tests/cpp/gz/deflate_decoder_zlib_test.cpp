// The deflate decoder against zlib on streams that reach every corner of the format: generated
// neuroimaging-like data at every level and strategy, dynamic codes of 14 and 15 bits (past the
// decoder's direct tables), every distance 1..32768 and length 3..258, matches reaching from the
// output back into the window, decoding from block ends in the middle in marker mode, streams cut
// at every byte, and errors at known bits. What "the same as zlib" means is
// deflate_differential.hpp's (shared with fuzz_marker_decoder); each decode runs as the parallel
// engine drives it: one output limit, 1 MiB steps keeping 32 KiB, and small limits through a
// ByteFetch.
#include "deflate_differential.hpp"
#include <numeric>
#include <set>

#include "test_support.hpp"

namespace {

using deflate_diff::Boundary;
using deflate_diff::Drive;
using deflate_diff::End;
using deflate_diff::Result;
using vptest::Bytes;

// speculate(); run_known_window() (1 MiB steps, keeping 32768); small, uneven limits with bits
// through a ByteFetch of 100 bytes.
const std::vector<Drive>& all_drives() {
  static const std::vector<Drive> d = [] {
    std::vector<Drive> v(3);
    v[1].steps = {1u << 20};
    v[1].keep = 32768;
    v[2].steps = {300, 1, 4096, 77, 258, 20000};
    v[2].keep = 32768 + 1000;
    v[2].fetch_buffer = 100;
    return v;
  }();
  return d;
}

const std::vector<Drive>& one_drive() {
  static const std::vector<Drive> d(1);
  return d;
}

constexpr std::size_t kWhole = std::size_t{64} << 20;  // a cap no stream here reaches

// "" when zlib and the decoder (plain and marker mode, every drive) agree.
std::string agree(const Bytes& stream, std::uint64_t bit, std::span<const std::uint8_t> window,
                  std::size_t cap = kWhole, const std::vector<Drive>& drives = all_drives(),
                  Result* reference = nullptr) {
  return deflate_diff::check(stream, bit, window, cap, drives, drives, reference);
}

// ---- generated data --------------------------------------------------------------------------

// A 64x64xN int16 volume: a smooth field with noise, little-endian.
Bytes int16_volume(int slices, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0, 12);
  Bytes out;
  for (int z = 0; z < slices; ++z)
    for (int y = 0; y < 64; ++y)
      for (int x = 0; x < 64; ++x) {
        const double v = 800 + 300 * std::sin(x / 7.0) * std::cos(y / 9.0) + 4 * z + noise(rng);
        const auto s = static_cast<std::int16_t>(std::lround(v));
        out.push_back(static_cast<std::uint8_t>(s));
        out.push_back(static_cast<std::uint8_t>(static_cast<std::uint16_t>(s) >> 8));
      }
  return out;
}

Bytes smooth_float32(std::size_t n) {
  Bytes out(n * 4);
  for (std::size_t i = 0; i < n; ++i) {
    const float f = static_cast<float>(100 * std::sin(i * 0.001) + std::cos(i * 0.0003));
    std::memcpy(out.data() + 4 * i, &f, 4);
  }
  return out;
}

// Zero runs with islands of noise, as in a masked volume.
Bytes zero_runs(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bytes out;
  while (out.size() < n) {
    out.insert(out.end(), 200 + rng() % 5000, 0);
    for (std::size_t k = 100 + rng() % 400; k-- > 0;) out.push_back(static_cast<std::uint8_t>(rng() % 7));
  }
  out.resize(n);
  return out;
}

// zlib's raw deflate after `dictionary`, at any level, strategy and memLevel.
Bytes zlib_deflate(std::span<const std::uint8_t> data, int level, int strategy,
                   std::span<const std::uint8_t> dictionary = {}, int mem_level = 8) {
  z_stream z{};
  if (deflateInit2(&z, level, Z_DEFLATED, -15, mem_level, strategy) != Z_OK) throw std::runtime_error("deflateInit2");
  if (!dictionary.empty())
    deflateSetDictionary(&z, dictionary.data(), static_cast<uInt>(dictionary.size()));
  Bytes out(deflateBound(&z, static_cast<uLong>(data.size())) + 1024);
  z.next_in = const_cast<Bytef*>(data.data());
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) throw std::runtime_error("deflate did not finish");
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// The 32 KiB (or less) of output before a block end, after `window`: the history a decoder
// started there needs.
Bytes history_before(const Result& whole, const Boundary& b, std::span<const std::uint8_t> window) {
  Bytes h(window.begin(), window.end());
  h.insert(h.end(), whole.out.begin(), whole.out.begin() + static_cast<std::ptrdiff_t>(b.out));
  if (h.size() > 32768) h.erase(h.begin(), h.end() - 32768);
  return h;
}

struct Setting {
  const char* name;
  int level;
  int strategy;
};
constexpr Setting kSettings[] = {{"level 1", 1, Z_DEFAULT_STRATEGY}, {"level 6", 6, Z_DEFAULT_STRATEGY},
                                 {"level 9", 9, Z_DEFAULT_STRATEGY}, {"fixed", 6, Z_FIXED},
                                 {"rle", 6, Z_RLE},                  {"huffman only", 6, Z_HUFFMAN_ONLY},
                                 {"stored", 0, Z_DEFAULT_STRATEGY}};

TEST(DeflateDecoderZlib, GeneratedVolumesAtEveryLevelAndStrategy) {
  const std::pair<const char*, Bytes> kinds[] = {
      {"int16 volume", int16_volume(20, 1)},
      {"float32", smooth_float32(40000)},
      {"text", vptest::text_bytes(150000, 2)},
      {"random", vptest::random_bytes(60000, 3)},
      {"zero runs", zero_runs(150000, 4)},
  };
  for (const auto& [kind, data] : kinds) {
    for (const Setting& s : kSettings) {
      SCOPED_TRACE(std::string(kind) + ", " + s.name);
      const Bytes z = zlib_deflate(data, s.level, s.strategy);
      Result whole;
      ASSERT_EQ(agree(z, 0, {}, kWhole, all_drives(), &whole), "");
      ASSERT_EQ(whole.end, End::done);
      ASSERT_TRUE(std::equal(whole.out.begin(), whole.out.end(), data.begin(), data.end()));
      // From a block end in the middle, in marker mode as a speculative chunk starts there.
      int started = 0;
      for (std::size_t i = whole.boundaries.size() / 2; i + 1 < whole.boundaries.size() && started < 2; ++i) {
        const Boundary& b = whole.boundaries[i];
        if (b.out < 32768) continue;
        ASSERT_EQ(agree(z, b.bit, history_before(whole, b, {}), 65536, one_drive()), "") << "from bit " << b.bit;
        ++started;
      }
    }
  }
}

// ---- a deflate writer with codes of our choosing ---------------------------------------------

constexpr std::uint16_t kLengthBase[29] = {3,  4,  5,  6,  7,  8,  9,  10,  11,  13,
                                           15, 17, 19, 23, 27, 31, 35, 43,  51,  59,
                                           67, 83, 99, 115, 131, 163, 195, 227, 258};
constexpr std::uint8_t kLengthExtra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                           2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
constexpr std::uint16_t kDistBase[30] = {1,    2,    3,    4,    5,    7,     9,     13,
                                         17,   25,   33,   49,   65,   97,    129,   193,
                                         257,  385,  513,  769,  1025, 1537,  2049,  3073,
                                         4097, 6145, 8193, 12289, 16385, 24577};
constexpr std::uint8_t kDistExtra[30] = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
                                         6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

unsigned length_symbol(unsigned len) {  // index into kLengthBase
  unsigned i = 28;
  while (kLengthBase[i] > len) --i;
  return i;
}
unsigned distance_symbol(unsigned dist) {
  unsigned i = 29;
  while (kDistBase[i] > dist) --i;
  return i;
}

// LSB-first bits; Huffman codes go most significant bit first.
struct BitWriter {
  Bytes bytes;
  std::uint64_t acc = 0;
  unsigned pending = 0;
  std::uint64_t bits = 0;  // written so far
  void put(std::uint32_t v, unsigned n) {
    acc |= std::uint64_t{v} << pending;
    pending += n;
    bits += n;
    while (pending >= 8) {
      bytes.push_back(static_cast<std::uint8_t>(acc));
      acc >>= 8;
      pending -= 8;
    }
  }
  void code(std::uint32_t c, unsigned len) {
    std::uint32_t r = 0;
    for (unsigned i = 0; i < len; ++i) r |= ((c >> i) & 1u) << (len - 1 - i);
    put(r, len);
  }
  void align() {
    if (pending) put(0, 8 - pending);
  }
  Bytes finish() const {
    Bytes b = bytes;
    if (pending) b.push_back(static_cast<std::uint8_t>(acc));
    return b;
  }
};

// Canonical codes (RFC 1951 3.2.2) for code lengths.
std::vector<std::uint32_t> canonical(const std::vector<std::uint8_t>& len) {
  unsigned count[16] = {}, next[16] = {};
  for (auto l : len) ++count[l];
  count[0] = 0;
  for (unsigned b = 1, code = 0; b < 16; ++b) {
    code = (code + count[b - 1]) << 1;
    next[b] = code;
  }
  std::vector<std::uint32_t> codes(len.size());
  for (std::size_t s = 0; s < len.size(); ++s)
    if (len[s]) codes[s] = next[len[s]]++;
  return codes;
}

// Optimal code lengths of at most `limit` bits for the frequencies (package-merge); a complete
// code whenever two or more symbols occur.
std::vector<std::uint8_t> limited_lengths(const std::vector<std::uint64_t>& freq, unsigned limit) {
  struct Item {
    std::uint64_t weight;
    std::vector<std::uint16_t> symbols;
  };
  std::vector<Item> leaves;
  for (std::size_t s = 0; s < freq.size(); ++s)
    if (freq[s]) leaves.push_back(Item{freq[s], {static_cast<std::uint16_t>(s)}});
  std::vector<std::uint8_t> len(freq.size(), 0);
  if (leaves.size() == 1) len[leaves[0].symbols[0]] = 1;
  if (leaves.size() < 2) return len;
  std::stable_sort(leaves.begin(), leaves.end(), [](auto& a, auto& b) { return a.weight < b.weight; });
  std::vector<Item> list = leaves;
  for (unsigned level = 1; level < limit; ++level) {
    std::vector<Item> packages;
    for (std::size_t i = 0; i + 1 < list.size(); i += 2) {
      Item p{list[i].weight + list[i + 1].weight, list[i].symbols};
      p.symbols.insert(p.symbols.end(), list[i + 1].symbols.begin(), list[i + 1].symbols.end());
      packages.push_back(std::move(p));
    }
    std::vector<Item> merged;
    std::merge(leaves.begin(), leaves.end(), packages.begin(), packages.end(), std::back_inserter(merged),
               [](auto& a, auto& b) { return a.weight < b.weight; });
    list = std::move(merged);
  }
  for (std::size_t i = 0; i < 2 * leaves.size() - 2; ++i)
    for (auto s : list[i].symbols) ++len[s];
  return len;
}

// A literal (length 0) or a match.
struct Sym {
  std::uint16_t length = 0;
  std::uint16_t distance = 0;
  std::uint8_t literal = 0;
};

// What the symbols decode to after `history` (appended to it).
void apply(const std::vector<Sym>& syms, Bytes& history) {
  for (const Sym& s : syms) {
    if (s.length == 0) {
      history.push_back(s.literal);
      continue;
    }
    ASSERT_LE(s.distance, history.size());
    for (unsigned k = 0; k < s.length; ++k) history.push_back(history[history.size() - s.distance]);
  }
}

// Code lengths the symbols call for: every symbol used gets a code, at most 15 bits.
struct Codes {
  std::vector<std::uint8_t> lit;   // 286
  std::vector<std::uint8_t> dist;  // 30
};
Codes codes_for(const std::vector<Sym>& syms) {
  std::vector<std::uint64_t> lf(286, 0), df(30, 0);
  for (const Sym& s : syms) {
    if (s.length == 0) {
      ++lf[s.literal];
    } else {
      ++lf[257 + length_symbol(s.length)];
      ++df[distance_symbol(s.distance)];
    }
  }
  lf[256] = 1;
  if (std::count_if(df.begin(), df.end(), [](auto f) { return f > 0; }) < 2) df[0] += 1, df[1] += 1;
  return Codes{limited_lengths(lf, 15), limited_lengths(df, 15)};
}

// How many symbols were written with codes longer than 13 bits (literals and lengths) and 11
// bits (distances): past the direct tables of the decoder before its table rewrite, and past the
// root tables (11 and 10 bits) of the one after it.
struct DeepCount {
  std::size_t lit_14_15 = 0;
  std::size_t dist_12_15 = 0;
};

void write_symbols(BitWriter& w, const std::vector<Sym>& syms, const std::vector<std::uint8_t>& ll,
                   const std::vector<std::uint8_t>& dl, DeepCount* deep = nullptr) {
  const std::vector<std::uint32_t> lc = canonical(ll), dc = canonical(dl);
  for (const Sym& s : syms) {
    if (s.length == 0) {
      w.code(lc[s.literal], ll[s.literal]);
      if (deep && ll[s.literal] >= 14) ++deep->lit_14_15;
      continue;
    }
    const unsigned li = length_symbol(s.length), di = distance_symbol(s.distance);
    w.code(lc[257 + li], ll[257 + li]);
    w.put(s.length - kLengthBase[li], kLengthExtra[li]);
    w.code(dc[di], dl[di]);
    w.put(s.distance - kDistBase[di], kDistExtra[di]);
    if (deep && ll[257 + li] >= 14) ++deep->lit_14_15;
    if (deep && dl[di] >= 12) ++deep->dist_12_15;
  }
  w.code(lc[256], ll[256]);
}

// The code lengths of a dynamic header, run-length coded with 16, 17 and 18 as zlib does.
std::vector<std::pair<unsigned, unsigned>> rle_lengths(const std::vector<std::uint8_t>& l) {
  std::vector<std::pair<unsigned, unsigned>> out;  // (symbol, extra value)
  for (std::size_t i = 0; i < l.size();) {
    std::size_t run = 1;
    while (i + run < l.size() && l[i + run] == l[i]) ++run;
    if (l[i] == 0 && run >= 3) {
      const unsigned n = static_cast<unsigned>(std::min<std::size_t>(run, 138));
      out.push_back(n >= 11 ? std::pair{18u, n - 11} : std::pair{17u, n - 3});
      i += n;
    } else if (l[i] != 0 && run >= 4) {
      out.push_back({l[i], 0});
      const unsigned n = static_cast<unsigned>(std::min<std::size_t>(run - 1, 6));
      out.push_back({16, n - 3});
      i += 1 + n;
    } else {
      out.push_back({l[i], 0});
      ++i;
    }
  }
  return out;
}

// A dynamic block header for the code lengths.
void write_dynamic_header(BitWriter& w, bool final, const std::vector<std::uint8_t>& ll,
                          const std::vector<std::uint8_t>& dl) {
  unsigned hlit = 286, hdist = 30;
  while (hlit > 257 && ll[hlit - 1] == 0) --hlit;
  while (hdist > 1 && dl[hdist - 1] == 0) --hdist;
  std::vector<std::uint8_t> all(ll.begin(), ll.begin() + hlit);
  all.insert(all.end(), dl.begin(), dl.begin() + hdist);
  const auto rle = rle_lengths(all);
  std::vector<std::uint64_t> pf(19, 0);
  for (auto [sym, extra] : rle) ++pf[sym];
  if (std::count_if(pf.begin(), pf.end(), [](auto f) { return f > 0; }) < 2) pf[pf[0] ? 1 : 0] += 1;
  const std::vector<std::uint8_t> pl = limited_lengths(pf, 7);
  const std::vector<std::uint32_t> pc = canonical(pl);
  static constexpr unsigned kOrder[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
  unsigned hclen = 19;
  while (hclen > 4 && pl[kOrder[hclen - 1]] == 0) --hclen;
  w.put(final, 1);
  w.put(2, 2);
  w.put(hlit - 257, 5);
  w.put(hdist - 1, 5);
  w.put(hclen - 4, 4);
  for (unsigned i = 0; i < hclen; ++i) w.put(pl[kOrder[i]], 3);
  for (auto [sym, extra] : rle) {
    w.code(pc[sym], pl[sym]);
    if (sym == 16) w.put(extra, 2);
    if (sym == 17) w.put(extra, 3);
    if (sym == 18) w.put(extra, 7);
  }
}

void write_dynamic(BitWriter& w, bool final, const std::vector<Sym>& syms, DeepCount* deep = nullptr,
                   Codes* used = nullptr) {
  const Codes c = codes_for(syms);
  write_dynamic_header(w, final, c.lit, c.dist);
  write_symbols(w, syms, c.lit, c.dist, deep);
  if (used) *used = c;
}

const std::vector<std::uint8_t>& fixed_lit() {
  static const std::vector<std::uint8_t> l = [] {
    std::vector<std::uint8_t> v(288, 8);
    std::fill(v.begin() + 144, v.begin() + 256, 9);
    std::fill(v.begin() + 256, v.begin() + 280, 7);
    return v;
  }();
  return l;
}
const std::vector<std::uint8_t> kFixedDist(30, 5);

void write_fixed(BitWriter& w, bool final, const std::vector<Sym>& syms) {
  w.put(final, 1);
  w.put(1, 2);
  write_symbols(w, syms, fixed_lit(), kFixedDist);
}

void write_stored(BitWriter& w, bool final, std::span<const std::uint8_t> bytes) {
  w.put(final, 1);
  w.put(0, 2);
  w.align();
  w.put(static_cast<std::uint32_t>(bytes.size()), 16);
  w.put(static_cast<std::uint32_t>(~bytes.size() & 0xffff), 16);
  for (auto b : bytes) w.put(b, 8);
}

// ---- codes past the direct tables ------------------------------------------------------------

TEST(DeflateDecoderZlib, CodesOf14And15BitsMatchZlib) {
  // Skewed literals (frequencies falling by ~5% from one byte value to the next, in a shuffled
  // order), match lengths and distance codes (falling by 25% from one code to the next): the
  // rare ones get codes of 14-15 bits, through the decoder's slow path.
  std::mt19937_64 rng(11);
  std::vector<std::uint8_t> order(256);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<double> lw(256), mw(256), dw(30);
  for (int i = 0; i < 256; ++i) lw[i] = std::pow(0.95, i), mw[i] = std::pow(0.97, i);
  for (int i = 0; i < 30; ++i) dw[i] = std::pow(0.75, i);
  std::discrete_distribution<int> lit(lw.begin(), lw.end()), mlen(mw.begin(), mw.end()),
      dcode(dw.begin(), dw.end());
  std::vector<int> dorder(30);
  std::iota(dorder.begin(), dorder.end(), 0);
  std::shuffle(dorder.begin(), dorder.end(), rng);
  const Bytes window = vptest::random_bytes(32768, 12);
  BitWriter w;
  DeepCount deep;
  unsigned max_lit = 0, max_dist = 0;
  for (int block = 0; block < 8; ++block) {
    std::vector<Sym> syms;
    for (int i = 0; i < 60000; ++i) {
      if (rng() % 10 < 3) {
        const int c = dorder[dcode(rng)];
        const unsigned d = kDistBase[c] + static_cast<unsigned>(rng() % (1u << kDistExtra[c]));
        syms.push_back(Sym{static_cast<std::uint16_t>(3 + (mlen(rng) + block) % 256),
                           static_cast<std::uint16_t>(std::min(d, 32768u)), 0});
      } else {
        syms.push_back(Sym{0, 0, order[lit(rng)]});
      }
    }
    Codes used;
    write_dynamic(w, block == 7, syms, &deep, &used);
    max_lit = std::max<unsigned>(max_lit, *std::max_element(used.lit.begin(), used.lit.end()));
    max_dist = std::max<unsigned>(max_dist, *std::max_element(used.dist.begin(), used.dist.end()));
  }
  // The premise: the stream has what the test is about.
  ASSERT_EQ(max_lit, 15u);
  ASSERT_EQ(max_dist, 15u);
  ASSERT_GT(deep.lit_14_15, 500u);  // 722
  ASSERT_GT(deep.dist_12_15, 200u);  // 316
  const Bytes z = w.finish();
  Result whole;
  ASSERT_EQ(agree(z, 0, window, kWhole, all_drives(), &whole), "");
  ASSERT_EQ(whole.end, End::done);
  EXPECT_GT(whole.out.size(), std::size_t{3} << 20);
  for (std::size_t i : {std::size_t{2}, std::size_t{5}}) {
    const Boundary& b = whole.boundaries[i];
    EXPECT_EQ(agree(z, b.bit, history_before(whole, b, window), 262144, one_drive()), "") << "from block " << i + 1;
  }
}

// ---- every distance and length ---------------------------------------------------------------

TEST(DeflateDecoderZlib, EveryDistanceAndLengthAndMatchesIntoTheWindow) {
  const Bytes window = vptest::random_bytes(32768, 21);
  std::vector<Sym> syms;
  // Matches from the first output bytes back into the window and on into their own output.
  syms.push_back(Sym{258, 100, 0});    // 100 window bytes, then its own
  syms.push_back(Sym{258, 400, 0});    // starts 142 bytes before the output, crosses into it
  syms.push_back(Sym{200, 600, 0});
  syms.push_back(Sym{3, 32768, 0});    // the oldest window bytes
  syms.push_back(Sym{258, 32768, 0});
  // Every distance once, its length cycling through 3..258 (97 is prime to 256).
  for (unsigned d = 1; d <= 32768; ++d) {
    syms.push_back(Sym{static_cast<std::uint16_t>(3 + (d * 97) % 256), static_cast<std::uint16_t>(d), 0});
    if (d % 5 == 0) syms.push_back(Sym{0, 0, static_cast<std::uint8_t>(d * 31)});
  }
  // Then 40 KiB without references: markers leave the window.
  for (int i = 0; i < 40000; ++i) syms.push_back(Sym{0, 0, static_cast<std::uint8_t>(i * 7 + i / 256)});
  // Blocks of 4000 symbols: dynamic, every fourth fixed, a stored block after every seventh.
  BitWriter w;
  Bytes expect(window);
  std::set<unsigned> distances, lengths;
  const std::size_t per = 4000;
  for (std::size_t at = 0, block = 0; at < syms.size(); at += per, ++block) {
    const std::vector<Sym> part(syms.begin() + static_cast<std::ptrdiff_t>(at),
                                syms.begin() + static_cast<std::ptrdiff_t>(std::min(syms.size(), at + per)));
    for (const Sym& s : part)
      if (s.length) distances.insert(s.distance), lengths.insert(s.length);
    apply(part, expect);
    const bool last = at + per >= syms.size();
    if (block % 4 == 3) {
      write_fixed(w, last, part);
    } else {
      write_dynamic(w, last, part);
    }
    if (block % 7 == 6 && !last) {
      const Bytes stored = vptest::random_bytes(1000 + block, block);
      write_stored(w, false, stored);
      expect.insert(expect.end(), stored.begin(), stored.end());
    }
  }
  expect.erase(expect.begin(), expect.begin() + 32768);
  ASSERT_EQ(distances.size(), 32768u);
  ASSERT_EQ(lengths.size(), 256u);
  const Bytes z = w.finish();
  Result whole;
  ASSERT_EQ(agree(z, 0, window, kWhole, all_drives(), &whole), "");
  ASSERT_EQ(whole.end, End::done);
  ASSERT_TRUE(std::equal(whole.out.begin(), whole.out.end(), expect.begin(), expect.end()));
  EXPECT_GT(whole.out.size(), std::size_t{4} << 20);

  // With only the last 1000 window bytes known, zlib fails at the first match that reaches before
  // them (32768 back, after 716 bytes); in marker mode that match's first element is the marker
  // of an unknown byte, where agree() checks it is.
  Result part_window;
  ASSERT_EQ(agree(z, 0, std::span(window).subspan(32768 - 1000), kWhole, one_drive(), &part_window), "");
  EXPECT_EQ(part_window.end, End::error);
  EXPECT_EQ(part_window.message, "invalid distance too far back");
  EXPECT_EQ(part_window.out.size(), 258u + 258 + 200);
}

// ---- marker mode from block ends in the middle ----------------------------------------------

TEST(DeflateDecoderZlib, MarkerModeFromEveryBlockEnd) {
  // A speculative chunk starts at a block end with none of the 32 KiB before it: from every block
  // end of zlib's level-1 and level-6 streams of an int16 volume, both decoders agree with zlib
  // started there with that history (for 64 KiB of output: the start is what is tested).
  const Bytes data = int16_volume(64, 31);
  for (const Setting& s : {kSettings[0], kSettings[1]}) {
    SCOPED_TRACE(s.name);
    const Bytes z = zlib_deflate(data, s.level, s.strategy, {}, 6);
    Result whole;
    ASSERT_EQ(agree(z, 0, {}, kWhole, one_drive(), &whole), "");
    ASSERT_GT(whole.boundaries.size(), 20u);
    for (std::size_t i = 0; i + 1 < whole.boundaries.size(); ++i) {
      const Boundary& b = whole.boundaries[i];
      ASSERT_EQ(agree(z, b.bit, history_before(whole, b, {}), 65536, one_drive()), "") << "block end " << i;
    }
  }
}

TEST(DeflateDecoderZlib, WindowHasMarkersUntilTheLast32KiBHoldNone) {
  // Matches into the window, then literals: window_has_markers() (which agree() checks at every
  // return against a scan) is true while the last 32768 elements hold a marker, and false from
  // the element after, when the engine hands the chunk to a decoder with a known window. Block
  // ends fall on both sides of that element.
  const Bytes window = vptest::random_bytes(32768, 41);
  BitWriter w;
  write_fixed(w, false, {Sym{10, 32768, 0}, Sym{0, 0, 'x'}, Sym{20, 5000, 0}});  // last marker: 30
  std::vector<std::size_t> sizes(32, 1000);
  sizes.insert(sizes.end(), {767, 1, 1000});
  std::vector<bool> want = {true};
  std::size_t after = 0;  // literals after the last marker's successor
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    std::vector<Sym> literals;
    for (std::size_t i = 0; i < sizes[k]; ++i) literals.push_back(Sym{0, 0, static_cast<std::uint8_t>(i)});
    write_fixed(w, k + 1 == sizes.size(), literals);
    after += sizes[k];
    want.push_back(1 + after <= 32768);  // the last marker is 1 + after elements from the end
  }
  const Bytes z = w.finish();
  ASSERT_EQ(agree(z, 0, window), "");
  voxpipe::gz::BitReader reader(std::span<const std::uint8_t>(z.data(), z.size()));
  voxpipe::gz::DeflateDecoder<std::uint16_t> dec(reader);
  dec.start_with_markers(0);
  std::vector<bool> has;
  for (;;) {
    ASSERT_EQ(dec.decode(std::size_t{1} << 30), voxpipe::gz::DecodeStatus::block_end);
    has.push_back(dec.window_has_markers());
    if (dec.block_final()) break;
  }
  EXPECT_EQ(has, want);
  EXPECT_EQ(want[33], true);  // 32767 literals after the marker: it is the oldest of the 32768
  EXPECT_EQ(want[34], false);
}

// ---- cut streams ------------------------------------------------------------------------------

TEST(DeflateDecoderZlib, StreamsCutAtEveryByteNeverEndCleanly) {
  // Fixed, dynamic and stored blocks; cut after every byte, each decoder either fails or reads
  // past the end, after zlib's bytes (zlib asks for more input).
  const Bytes window = vptest::text_bytes(32768, 51);
  Bytes plain = vptest::text_bytes(3000, 52);
  std::vector<Sym> syms;
  for (std::size_t i = 0; i < plain.size(); ++i) syms.push_back(Sym{0, 0, plain[i]});
  syms.push_back(Sym{100, 20000, 0});
  BitWriter w;
  write_fixed(w, false, std::vector<Sym>(syms.begin(), syms.begin() + 200));
  write_dynamic(w, false, syms);
  write_stored(w, false, std::span(plain).first(300));
  write_dynamic(w, true, std::vector<Sym>(syms.end() - 100, syms.end()));
  const Bytes z = w.finish();
  ASSERT_EQ(agree(z, 0, window), "");
  for (std::size_t n = 0; n < z.size(); ++n) {
    Result cut;
    ASSERT_EQ(agree(Bytes(z.begin(), z.begin() + static_cast<std::ptrdiff_t>(n)), 0, window, kWhole,
                    one_drive(), &cut),
              "")
        << "cut at " << n;
    ASSERT_EQ(cut.end, End::truncated) << "cut at " << n;
  }
}

// ---- errors at known bits --------------------------------------------------------------------

struct ErrorCase {
  std::string name;
  Bytes stream;
  std::string message;
  std::uint64_t from, to;  // the bits that make the stream invalid
};

// A valid first block (literals and a match), then the damage `bad` writes; [from, to] brackets
// the offending bits.
template <class F>
ErrorCase error_case(std::string name, std::string message, F&& bad) {
  BitWriter w;
  std::vector<Sym> first;
  for (int i = 0; i < 300; ++i) first.push_back(Sym{0, 0, static_cast<std::uint8_t>("abcdefgh"[i % 8] + i / 64)});
  first.push_back(Sym{40, 64, 0});
  write_dynamic(w, false, first);
  ErrorCase c{std::move(name), {}, std::move(message), 0, 0};
  bad(w, c.from, c.to);
  w.put(0, 32);  // bits to spare: the error, not the end of the input, stops the decoders
  c.stream = w.finish();
  return c;
}

// A dynamic header with these code lengths, written plainly (no repeat codes) with a precode
// giving every length 0-15 a 4-bit code (16 of them: complete).
void plain_dynamic_header(BitWriter& w, const std::vector<std::uint8_t>& ll,
                          const std::vector<std::uint8_t>& dl) {
  w.put(1, 1);
  w.put(2, 2);
  w.put(static_cast<std::uint32_t>(ll.size() - 257), 5);
  w.put(static_cast<std::uint32_t>(dl.size() - 1), 5);
  w.put(19 - 4, 4);
  static constexpr unsigned kOrder[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
  for (unsigned i = 0; i < 19; ++i) w.put(kOrder[i] < 16 ? 4 : 0, 3);
  for (auto l : ll) w.code(l, 4);  // canonical: length value v has code v
  for (auto l : dl) w.code(l, 4);
}

std::vector<ErrorCase> error_cases() {
  std::vector<ErrorCase> v;
  using L = std::vector<std::uint8_t>;
  // A complete literal/length code: literals 0-254 of 8 bits (255/256 of the code space), literal
  // 255 and end-of-block of 9 (2/512).
  L complete(257, 8);
  complete[255] = 9, complete[256] = 9;
  auto header = [&](const L& ll, const L& dl) {
    return [ll, dl](BitWriter& w, std::uint64_t& from, std::uint64_t& to) {
      from = w.bits;
      plain_dynamic_header(w, ll, dl);
      to = w.bits;
    };
  };
  v.push_back(error_case("block type 3", "invalid block type", [](BitWriter& w, auto& from, auto& to) {
    from = w.bits;
    w.put(1, 1), w.put(3, 2);
    to = w.bits;
  }));
  v.push_back(error_case("stored lengths", "invalid stored block lengths", [](BitWriter& w, auto& from, auto& to) {
    from = w.bits;
    w.put(1, 1), w.put(0, 2), w.align(), w.put(5, 16), w.put(0xfffb, 16);
    to = w.bits;
  }));
  v.push_back(error_case("287 literal/length codes", "too many length or distance symbols",
                         [](BitWriter& w, auto& from, auto& to) {
                           from = w.bits;
                           w.put(1, 1), w.put(2, 2), w.put(30, 5), w.put(0, 5), w.put(0, 4);
                           to = w.bits;
                         }));
  v.push_back(error_case("31 distance codes", "too many length or distance symbols",
                         [](BitWriter& w, auto& from, auto& to) {
                           from = w.bits;
                           w.put(1, 1), w.put(2, 2), w.put(0, 5), w.put(30, 5), w.put(0, 4);
                           to = w.bits;
                         }));
  v.push_back(error_case("over-subscribed code-length code", "invalid code lengths set",
                         [](BitWriter& w, auto& from, auto& to) {
                           from = w.bits;
                           w.put(1, 1), w.put(2, 2), w.put(0, 5), w.put(0, 5), w.put(15, 4);
                           for (int i = 0; i < 19; ++i) w.put(1, 3);
                           to = w.bits;
                         }));
  v.push_back(error_case("incomplete code-length code", "invalid code lengths set",
                         [](BitWriter& w, auto& from, auto& to) {
                           from = w.bits;
                           w.put(1, 1), w.put(2, 2), w.put(0, 5), w.put(0, 5), w.put(0, 4);
                           w.put(0, 3), w.put(0, 3), w.put(0, 3), w.put(2, 3);  // only 0, 2 bits
                           to = w.bits;
                         }));
  v.push_back(error_case("repeat of no length", "invalid bit length repeat", [](BitWriter& w, auto& from, auto& to) {
    from = w.bits;
    w.put(1, 1), w.put(2, 2), w.put(0, 5), w.put(0, 5), w.put(0, 4);
    w.put(1, 3), w.put(0, 3), w.put(0, 3), w.put(1, 3);  // 0 and 16: one bit each, 16 is '1'
    w.code(1, 1);                                        // 16 first
    to = w.bits + 2;
  }));
  v.push_back(error_case("repeat past the end", "invalid bit length repeat", [](BitWriter& w, auto& from, auto& to) {
    w.put(1, 1), w.put(2, 2), w.put(0, 5), w.put(0, 5), w.put(0, 4);
    w.put(0, 3), w.put(0, 3), w.put(1, 3), w.put(1, 3);  // 0 and 18: one bit each, 18 is '1'
    w.code(1, 1), w.put(127, 7);                        // 138 zeros
    from = w.bits;
    w.code(1, 1), w.put(127, 7);                        // 138 more: 276 > 258
    to = w.bits;
  }));
  {
    L ll = complete;
    ll[256] = 0;
    ll[255] = 8;  // 256 literals of 8 bits: complete, no end-of-block code
    v.push_back(error_case("no end-of-block code", "invalid code -- missing end-of-block", header(ll, L{1, 1})));
  }
  {
    L ll = complete;
    ll[0] = 7;
    v.push_back(error_case("over-subscribed literal/length code", "invalid literal/lengths set", header(ll, L{1, 1})));
    ll = complete;
    ll[0] = 9;
    v.push_back(error_case("incomplete literal/length code", "invalid literal/lengths set", header(ll, L{1, 1})));
    v.push_back(error_case("over-subscribed distance code", "invalid distances set", header(complete, L{1, 1, 1})));
    v.push_back(error_case("incomplete distance code", "invalid distances set", header(complete, L{2, 2})));
  }
  for (unsigned sym : {286u, 287u}) {
    v.push_back(error_case("fixed literal/length " + std::to_string(sym), "invalid literal/length code",
                           [sym](BitWriter& w, auto& from, auto& to) {
                             w.put(1, 1), w.put(1, 2);
                             w.code(0x30 + 'x', 8);
                             from = w.bits;
                             w.code(0xc0 + (sym - 280), 8);
                             to = w.bits;
                           }));
  }
  for (unsigned d : {30u, 31u}) {
    v.push_back(error_case("fixed distance " + std::to_string(d), "invalid distance code",
                           [d](BitWriter& w, auto& from, auto& to) {
                             w.put(1, 1), w.put(1, 2);
                             from = w.bits;
                             w.code(1, 7);  // length 3
                             w.code(d, 5);
                             to = w.bits;
                           }));
  }
  {
    // A distance code of one code ('0'); '1' is no code.
    v.push_back(error_case("distance outside a one-code code", "invalid distance code",
                           [complete](BitWriter& w, auto& from, auto& to) {
                             L ll = complete;
                             ll.push_back(9);  // length 3 (symbol 257)
                             ll[255] = 10, ll[256] = 10;
                             plain_dynamic_header(w, ll, L{1});
                             const auto lc = canonical(ll);
                             w.code(lc['a'], 8);
                             from = w.bits;
                             w.code(lc[257], 9);
                             w.code(1, 1);
                             to = w.bits;
                           }));
    // A literal/length code of one code (end-of-block, '0'); '1' is no code.
    v.push_back(error_case("literal outside a one-code code", "invalid literal/length code",
                           [](BitWriter& w, auto& from, auto& to) {
                             L ll(257, 0);
                             ll[256] = 1;
                             plain_dynamic_header(w, ll, L{0});
                             from = w.bits;
                             w.code(1, 1);
                             to = w.bits;
                           }));
  }
  v.push_back(error_case("distance before the output", "invalid distance too far back",
                         [](BitWriter& w, auto& from, auto& to) {
                           w.put(1, 1), w.put(1, 2);
                           from = w.bits;
                           w.code(1, 7);                 // length 3
                           w.code(19, 5), w.put(0, 8);   // distance 769: the output holds 340
                           to = w.bits;
                         }));
  return v;
}

TEST(DeflateDecoderZlib, ErrorsAtKnownBitsMatchZlib) {
  for (const ErrorCase& c : error_cases()) {
    SCOPED_TRACE(c.name);
    Result want;
    ASSERT_EQ(agree(c.stream, 0, {}, kWhole, all_drives(), &want), "");
    // zlib sees the damage where it was written, with the message expected.
    ASSERT_EQ(want.end, End::error);
    EXPECT_EQ(want.message, c.message);
    EXPECT_GE(want.error_bit, c.from);
    EXPECT_LE(want.error_bit, c.to);
    // And so does the decoder (agree() held it to zlib's output and message).
    for (const bool markers : {false, true}) {
      const Result got = markers ? deflate_diff::run_decoder<std::uint16_t>(c.stream, 0, {}, kWhole, Drive{})
                                 : deflate_diff::run_decoder<std::uint8_t>(c.stream, 0, {}, kWhole, Drive{});
      if (markers && c.message == "invalid distance too far back") {
        // No error in marker mode: the match copies markers of the unknown window.
        EXPECT_EQ(got.out.at(want.out.size()), voxpipe::gz::kMarkerBase + 32768 + 340 - 769);
        continue;
      }
      ASSERT_EQ(got.end, End::error) << markers;
      EXPECT_EQ(got.message, c.message) << markers;
      EXPECT_GE(got.error_bit, c.from) << markers;
      EXPECT_LE(got.error_bit, c.to) << markers;
    }
  }
}

// A stored block shorter than the bytes the bit reader holds ahead (its LEN and NLEN come in with
// up to 7 more), then another block; and a stored block copied in pieces (an output limit
// inside it). BitReader::copy_bytes once cleared its bit buffer after every copy, also when the
// copy ended inside the bytes buffered: the bytes after the block read as zeros. Found by
// fuzz_marker_decoder.
TEST(DeflateDecoderZlib, StoredBlocksShorterThanTheBitBuffer) {
  BitWriter w;
  write_stored(w, false, Bytes{0x40, 0xaa});
  write_stored(w, true, Bytes{});
  const Bytes z = w.finish();
  EXPECT_EQ(z, (Bytes{0x00, 0x02, 0x00, 0xfd, 0xff, 0x40, 0xaa, 0x01, 0x00, 0x00, 0xff, 0xff}));
  EXPECT_EQ(agree(z, 0, {}), "");
  BitWriter w2;
  write_stored(w2, true, vptest::text_bytes(5000, 61));
  std::vector<Drive> byte_by_byte(1);
  byte_by_byte[0].steps = {1};
  EXPECT_EQ(agree(w2.finish(), 0, {}, kWhole, byte_by_byte), "");
}

}  // namespace
