// inflate_parallel against zlib, byte for byte: every gzip producer we meet in neuroimaging
// (gzip -1..-9, pigz, igzip, libdeflate, Python/nibabel, zlib), NIfTI-like data kinds, thread
// counts 1-4 and chunk sizes small enough that chunk boundaries land inside stored blocks and
// long matches; multi-member files; corrupt and truncated input; seek points; limits.
#include "gz/parallel_inflate.hpp"

#include <zlib.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>

#include "test_support.hpp"

namespace {

using voxpipe::ErrorCode;
using voxpipe::gz::inflate_parallel;
using voxpipe::gz::ParallelInflateOptions;
using vptest::Bytes;

#if defined(__SANITIZE_ADDRESS__)
constexpr std::size_t kScale = 2;  // sanitizer builds: half the data (~16 s instead of ~8 s in Release), same code paths
#else
constexpr std::size_t kScale = 1;
#endif

// zlib's reading of a gzip file: all members, zero padding after a member accepted; nullopt on
// any error.
std::optional<Bytes> zlib_gunzip(const Bytes& data) {
  Bytes out;
  std::size_t pos = 0;
  bool first = true;
  while (pos < data.size() || first) {
    if (!first) {
      while (pos < data.size() && data[pos] == 0) ++pos;
      if (pos == data.size()) break;
    }
    first = false;
    z_stream z{};
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return std::nullopt;
    z.next_in = const_cast<Bytef*>(data.data() + pos);
    z.avail_in = static_cast<uInt>(data.size() - pos);
    std::vector<std::uint8_t> buf(1 << 16);
    int rc;
    do {
      z.next_out = buf.data();
      z.avail_out = static_cast<uInt>(buf.size());
      rc = inflate(&z, Z_NO_FLUSH);
      out.insert(out.end(), buf.data(), buf.data() + (buf.size() - z.avail_out));
      if (rc == Z_BUF_ERROR && z.avail_in == 0) rc = Z_DATA_ERROR;  // truncated
    } while (rc == Z_OK);
    pos += z.total_in;
    inflateEnd(&z);
    if (rc != Z_STREAM_END) return std::nullopt;
  }
  return out;
}

// Collects the sink's deliveries and checks that they tile [0, size) exactly once.
struct Collected {
  Bytes bytes;
  bool tiled = true;
};

Collected run(const std::string& path, ParallelInflateOptions o, std::uint64_t* returned = nullptr) {
  voxpipe::core::InputFile file(path);
  std::mutex mu;
  std::vector<std::pair<std::uint64_t, Bytes>> parts;
  const std::uint64_t n = inflate_parallel(
      file,
      [&](std::uint64_t offset, std::span<const std::byte> d) {
        const auto* p = reinterpret_cast<const std::uint8_t*>(d.data());
        Bytes b(p, p + d.size());
        std::lock_guard lock(mu);
        parts.emplace_back(offset, std::move(b));
      },
      o);
  if (returned) *returned = n;
  std::sort(parts.begin(), parts.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  Collected c;
  for (auto& [off, b] : parts) {
    if (off != c.bytes.size()) c.tiled = false;
    c.bytes.insert(c.bytes.end(), b.begin(), b.end());
  }
  if (!returned || o.stop_after == UINT64_MAX)
    if (c.bytes.size() != n) c.tiled = false;
  return c;
}

Bytes anatomy_int16(std::size_t n_bytes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::size_t n = n_bytes / 2;
  Bytes out(n * 2);
  const std::size_t nx = 96, ny = 96;
  for (std::size_t i = 0; i < n; ++i) {
    const double x = double(i % nx) / nx - 0.5, y = double((i / nx) % ny) / ny - 0.5;
    const double z = double(i / (nx * ny) % 64) / 64 - 0.5;
    const double r = std::sqrt(x * x + y * y + z * z);
    std::int16_t v = 0;
    if (r < 0.42) v = static_cast<std::int16_t>(800 + 300 * std::sin(20 * r) + (rng() % 16));
    out[2 * i] = static_cast<std::uint8_t>(v);
    out[2 * i + 1] = static_cast<std::uint8_t>(v >> 8);
  }
  return out;
}

Bytes noise_float32(std::size_t n_bytes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(100.f, 15.f);
  Bytes out(n_bytes / 4 * 4);
  for (std::size_t i = 0; i + 4 <= out.size(); i += 4) {
    const float f = d(rng);
    std::memcpy(out.data() + i, &f, 4);
  }
  return out;
}

Bytes mask_uint8(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bytes out(n, 0);
  for (std::size_t i = n / 3; i < n / 2; ++i) out[i] = (rng() % 64) != 0;
  return out;
}

bool have(const char* tool) { return std::filesystem::exists(std::string("/usr/bin/") + tool); }

// Compresses `data` with a command line reading "in" and writing to stdout; "" when the tool is
// missing.
std::string produce(const vptest::TempDir& dir, const Bytes& data, const std::string& name,
                    const std::string& tool, const std::string& args) {
  const std::string in = dir.file("in_" + name);
  vptest::write_file(in, data);
  const std::string out = dir.file(name + ".gz");
  const std::string cmd = "/usr/bin/" + tool + " " + args + " < '" + in + "' > '" + out + "'";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("failed: " + cmd);
  std::filesystem::remove(in);
  return out;
}

struct Producer {
  const char* tool;
  const char* args;
};
const Producer kProducers[] = {
    {"gzip", "-1 -c"},  {"gzip", "-6 -c"},   {"gzip", "-9 -c"},
    {"pigz", "-c"},     {"pigz", "-p 4 -c"}, {"igzip", "-0 -c"},
    {"igzip", "-1 -c"}, {"igzip", "-3 -c"},  {"libdeflate-gzip", "-1 -c"},
    {"libdeflate-gzip", "-6 -c"}, {"libdeflate-gzip", "-12 -c"},
};

void expect_matches_zlib(const std::string& path, const std::string& what,
                         std::initializer_list<std::size_t> chunk_sizes) {
  const Bytes gz = vptest::read_file(path);
  const std::optional<Bytes> want = zlib_gunzip(gz);
  ASSERT_TRUE(want) << what;
  for (unsigned threads = 1; threads <= 4; ++threads) {
    for (std::size_t chunk : chunk_sizes) {
      ParallelInflateOptions o;
      o.threads = threads;
      o.chunk_size = chunk;
      std::uint64_t n = 0;
      const Collected got = run(path, o, &n);
      EXPECT_TRUE(got.tiled) << what << " threads " << threads << " chunk " << chunk;
      EXPECT_EQ(n, want->size()) << what << " threads " << threads << " chunk " << chunk;
      EXPECT_TRUE(got.bytes == *want) << what << " threads " << threads << " chunk " << chunk;
    }
  }
}

TEST(ParallelInflate, EveryProducerAndDataKindMatchesZlib) {
  vptest::TempDir dir;
  const std::pair<const char*, Bytes> kinds[] = {
      {"anatomy", anatomy_int16((6 << 20) / kScale, 1)},
      {"noise", noise_float32((2 << 20) / kScale, 2)},
      {"mask", mask_uint8((8 << 20) / kScale, 3)},
  };
  int tested = 0;
  for (const auto& [kind, data] : kinds) {
    for (const Producer& p : kProducers) {
      if (!have(p.tool)) continue;
      const std::string name = std::string(kind) + "_" + p.tool + std::to_string(tested);
      const std::string path = produce(dir, data, name, p.tool, p.args);
      expect_matches_zlib(path, name + " (" + p.tool + " " + p.args + ")",
                          {std::size_t{64} << 10, std::size_t{300} << 10});
      std::filesystem::remove(path);
      ++tested;
    }
  }
  if (tested == 0) GTEST_SKIP() << "none of gzip, pigz, igzip, libdeflate-gzip is installed";
}

TEST(ParallelInflate, ZlibLevelsStrategiesAndPythonLevel1MatchZlib) {
  vptest::TempDir dir;
  const Bytes data = anatomy_int16((3 << 20) / kScale, 5);
  // Python's gzip module (what nibabel writes) is zlib at level 1 with a name in the header.
  vptest::GzipHeaderFields named;
  named.name = "bold.nii";
  for (int level : {0, 1, 6, 9}) {
    const std::string path = dir.file("z" + std::to_string(level) + ".gz");
    vptest::write_file(path, vptest::gzip_compress(data, level, level == 1 ? &named : nullptr));
    expect_matches_zlib(path, "zlib level " + std::to_string(level),
                        {std::size_t{64} << 10, std::size_t{1} << 20});
  }
}

TEST(ParallelInflate, StoredBlocksOfRandomBytesMatchZlib) {
  vptest::TempDir dir;
  const Bytes data = vptest::random_bytes((3 << 20) / kScale, 7);
  vptest::write_file(dir.file("r.gz"), vptest::gzip_compress(data, 0));
  expect_matches_zlib(dir.file("r.gz"), "zlib level 0", {std::size_t{64} << 10, std::size_t{100} << 10});
  if (have("gzip")) {
    const std::string path = produce(dir, data, "rg", "gzip", "-1 -c");
    expect_matches_zlib(path, "gzip -1 random", {std::size_t{64} << 10});
  }
}

TEST(ParallelInflate, LargeFileMatchesZlib) {
  if (!have("gzip")) GTEST_SKIP() << "gzip is not installed";
  vptest::TempDir dir;
  Bytes data = anatomy_int16((24 << 20) / kScale, 11);
  const Bytes mask = mask_uint8((16 << 20) / kScale, 12);
  data.insert(data.end(), mask.begin(), mask.end());
  const std::string path = produce(dir, data, "big", "gzip", "-6 -c");
  const Bytes gz = vptest::read_file(path);
  for (unsigned threads : {2u, 4u}) {
    ParallelInflateOptions o;
    o.threads = threads;
    o.chunk_size = std::size_t{1} << 20;
    const Collected got = run(path, o);
    EXPECT_TRUE(got.tiled);
    EXPECT_TRUE(got.bytes == data) << threads;
  }
}

TEST(ParallelInflate, MultiMemberFilesWithPaddingMatchZlib) {
  vptest::TempDir dir;
  const Bytes a = anatomy_int16((1 << 20) / kScale, 21);
  const Bytes b = vptest::text_bytes((700 << 10) / kScale, 22);
  const Bytes c = vptest::random_bytes(1000, 23);
  const Bytes empty;
  Bytes file = vptest::concat({vptest::gzip_compress(a, 6), vptest::gzip_compress(empty, 6),
                               vptest::gzip_compress(b, 1), vptest::gzip_compress(c, 0),
                               vptest::gzip_compress(a, 9)});
  // Many small members, several per chunk.
  for (int i = 0; i < 40; ++i) {
    const Bytes piece = vptest::text_bytes(5000 + 997 * i, 100 + i);
    const Bytes z = vptest::gzip_compress(piece, i % 10);
    file.insert(file.end(), z.begin(), z.end());
  }
  const std::string path = dir.file("multi.gz");
  vptest::write_file(path, file);
  expect_matches_zlib(path, "multi-member", {std::size_t{4} << 10, std::size_t{64} << 10, std::size_t{256} << 10});
  file.resize(file.size() + 4096, 0);  // zero padding after the last member
  vptest::write_file(path, file);
  expect_matches_zlib(path, "multi-member + padding", {std::size_t{64} << 10});
  if (have("gzip")) {
    const std::string p1 = produce(dir, a, "m1", "gzip", "-6 -c");
    const std::string p2 = produce(dir, b, "m2", "gzip", "-1 -c");
    const Bytes cat = vptest::concat({vptest::read_file(p1), vptest::read_file(p2), vptest::read_file(p1)});
    vptest::write_file(path, cat);
    expect_matches_zlib(path, "concatenated gzip files", {std::size_t{64} << 10});
  }
}

TEST(ParallelInflate, HeaderFieldsOnEveryMemberAreSkipped) {
  vptest::TempDir dir;
  vptest::GzipHeaderFields fields;
  fields.name = "sub-01_T1w.nii";
  fields.comment = std::string(3000, 'c');  // a header longer than the smallest chunk
  fields.extra = vptest::random_bytes(700, 9);
  fields.hcrc = true;
  const Bytes a = anatomy_int16((700 << 10) / kScale, 91);
  const Bytes b = vptest::text_bytes(90000, 92);
  const std::string path = dir.file("h.gz");
  vptest::write_file(path, vptest::concat({vptest::gzip_compress(a, 6, &fields),
                                           vptest::gzip_compress(b, 1, &fields),
                                           vptest::gzip_compress(a, 1, &fields)}));
  expect_matches_zlib(path, "header fields", {std::size_t{4096}, std::size_t{64} << 10});
  // A header CRC16 that does not match is corrupt, as zlib says.
  Bytes bad = vptest::read_file(path);
  const std::size_t hcrc_at = 10 + 2 + fields.extra.size() + fields.name.size() + 1 + fields.comment.size() + 1;
  bad[hcrc_at] ^= 1;
  vptest::write_file(path, bad);
  ASSERT_FALSE(zlib_gunzip(bad));
  ParallelInflateOptions o;
  o.threads = 2;
  o.chunk_size = 64 << 10;
  EXPECT_VP_ERROR(run(path, o), ErrorCode::corrupt);
}

TEST(ParallelInflate, TinyFilesMatchZlib) {
  vptest::TempDir dir;
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{100}, std::size_t{1000}}) {
    const Bytes data = vptest::text_bytes(n, n);
    for (int level : {0, 1, 6}) {
      const std::string path = dir.file("t.gz");
      vptest::write_file(path, vptest::gzip_compress(data, level));
      expect_matches_zlib(path, "tiny " + std::to_string(n), {std::size_t{4096}, std::size_t{4} << 20});
    }
  }
}

TEST(ParallelInflate, SeekPointsResumeInflationWithZlib) {
  vptest::TempDir dir;
  const Bytes data = anatomy_int16((4 << 20) / kScale, 31);
  const Bytes tail = vptest::text_bytes(300000, 32);
  const Bytes gz = vptest::concat({vptest::gzip_compress(data, 6), vptest::gzip_compress(tail, 1)});
  const std::string path = dir.file("s.gz");
  vptest::write_file(path, gz);
  Bytes want = data;
  want.insert(want.end(), tail.begin(), tail.end());
  for (unsigned threads : {1u, 2u, 3u}) {
    std::vector<voxpipe::gz::SeekPoint> points;
    ParallelInflateOptions o;
    o.threads = threads;
    o.chunk_size = 128 << 10;
    o.seek_points = &points;
    const Collected got = run(path, o);
    ASSERT_TRUE(got.bytes == want);
    ASSERT_GE(points.size(), 3u) << threads;
    EXPECT_EQ(points.front().uncompressed, 0u);
    EXPECT_TRUE(points.front().window.empty());
    bool member2 = false;
    for (std::size_t i = 0; i < points.size(); ++i) {
      const auto& p = points[i];
      if (i) {
        EXPECT_LE(points[i - 1].uncompressed, p.uncompressed);
      }
      if (p.uncompressed == data.size()) member2 = member2 || p.window.empty();
      // zlib resumes from the point: raw inflate, primed with the partial byte, the window set.
      z_stream z{};
      ASSERT_EQ(inflateInit2(&z, -15), Z_OK);
      std::size_t byte = p.compressed_bit / 8;
      const int bits = static_cast<int>(p.compressed_bit % 8);
      if (bits) {
        ASSERT_EQ(inflatePrime(&z, 8 - bits, gz[byte] >> bits), Z_OK);
        ++byte;
      }
      if (!p.window.empty()) {
        ASSERT_EQ(inflateSetDictionary(&z, p.window.data(), static_cast<uInt>(p.window.size())), Z_OK);
      }
      const std::size_t want_n = std::min<std::size_t>(4096, want.size() - p.uncompressed);
      Bytes out(want_n);
      z.next_in = const_cast<Bytef*>(gz.data() + byte);
      z.avail_in = static_cast<uInt>(gz.size() - byte);
      z.next_out = out.data();
      z.avail_out = static_cast<uInt>(out.size());
      const int rc = inflate(&z, Z_SYNC_FLUSH);
      inflateEnd(&z);
      EXPECT_TRUE(rc == Z_OK || rc == Z_STREAM_END) << p.compressed_bit;
      EXPECT_TRUE(std::equal(out.begin(), out.end(), want.begin() + static_cast<std::ptrdiff_t>(p.uncompressed)))
          << "point at " << p.uncompressed;
      const std::size_t expect_window = std::min<std::uint64_t>(32768, p.uncompressed < data.size() ? p.uncompressed : p.uncompressed - data.size());
      EXPECT_EQ(p.window.size(), expect_window) << p.uncompressed;
    }
    EXPECT_TRUE(member2) << "no point at the second member's start";
  }
}

TEST(ParallelInflate, CorruptInputIsAnErrorLikeZlibNeverACrash) {
  vptest::TempDir dir;
  const Bytes data = anatomy_int16((600 << 10) / kScale, 41);
  const Bytes good = vptest::concat({vptest::gzip_compress(data, 6), vptest::gzip_compress(data, 1)});
  const std::string path = dir.file("c.gz");
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 60; ++trial) {
    Bytes bad = good;
    // The first ones hit header and trailer areas, the rest the deflate data.
    const std::size_t at = trial < 12 ? (trial < 6 ? trial * 2 : good.size() / 2 - 12 + trial) : rng() % bad.size();
    bad[at] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
    vptest::write_file(path, bad);
    const std::optional<Bytes> want = zlib_gunzip(bad);
    for (unsigned threads : {1u, 2u}) {
      ParallelInflateOptions o;
      o.threads = threads;
      o.chunk_size = 16 << 10;
      auto err = vptest::catch_error([&] {
        const Collected got = run(path, o);
        if (want) {
          EXPECT_TRUE(got.bytes == *want) << "flip at " << at;
        }
      });
      if (want) {
        EXPECT_FALSE(err) << "flip at " << at << ": " << err->what();
      } else {
        ASSERT_TRUE(err) << "flip at " << at << " accepted";
        EXPECT_TRUE(err->code() == ErrorCode::corrupt || err->code() == ErrorCode::truncated ||
                    err->code() == ErrorCode::format)
            << err->what();
      }
    }
  }
}

TEST(ParallelInflate, TruncationAnywhereIsTruncated) {
  vptest::TempDir dir;
  const Bytes data = anatomy_int16((400 << 10) / kScale, 51);
  const Bytes good = vptest::gzip_compress(data, 6);
  const std::string path = dir.file("t.gz");
  std::vector<std::size_t> cuts = {1, 2, 5, 10, 11, 20, good.size() - 8, good.size() - 5, good.size() - 1};
  for (std::size_t k = 1; k < 25; ++k) cuts.push_back(good.size() * k / 25);
  for (std::size_t cut : cuts) {
    vptest::write_file(path, Bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut)));
    for (unsigned threads : {1u, 2u}) {
      ParallelInflateOptions o;
      o.threads = threads;
      o.chunk_size = 16 << 10;
      auto err = vptest::catch_error([&] { run(path, o); });
      ASSERT_TRUE(err) << "cut at " << cut;
      EXPECT_EQ(err->code(), cut < 2 ? ErrorCode::format : ErrorCode::truncated)
          << "cut at " << cut << ": " << err->what();
    }
  }
}

TEST(ParallelInflate, WrongTrailerOrGarbageAfterIsCorrupt) {
  vptest::TempDir dir;
  const Bytes data = anatomy_int16((500 << 10) / kScale, 61);
  const Bytes good = vptest::gzip_compress(data, 6);
  const std::string path = dir.file("w.gz");
  for (std::size_t field : {good.size() - 8, good.size() - 4, good.size() - 1}) {
    Bytes bad = good;
    bad[field] ^= 0x40;
    vptest::write_file(path, bad);
    for (unsigned threads : {1u, 2u}) {
      ParallelInflateOptions o;
      o.threads = threads;
      o.chunk_size = 32 << 10;
      EXPECT_VP_ERROR(run(path, o), ErrorCode::corrupt);
    }
  }
  Bytes garbage = good;
  garbage.push_back(0);
  garbage.push_back(0x42);
  vptest::write_file(path, garbage);
  ParallelInflateOptions o;
  o.threads = 2;
  o.chunk_size = 32 << 10;
  EXPECT_VP_ERROR(run(path, o), ErrorCode::corrupt);
  vptest::write_file(path, vptest::text_bytes(100000, 3));
  EXPECT_VP_ERROR(run(path, o), ErrorCode::format);
  vptest::write_file(path, Bytes{});
  EXPECT_VP_ERROR(run(path, o), ErrorCode::format);
}

TEST(ParallelInflate, MaxOutputAndStopAfter) {
  vptest::TempDir dir;
  const Bytes data = anatomy_int16((2 << 20) / kScale, 71);
  const std::string path = dir.file("m.gz");
  vptest::write_file(path, vptest::gzip_compress(data, 6));
  for (unsigned threads : {1u, 2u}) {
    ParallelInflateOptions o;
    o.threads = threads;
    o.chunk_size = 64 << 10;
    o.max_output = data.size() - 1;
    EXPECT_VP_ERROR(run(path, o), ErrorCode::limit);
    o.max_output = data.size();
    EXPECT_TRUE(run(path, o).bytes == data);
    o.max_output = UINT64_MAX;
    o.stop_after = data.size() / 3;
    std::uint64_t n = 0;
    const Collected got = run(path, o, &n);
    EXPECT_TRUE(got.tiled);
    ASSERT_GE(got.bytes.size(), o.stop_after);
    EXPECT_TRUE(std::equal(got.bytes.begin(), got.bytes.end(), data.begin()));
  }
}

TEST(ParallelInflate, StatsAccountForEveryByteOnce) {
  vptest::TempDir dir;
  const Bytes data = anatomy_int16((2 << 20) / kScale, 91);
  const std::string path = dir.file("s.gz");
  vptest::write_file(path, vptest::gzip_compress(data, 6));
  voxpipe::core::InputFile file(path);
  for (unsigned threads : {1u, 2u, 4u}) {
    voxpipe::gz::ParallelInflateStats stats;
    stats.known_runs = 99;  // replaced, not added to
    ParallelInflateOptions o;
    o.threads = threads;
    o.chunk_size = 64 << 10;
    o.stats = &stats;
    // A slow sink holds the resolver back, so that speculative chunks are done before it
    // arrives and are accepted.
    const std::uint64_t n = inflate_parallel(
        file,
        [](std::uint64_t, std::span<const std::byte>) {
          std::this_thread::sleep_for(std::chrono::milliseconds(3));
        },
        o);
    ASSERT_EQ(n, data.size());
    EXPECT_EQ(stats.speculative_bytes + stats.known_bytes, data.size()) << threads;
    EXPECT_LE(stats.marker_bytes, stats.speculative_bytes) << threads;
    EXPECT_LE(stats.speculative_chunks, stats.speculated_chunks) << threads;
    EXPECT_GE(stats.known_chunks, stats.known_runs) << threads;
    EXPECT_GT(stats.known_seconds, 0) << threads;
    if (threads == 1) {
      EXPECT_EQ(stats.known_runs, 1u);
      EXPECT_EQ(stats.speculated_chunks, 0u);
    } else {
      EXPECT_GT(stats.speculative_chunks, 0u) << threads;
      EXPECT_GT(stats.marker_bytes, 0u) << threads;
      EXPECT_GT(stats.speculate_seconds, 0) << threads;
      EXPECT_GT(stats.finalize_seconds, 0) << threads;
      // The same times summed in another order: equal up to rounding when none was wasted.
      EXPECT_LE(stats.speculate_seconds, stats.speculated_seconds * (1 + 1e-9)) << threads;
    }
  }
}

// Text made of words that all stand in the window keeps a speculative chunk's unknown window
// bytes in play (each word is copied from an earlier copy) until a stretch of random bytes
// pushes them out: segments of varying length give chunks marker phases of every length, so
// recycled decoders meet chunks that use much less of their buffer than the one before
// (trimmed), and more than a decoder is kept for (freed).
Bytes window_bound_text(std::size_t n_bytes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> words(600);
  for (std::string& w : words)
    for (std::size_t k = 3 + rng() % 9; k > 0; --k)
      w.push_back(static_cast<char>('a' + rng() % 26));
  Bytes out;
  const std::size_t segments[] = {48 << 10, 900 << 10, 64 << 10, 400 << 10, 1500 << 10, 96 << 10};
  for (std::size_t i = 0; out.size() < n_bytes; ++i) {
    const std::size_t end = out.size() + segments[i % std::size(segments)] / kScale;
    while (out.size() < end) {
      const std::string& w = words[rng() % words.size()];
      out.insert(out.end(), w.begin(), w.end());
      out.push_back(' ');
    }
    for (int k = 0; k < 40 << 10; ++k) out.push_back(static_cast<std::uint8_t>(rng()));
  }
  return out;
}

TEST(ParallelInflate, RecycledChunkBuffersMatchZlib) {
  vptest::TempDir dir;
  const Bytes data = window_bound_text(std::size_t{8 << 20} / kScale, 95);
  voxpipe::gz::ParallelInflateStats all;
  for (int level : {1, 6}) {
    const std::string path = dir.file("t" + std::to_string(level) + ".gz");
    vptest::write_file(path, vptest::gzip_compress(data, level));
    for (unsigned threads : {2u, 3u, 4u}) {
      voxpipe::gz::ParallelInflateStats stats;
      ParallelInflateOptions o;
      o.threads = threads;
      o.chunk_size = 64 << 10;
      o.stats = &stats;
      const Collected got = run(path, o);
      EXPECT_TRUE(got.tiled) << level << " " << threads;
      EXPECT_TRUE(got.bytes == data) << level << " " << threads;
      all.marker_bytes += stats.marker_bytes;
      all.decoders_reused += stats.decoders_reused;
      all.pieces_reused += stats.pieces_reused;
      all.trimmed_bytes += stats.trimmed_bytes;
    }
  }
  // The paths this test is for were taken.
  EXPECT_GT(all.marker_bytes, 0u);
  EXPECT_GT(all.decoders_reused, 0u);
  EXPECT_GT(all.pieces_reused, 0u);
  EXPECT_GT(all.trimmed_bytes, 0u);
}

TEST(ParallelInflate, SinkExceptionPropagates) {
  vptest::TempDir dir;
  const Bytes data = anatomy_int16((2 << 20) / kScale, 81);
  const std::string path = dir.file("e.gz");
  vptest::write_file(path, vptest::gzip_compress(data, 6));
  voxpipe::core::InputFile file(path);
  ParallelInflateOptions o;
  o.threads = 2;
  o.chunk_size = 64 << 10;
  EXPECT_THROW(inflate_parallel(
                   file,
                   [](std::uint64_t offset, std::span<const std::byte> d) {
                     if (offset + d.size() > 100000) throw std::runtime_error("sink full");
                   },
                   o),
               std::runtime_error);
}

}  // namespace
