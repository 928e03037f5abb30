// The block finder finds the real block starts of zlib streams (dynamic and stored), and the
// false candidates it can report (stored-block look-alikes inside stored data) are rejected by
// the engine, whose output stays zlib's.
#include "gz/block_finder.hpp"

#include <zlib.h>

#include "gz/parallel_inflate.hpp"
#include "test_support.hpp"

namespace {

using voxpipe::gz::BlockCandidate;
using voxpipe::gz::find_block_start;
using vptest::Bytes;
using vptest::raw_deflate;

// Bit positions where zlib ends a non-final block.
std::vector<std::uint64_t> block_starts(const Bytes& stream) {
  std::vector<std::uint64_t> b;
  z_stream z{};
  inflateInit2(&z, -15);
  z.next_in = const_cast<Bytef*>(stream.data());
  z.avail_in = static_cast<uInt>(stream.size());
  std::vector<std::uint8_t> out(1 << 16);
  for (;;) {
    z.next_out = out.data();
    z.avail_out = static_cast<uInt>(out.size());
    const int rc = inflate(&z, Z_BLOCK);
    if (rc == Z_STREAM_END || rc < 0) break;
    if ((z.data_type & 128) && !(z.data_type & 64) && z.total_in > 0) {
      const std::uint64_t bit = z.total_in * 8 - (z.data_type & 7);
      if (b.empty() || b.back() != bit) b.push_back(bit);
    }
  }
  inflateEnd(&z);
  return b;
}

unsigned bits_at(const Bytes& s, std::uint64_t bit, unsigned n) {
  unsigned v = 0;
  for (unsigned i = 0; i < n; ++i) v |= ((s[(bit + i) / 8] >> ((bit + i) % 8)) & 1u) << i;
  return v;
}

TEST(BlockFinder, FindsTheNextDynamicBlockOfAZlibStream) {
  const Bytes data = vptest::concat({vptest::text_bytes(1 << 20, 1), vptest::random_bytes(100000, 2),
                                     vptest::text_bytes(1 << 19, 3)});
  for (int level : {1, 6, 9}) {
    const Bytes z = raw_deflate(data, level);
    const std::vector<std::uint64_t> starts = block_starts(z);
    ASSERT_GE(starts.size(), 5u);
    for (std::size_t k = 0; k + 1 < starts.size(); ++k) {
      // Search from just after the previous start: the next start that is a non-final dynamic
      // or stored block is what must come back.
      // (16 bits on: a stored block's possible header bits end at most 10 bits before its LEN.)
      const std::uint64_t from = k > 0 ? starts[k - 1] + 16 : 1;
      std::uint64_t want = 0;
      for (std::uint64_t s : starts) {
        if (s < from) continue;
        const unsigned head = bits_at(z, s, 3);
        if (head == 4 || head == 0) {
          want = s;
          break;
        }
      }
      if (want == 0) continue;
      const std::optional<BlockCandidate> c = find_block_start(z, 0, from, z.size() * 8);
      ASSERT_TRUE(c) << "level " << level << " from " << from;
      EXPECT_LE(c->first_bit, want) << "level " << level << " from " << from;
      EXPECT_GE(c->last_bit, want) << "level " << level << " from " << from;
    }
  }
}

TEST(BlockFinder, FindsStoredBlocksWithTheirPaddingRange) {
  const Bytes data = vptest::random_bytes(400000, 4);
  const Bytes z = raw_deflate(data, 0);
  const std::vector<std::uint64_t> starts = block_starts(z);
  ASSERT_GE(starts.size(), 4u);
  for (std::size_t k = 1; k < starts.size(); ++k) {
    if (bits_at(z, starts[k], 1)) continue;  // the final block is not searched for
    const std::optional<BlockCandidate> c = find_block_start(z, 0, starts[k - 1] + 16, z.size() * 8);
    ASSERT_TRUE(c);
    EXPECT_TRUE(c->stored);
    EXPECT_LE(c->first_bit, starts[k]);
    EXPECT_GE(c->last_bit, starts[k]);
    EXPECT_EQ((c->last_bit + 3) % 8, 0u);
  }
  // Nothing in the search range: nullopt.
  EXPECT_FALSE(find_block_start(z, 0, starts[0] + 16, starts[0] + 200));
}

TEST(BlockFinder, FalseCandidatesInsideStoredDataAreRejectedByTheEngine) {
  // Stored data full of "empty stored block" look-alikes (00 | 00 00 ff ff): the finder reports
  // them, they are not block starts, and the engine must not start chunks there.
  Bytes data = vptest::random_bytes(600000, 5);
  for (std::size_t i = 1000; i + 5 < data.size(); i += 997) {
    const std::uint8_t fake[5] = {0, 0, 0, 0xff, 0xff};
    std::copy(fake, fake + 5, data.begin() + static_cast<std::ptrdiff_t>(i));
  }
  const Bytes gz = vptest::gzip_compress(data, 0);
  const Bytes raw(gz.begin() + 10, gz.end() - 8);
  const std::vector<std::uint64_t> starts = block_starts(raw);
  const std::optional<BlockCandidate> c = find_block_start(raw, 0, 40, raw.size() * 8);
  ASSERT_TRUE(c);
  bool real = false;
  for (std::uint64_t s : starts) real = real || (c->first_bit <= s && s <= c->last_bit);
  EXPECT_FALSE(real) << "expected a false candidate first, at " << c->first_bit;

  vptest::TempDir dir;
  const std::string path = dir.file("fake.gz");
  vptest::write_file(path, gz);
  voxpipe::core::InputFile file(path);
  for (std::size_t chunk : {std::size_t{4096}, std::size_t{20000}, std::size_t{65536}}) {
    Bytes out(data.size() + 1);
    voxpipe::gz::ParallelInflateOptions o;
    o.threads = 3;
    o.chunk_size = chunk;
    const std::uint64_t n = voxpipe::gz::inflate_parallel(
        file,
        [&](std::uint64_t off, std::span<const std::byte> d) {
          ASSERT_LE(off + d.size(), data.size());
          std::memcpy(out.data() + off, d.data(), d.size());
        },
        o);
    out.resize(n);
    EXPECT_TRUE(out == data) << chunk;
  }
}

}  // namespace
