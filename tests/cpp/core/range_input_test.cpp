// Objects read by byte ranges (core::RangeInput, voxpipe::RemoteInput): the exact requests a
// read or a prefetch makes (bytes already held serve reads without one; a miss asks for at least
// min_request, up to the next held bytes and the object's end; misses that run front to back
// double up to part_size; prefetches merge ranges closer than coalesce_gap, skip what is held,
// split into part_size parts and fetch at most max_cached_bytes), least-recently-read eviction
// within max_cached_bytes, reads at and past the end, the fetcher's failures as errors naming the
// object (a short body, an exception, the wrong number of buffers), the right bytes for reads
// from 8 threads at once while the cache evicts, misses of interleaved front-to-back readers
// growing each its own requests, and read_ahead's window: bounded ahead of the reader, moving as
// reads reach its parts, through objects larger than the cache.
#include "core/range_input.hpp"

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "core/recording_fetcher.hpp"
#include "test_support.hpp"

namespace {

using voxpipe::ByteRange;
using voxpipe::ErrorCode;
using voxpipe::RemoteInputOptions;
using voxpipe::core::RangeInput;
using vptest::Call;
using vptest::Range;
using vptest::RecordingFetcher;

std::vector<std::byte> object_bytes(std::size_t n, std::uint64_t seed) {
  const vptest::Bytes b = vptest::random_bytes(n, seed);
  const auto s = std::as_bytes(std::span(b));
  return {s.begin(), s.end()};
}

RemoteInputOptions options(std::uint64_t min_request, std::uint64_t coalesce_gap,
                           std::uint64_t part_size, std::uint64_t max_cached_bytes) {
  RemoteInputOptions o;
  o.min_request = min_request;
  o.coalesce_gap = coalesce_gap;
  o.part_size = part_size;
  o.max_cached_bytes = max_cached_bytes;
  return o;
}

// Reads [offset, offset + n) and checks that it returns the object's bytes there (short only at
// the end).
void expect_read(const RangeInput& in, const RecordingFetcher& f, std::uint64_t offset,
                 std::size_t n) {
  std::vector<std::byte> buf(n, std::byte{0xEE});
  const std::size_t got = in.read_at(offset, buf);
  const std::size_t want = offset >= f.size() ? 0 : std::min<std::uint64_t>(n, f.size() - offset);
  ASSERT_EQ(got, want) << "read_at(" << offset << ", " << n << ")";
  EXPECT_EQ(std::memcmp(buf.data(), f.object().data() + offset, got), 0)
      << "read_at(" << offset << ", " << n << ")";
}

void prefetch(const RangeInput& in, std::initializer_list<ByteRange> ranges) {
  in.prefetch(std::vector<ByteRange>(ranges));
}

TEST(RangeInput, InitialBytesServeReadsWithoutRequests) {
  RecordingFetcher f(object_bytes(100000, 1));
  RangeInput in(f.name(), f.size(), f.fetcher(), f.initial(1000), options(4096, 1 << 20, 1 << 20, 1 << 20));
  expect_read(in, f, 0, 1000);
  expect_read(in, f, 10, 100);
  expect_read(in, f, 999, 1);
  EXPECT_TRUE(f.calls().empty());
  EXPECT_EQ(in.stats().requests, 0u);
  EXPECT_EQ(in.stats().bytes, 0u);
  // A read that runs past them fetches only what they lack, continuing front to back from them.
  expect_read(in, f, 990, 20);
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{1000, 4096}}}));
  EXPECT_EQ(in.stats().requests, 1u);
  EXPECT_EQ(in.stats().bytes, 4096u);
}

TEST(RangeInput, InitialBytesBeyondTheObjectAreNotRead) {
  RecordingFetcher f(object_bytes(500, 2));
  // The response held more than the object's size says (a size seen before a change): the
  // bytes past the size are not served.
  auto buf = std::make_shared<std::vector<std::byte>>(f.object());
  buf->resize(800, std::byte{0x55});
  RangeInput in(f.name(), f.size(), f.fetcher(), {std::span<const std::byte>(*buf), buf}, {});
  expect_read(in, f, 0, 1000);
  expect_read(in, f, 499, 1000);
  EXPECT_TRUE(f.calls().empty());
}

TEST(RangeInput, MissRequestsAtLeastMinRequestClippedAtHeldBytesAndTheEnd) {
  RecordingFetcher f(object_bytes(100000, 3));
  RangeInput in(f.name(), f.size(), f.fetcher(), {}, options(4096, 1 << 20, 1 << 20, 1 << 20));
  expect_read(in, f, 5000, 10);      // min_request
  expect_read(in, f, 40000, 10000);  // a gap longer than min_request: the gap
  expect_read(in, f, 20000, 10);
  expect_read(in, f, 18000, 100);    // up to the bytes held from 20000
  expect_read(in, f, 99000, 10);     // up to the end
  expect_read(in, f, 38000, 10);     // up to the bytes held from 40000
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{5000, 4096}},
                                          {{40000, 10000}},
                                          {{20000, 4096}},
                                          {{18000, 2000}},
                                          {{99000, 1000}},
                                          {{38000, 2000}}}));
  // Everything read is held: reading it again requests nothing.
  f.clear();
  for (std::uint64_t at : {5000u, 9000u, 18000u, 24000u, 38000u, 49990u, 99000u}) expect_read(in, f, at, 10);
  expect_read(in, f, 18000, 6096);
  EXPECT_TRUE(f.calls().empty());
  EXPECT_EQ(in.stats().requests, 6u);
  EXPECT_EQ(in.stats().bytes, 4096u + 10000 + 4096 + 2000 + 1000 + 2000);
}

TEST(RangeInput, ReadAcrossHeldBytesRequestsEveryGapInOneCall) {
  RecordingFetcher f(object_bytes(100000, 4));
  RangeInput in(f.name(), f.size(), f.fetcher(), {}, options(4096, 1 << 20, 1 << 20, 1 << 20));
  expect_read(in, f, 5000, 10);   // holds [5000, 9096)
  expect_read(in, f, 20000, 10);  // holds [20000, 24096)
  f.clear();
  expect_read(in, f, 4000, 22000);
  // [4000, 5000) stops at the held bytes; [9096, 20000) is longer than min_request; the gap
  // at the read's end continues the miss that ended there: twice its size.
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{4000, 1000}, {9096, 10904}, {24096, 8192}}}));
}

TEST(RangeInput, ConsecutiveMissesDoubleUpToPartSize) {
  RecordingFetcher f(object_bytes(100000, 5));
  RangeInput in(f.name(), f.size(), f.fetcher(), {}, options(1000, 1 << 20, 8000, 1 << 20));
  for (std::uint64_t at : {0u, 1000u, 3000u, 7000u, 15000u, 23000u}) expect_read(in, f, at, 10);
  // A miss elsewhere starts again from min_request.
  expect_read(in, f, 50000, 10);
  expect_read(in, f, 51000, 10);
  expect_read(in, f, 53500, 10);
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{0, 1000}},
                                          {{1000, 2000}},
                                          {{3000, 4000}},
                                          {{7000, 8000}},
                                          {{15000, 8000}},
                                          {{23000, 8000}},
                                          {{50000, 1000}},
                                          {{51000, 2000}},
                                          {{53500, 1000}}}));
}

TEST(RangeInput, MissAfterInitialBytesDoublesTheirSize) {
  RecordingFetcher f(object_bytes(100000, 6));
  RangeInput in(f.name(), f.size(), f.fetcher(), f.initial(3000), options(1000, 1 << 20, 8000, 1 << 20));
  expect_read(in, f, 3000, 10);
  expect_read(in, f, 9000, 10);
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{3000, 6000}}, {{9000, 8000}}}));
}

TEST(RangeInput, FrontToBackSmallReadsMakeFewGrowingRequests) {
  RecordingFetcher f(object_bytes(60000, 7));
  RangeInput in(f.name(), f.size(), f.fetcher(), {}, options(1000, 1 << 20, 8000, 1 << 20));
  for (std::uint64_t at = 0; at < 60000; at += 100) expect_read(in, f, at, 100);
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{0, 1000}},
                                          {{1000, 2000}},
                                          {{3000, 4000}},
                                          {{7000, 8000}},
                                          {{15000, 8000}},
                                          {{23000, 8000}},
                                          {{31000, 8000}},
                                          {{39000, 8000}},
                                          {{47000, 8000}},
                                          {{55000, 5000}}}));
  EXPECT_EQ(in.stats().bytes, 60000u);
}

TEST(RangeInput, PrefetchMergesRangesCloserThanCoalesceGapAndSplitsIntoParts) {
  RecordingFetcher f(object_bytes(1000000, 8));
  RangeInput in(f.name(), f.size(), f.fetcher(), {}, options(100, 1000, 10000, 1000000));
  // Unsorted; 100 bytes apart (merged), 19000 apart (not), one inside another's reach (merged).
  prefetch(in, {{50000, 100}, {10000, 500}, {10600, 400}, {30000, 25000}});
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{10000, 1000}, {30000, 10000}, {40000, 10000}, {50000, 5000}}}));
  f.clear();
  // Just past the gap: two ranges; just within it: one.
  prefetch(in, {{100000, 100}, {101101, 100}});
  prefetch(in, {{200000, 100}, {201099, 100}});
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{100000, 100}, {101101, 100}}, {{200000, 1199}}}));
  f.clear();
  // What was prefetched is read without a request.
  expect_read(in, f, 10000, 1000);
  expect_read(in, f, 30000, 25000);
  expect_read(in, f, 200000, 1199);
  EXPECT_TRUE(f.calls().empty());
  EXPECT_EQ(in.stats().requests, 7u);
  EXPECT_EQ(in.stats().bytes, 1000u + 25000 + 200 + 1199);
}

TEST(RangeInput, PrefetchSkipsHeldBytes) {
  RecordingFetcher f(object_bytes(1000000, 9));
  RangeInput in(f.name(), f.size(), f.fetcher(), {}, options(100, 1000, 10000, 1000000));
  prefetch(in, {{10000, 1000}, {30000, 25000}});
  f.clear();
  prefetch(in, {{0, 60000}});
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{0, 10000}, {11000, 10000}, {21000, 9000}, {55000, 5000}}}));
  f.clear();
  prefetch(in, {{0, 60000}});
  prefetch(in, {{5, 10}, {59990, 10}});
  EXPECT_TRUE(f.calls().empty());
}

TEST(RangeInput, PrefetchIgnoresEmptyRangesAndStopsAtTheEnd) {
  RecordingFetcher f(object_bytes(50000, 10));
  RangeInput in(f.name(), f.size(), f.fetcher(), {}, options(100, 1000, 10000, 1000000));
  prefetch(in, {});
  prefetch(in, {{100, 0}, {50000, 100}, {90000, 5}});
  EXPECT_TRUE(f.calls().empty());
  prefetch(in, {{45000, 100000}});
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{45000, 5000}}}));
}

TEST(RangeInput, PrefetchFetchesAtMostMaxCachedBytesAndReadsContinueFromThere) {
  RecordingFetcher f(object_bytes(100000, 11));
  RangeInput in(f.name(), f.size(), f.fetcher(), {}, options(100, 1000, 10000, 25000));
  prefetch(in, {{0, 100000}});
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{0, 10000}, {10000, 10000}, {20000, 5000}}}));
  f.clear();
  // The rest is fetched as read: front to back from the prefetch's end, in growing requests.
  expect_read(in, f, 24990, 20);
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{25000, 10000}}}));
}

TEST(RangeInput, EvictionKeepsTheCacheWithinMaxCachedBytesLeastRecentlyReadFirst) {
  RecordingFetcher f(object_bytes(100000, 12));
  // Every miss fetches 1000 bytes; the cache holds three of them.
  RangeInput in(f.name(), f.size(), f.fetcher(), {}, options(1000, 1 << 20, 1000, 3000));
  for (std::uint64_t at : {0u, 10000u, 20000u}) expect_read(in, f, at, 10);
  expect_read(in, f, 0, 10);      // held: read again, so [10000, 11000) is now the oldest read
  expect_read(in, f, 30000, 10);  // evicts [10000, 11000)
  EXPECT_EQ(f.calls().size(), 4u);
  f.clear();
  expect_read(in, f, 500, 10);
  expect_read(in, f, 20500, 10);
  expect_read(in, f, 30500, 10);
  EXPECT_TRUE(f.calls().empty()) << "the three most recently read extents stay";
  expect_read(in, f, 10500, 10);  // fetched again; evicts [0, 1000), the least recently read
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{10500, 1000}}}));
  f.clear();
  expect_read(in, f, 20000, 10);
  expect_read(in, f, 30000, 10);
  expect_read(in, f, 10600, 10);
  EXPECT_TRUE(f.calls().empty());
  expect_read(in, f, 100, 10);
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{100, 1000}}}));
  EXPECT_EQ(in.stats().requests, 6u);
  EXPECT_EQ(in.stats().bytes, 6000u);
}

TEST(RangeInput, PrefetchEvictsOlderExtentsNotItsOwn) {
  RecordingFetcher f(object_bytes(100000, 13));
  RangeInput in(f.name(), f.size(), f.fetcher(), {}, options(1000, 100, 1000, 3000));
  expect_read(in, f, 50000, 10);
  prefetch(in, {{0, 3000}});  // a full cache's worth: the older extent goes
  f.clear();
  expect_read(in, f, 0, 3000);
  EXPECT_TRUE(f.calls().empty());
  expect_read(in, f, 50000, 10);
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{50000, 1000}}}));
}

TEST(RangeInput, ReadsAtAndPastTheEndReturnZeroOrWhatIsLeft) {
  RecordingFetcher f(object_bytes(1000, 14));
  RangeInput in(f.name(), f.size(), f.fetcher(), {}, options(4096, 1 << 20, 1 << 20, 1 << 20));
  std::vector<std::byte> buf(100);
  EXPECT_EQ(in.read_at(1000, buf), 0u);
  EXPECT_EQ(in.read_at(5000, buf), 0u);
  EXPECT_EQ(in.read_at(UINT64_MAX - 10, buf), 0u);
  EXPECT_EQ(in.read_at(0, std::span<std::byte>()), 0u);
  EXPECT_TRUE(f.calls().empty());
  expect_read(in, f, 990, 100);
  expect_read(in, f, 0, 2000);
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{990, 10}}, {{0, 990}}}));

  RecordingFetcher empty(std::vector<std::byte>{});
  RangeInput none(empty.name(), 0, empty.fetcher(), {}, {});
  EXPECT_EQ(none.read_at(0, buf), 0u);
  none.prefetch(std::vector<ByteRange>{{0, 100}});
  EXPECT_TRUE(empty.calls().empty());
}

TEST(RangeInput, ShortAnswerIsTruncatedNamingTheObjectAndOffset) {
  RecordingFetcher f(object_bytes(100000, 15), "https://example.org/data/sub-01.nii");
  RangeInput in(f.name(), f.size(), f.fetcher(), {}, options(4096, 1000, 10000, 1 << 20));
  std::vector<std::byte> buf(10);
  f.inject(RecordingFetcher::Fault::short_answer);
  auto err = vptest::catch_error([&] { in.read_at(5000, buf); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::truncated);
  EXPECT_EQ(err->path(), f.name());
  EXPECT_EQ(err->offset(), std::optional<std::uint64_t>(5000));
  EXPECT_NE(err->detail().find("4096"), std::string::npos) << err->what();
  EXPECT_NE(err->detail().find("4095"), std::string::npos) << err->what();
  // Nothing of the failed answer is kept or counted: the read fetches it again.
  EXPECT_EQ(in.stats().requests, 0u);
  expect_read(in, f, 5000, 10);
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{5000, 4096}}, {{5000, 4096}}}));
  EXPECT_EQ(in.stats().requests, 1u);

  // In a prefetch, the part whose body is short is named.
  f.inject(RecordingFetcher::Fault::short_answer);
  err = vptest::catch_error([&] { prefetch(in, {{20000, 30000}}); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::truncated);
  EXPECT_EQ(err->path(), f.name());
  EXPECT_EQ(err->offset(), std::optional<std::uint64_t>(40000));
}

TEST(RangeInput, FetcherErrorPropagatesNamingTheObject) {
  RecordingFetcher f(object_bytes(100000, 16), "s3://bucket/sub-02_bold.nii.gz");
  RangeInput in(f.name(), f.size(), f.fetcher(), {}, options(4096, 1000, 10000, 1 << 20));
  std::vector<std::byte> buf(10);
  f.inject(RecordingFetcher::Fault::error);
  auto err = vptest::catch_error([&] { in.read_at(7, buf); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::io);
  EXPECT_EQ(err->path(), f.name());
  EXPECT_NE(std::string(err->what()).find("HTTP 503"), std::string::npos) << err->what();
  f.inject(RecordingFetcher::Fault::error);
  err = vptest::catch_error([&] { prefetch(in, {{0, 30000}}); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->path(), f.name());
  // The input goes on working: the failed ranges are fetched when asked for again.
  EXPECT_EQ(in.stats().requests, 0u);
  expect_read(in, f, 7, 10);
  prefetch(in, {{0, 30000}});
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{7, 4096}},
                                          {{0, 10000}, {10000, 10000}, {20000, 10000}},
                                          {{7, 4096}},
                                          {{0, 7}, {4103, 10000}, {14103, 10000}, {24103, 5897}}}));
}

TEST(RangeInput, WrongNumberOfBuffersIsAnIoErrorNamingTheObject) {
  RecordingFetcher f(object_bytes(100000, 17), "gs://bucket/t1.nii");
  RangeInput in(f.name(), f.size(), f.fetcher(), {}, options(4096, 1000, 10000, 1 << 20));
  f.inject(RecordingFetcher::Fault::wrong_count);
  auto err = vptest::catch_error([&] { prefetch(in, {{0, 30000}}); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::io);
  EXPECT_EQ(err->path(), f.name());
  EXPECT_NE(err->detail().find("expected 3 ranges"), std::string::npos) << err->what();
  EXPECT_NE(err->detail().find("received 2"), std::string::npos) << err->what();
  f.inject(RecordingFetcher::Fault::wrong_count);
  std::vector<std::byte> buf(10);
  EXPECT_VP_ERROR(in.read_at(50000, buf), ErrorCode::io);
  expect_read(in, f, 50000, 10);
}

TEST(RangeInput, LongerAnswerIsRefusedNotCutToTheRange) {
  // A body longer than the range asked for answered another request (a server that ignored the
  // range, another version of the object): none of it reaches the read.
  RecordingFetcher f(object_bytes(100000, 18));
  RangeInput in(f.name(), f.size(), f.fetcher(), {}, options(4096, 1000, 1 << 20, 1 << 20));
  std::vector<std::byte> buf(10);
  f.inject(RecordingFetcher::Fault::long_answer);
  auto err = vptest::catch_error([&] { in.read_at(5000, buf); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::io);
  EXPECT_EQ(err->path(), f.name());
  EXPECT_EQ(err->offset(), std::optional<std::uint64_t>(5000));
  EXPECT_NE(err->detail().find("expected 4096 bytes"), std::string::npos) << err->what();
  EXPECT_NE(err->detail().find("held 95000"), std::string::npos) << err->what();
  EXPECT_EQ(in.stats().requests, 0u);
  // Nothing was kept: the next read fetches the range again.
  expect_read(in, f, 5000, 10);
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{5000, 4096}}, {{5000, 4096}}}));
}

TEST(RangeInput, ConcurrentReadsReturnTheObjectsBytes) {
  RecordingFetcher f(object_bytes(1 << 20, 19));
  // A cache of an eighth of the object: reads evict while others copy.
  RangeInput in(f.name(), f.size(), f.fetcher(), f.initial(3000), options(4096, 8192, 65536, 128 << 10));
  constexpr int kThreads = 8, kReads = 1500;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      std::vector<std::byte> buf;
      for (int i = 0; i < kReads; ++i) {
        const std::uint64_t offset = rng() % (f.size() + 2000);
        const std::size_t n = 1 + rng() % 20000;
        if (t % 4 == 3 && i % 16 == 0) {
          in.prefetch(std::vector<ByteRange>{{offset, n}, {offset + n + rng() % 20000, 5000}});
          continue;
        }
        buf.assign(n, std::byte{0});
        const std::size_t got = in.read_at(offset, buf);
        const std::size_t want = offset >= f.size() ? 0 : std::min<std::uint64_t>(n, f.size() - offset);
        if (got != want || std::memcmp(buf.data(), f.object().data() + offset, got) != 0) ++wrong;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  // Every range the fetcher was asked for is counted once, with its size.
  const std::vector<Range> ranges = f.ranges();
  std::uint64_t bytes = 0;
  for (const Range& r : ranges) {
    EXPECT_LE(r.first + r.second, f.size());
    EXPECT_GT(r.second, 0u);
    bytes += r.second;
  }
  EXPECT_EQ(in.stats().requests, ranges.size());
  EXPECT_EQ(in.stats().bytes, bytes);
  // The cache stays bounded: after a pass over the whole object (eight times the cache), its
  // first bytes are fetched again.
  for (std::uint64_t at = 0; at < f.size(); at += 4096) expect_read(in, f, at, 4096);
  f.clear();
  expect_read(in, f, 0, 3000);
  EXPECT_EQ(f.calls().size(), 1u);
}

TEST(RangeInput, ReadAheadFetchesEachPartOnceWhileReadersWait) {
  // A whole object read ahead in parts by background threads, read at once by several threads:
  // every byte right, each part fetched once in a call of its own, nothing fetched twice.
  RecordingFetcher f(object_bytes(1 << 20, 31));
  auto in = std::make_shared<RangeInput>(f.name(), f.size(), f.fetcher(), voxpipe::FetchedBytes{},
                                         options(4096, 1000, 65536, 4 << 20));
  const std::vector<ByteRange> whole{{0, f.size()}};
  in->read_ahead(whole);
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t)
    readers.emplace_back([&, t] {
      for (std::uint64_t at = static_cast<std::uint64_t>(t) * 4096; at < f.size(); at += 16384)
        expect_read(*in, f, at, 4096);
    });
  for (auto& r : readers) r.join();
  std::vector<Range> got = f.ranges();
  std::sort(got.begin(), got.end());
  std::vector<Range> parts;
  for (std::uint64_t at = 0; at < f.size(); at += 65536) parts.push_back({at, 65536});
  EXPECT_EQ(got, parts);
  for (const Call& c : f.calls()) EXPECT_EQ(c.size(), 1u);
  EXPECT_EQ(in->stats().bytes, f.size());
}

TEST(RangeInput, ReadAheadErrorReachesTheReaderWaitingForThePart) {
  RecordingFetcher f(object_bytes(200000, 32), "s3://bucket/sub-03_bold.nii.gz");
  auto in = std::make_shared<RangeInput>(f.name(), f.size(), f.fetcher(), voxpipe::FetchedBytes{},
                                         options(4096, 1000, 1 << 20, 4 << 20));
  f.inject(RecordingFetcher::Fault::error);  // the one part's request fails
  const std::vector<ByteRange> whole{{0, f.size()}};
  in->read_ahead(whole);
  std::vector<std::byte> buf(10);
  auto err = vptest::catch_error([&] { in->read_at(100, buf); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->path(), f.name());
  // The failed part is forgotten: the next read fetches what it needs.
  expect_read(*in, f, 100, 10);
}

TEST(RangeInput, ReadAheadWithoutSharedOwnershipFetchesAtOnce) {
  RecordingFetcher f(object_bytes(100000, 33));
  RangeInput in(f.name(), f.size(), f.fetcher(), {}, options(4096, 1000, 50000, 1 << 20));
  const std::vector<ByteRange> whole{{0, f.size()}};
  in.read_ahead(whole);
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{0, 50000}, {50000, 50000}}}));
}

TEST(RangeInput, InterleavedFrontToBackReadersEachGrowTheirOwnRequests) {
  // Two decoders, each front to back through its own half (a parallel inflate's threads), their
  // reads interleaved: each doubles its own requests; neither resets the other's.
  RecordingFetcher f(object_bytes(100000, 34));
  RangeInput in(f.name(), f.size(), f.fetcher(), {}, options(1000, 1 << 20, 8000, 1 << 20));
  for (std::uint64_t at : {0u, 1000u, 3000u, 7000u, 15000u}) {
    expect_read(in, f, at, 10);
    expect_read(in, f, 50000 + at, 10);
  }
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{0, 1000}},
                                          {{50000, 1000}},
                                          {{1000, 2000}},
                                          {{51000, 2000}},
                                          {{3000, 4000}},
                                          {{53000, 4000}},
                                          {{7000, 8000}},
                                          {{57000, 8000}},
                                          {{15000, 8000}},
                                          {{65000, 8000}}}));
}

// Waits (up to 10 s) until `in` has received `requests` answers.
bool wait_for_requests(const RangeInput& in, std::uint64_t requests) {
  for (int i = 0; i < 10000 && in.stats().requests < requests; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return in.stats().requests >= requests;
}

TEST(RangeInput, ReadAheadKeepsAtMostItsWindowAheadOfTheReader) {
  // 16 parts, a window of 3: three are fetched before any read, then one more each time a read
  // reaches a part; a reader that stops leaves three fetched ahead, not the object.
  RecordingFetcher f(object_bytes(16 * 10000, 35));
  RemoteInputOptions o = options(100, 1000, 10000, 1 << 20);
  o.read_ahead_bytes = 30000;
  auto in = std::make_shared<RangeInput>(f.name(), f.size(), f.fetcher(), voxpipe::FetchedBytes{}, o);
  const std::vector<ByteRange> whole{{0, f.size()}};
  in->read_ahead(whole);
  ASSERT_TRUE(wait_for_requests(*in, 3));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(in->stats().requests, 3u);
  expect_read(*in, f, 0, 10);
  ASSERT_TRUE(wait_for_requests(*in, 4));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(in->stats().requests, 4u);
  std::vector<Range> got = f.ranges();
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<Range>{{0, 10000}, {10000, 10000}, {20000, 10000}, {30000, 10000}}));
  // The rest, read front to back: every part once, in parts, nothing else.
  for (std::uint64_t at = 10; at < f.size(); at += 2500) expect_read(*in, f, at, 2500);
  got = f.ranges();
  std::sort(got.begin(), got.end());
  std::vector<Range> parts;
  for (std::uint64_t at = 0; at < f.size(); at += 10000) parts.push_back({at, 10000});
  EXPECT_EQ(got, parts);
}

TEST(RangeInput, ReadAheadOfAnObjectLargerThanTheCacheStreamsThroughIt) {
  // An object eight times the cache, read ahead and read front to back in small reads: every
  // byte right, each part fetched once as one request of its own, never a small miss.
  RecordingFetcher f(object_bytes(64 * 4096, 36));
  RemoteInputOptions o = options(512, 1000, 4096, 8 * 4096);
  o.read_ahead_bytes = 4 * 4096;
  auto in = std::make_shared<RangeInput>(f.name(), f.size(), f.fetcher(), voxpipe::FetchedBytes{}, o);
  const std::vector<ByteRange> whole{{0, f.size()}};
  in->read_ahead(whole);
  for (std::uint64_t at = 0; at < f.size(); at += 1024) expect_read(*in, f, at, 1024);
  std::vector<Range> got = f.ranges();
  std::sort(got.begin(), got.end());
  std::vector<Range> parts;
  for (std::uint64_t at = 0; at < f.size(); at += 4096) parts.push_back({at, 4096});
  EXPECT_EQ(got, parts);
  for (const Call& c : f.calls()) EXPECT_EQ(c.size(), 1u);
  EXPECT_EQ(in->stats().bytes, f.size());
}

TEST(RemoteInput, ForwardsToItsRangeInput) {
  RecordingFetcher f(object_bytes(300000, 20), "az://container/blob.nii");
  voxpipe::RemoteInput remote(f.name(), f.size(), f.fetcher(), f.initial(100),
                              options(1000, 1000, 100000, 1 << 20), "\"etag-1\"");
  EXPECT_EQ(remote.name(), f.name());
  EXPECT_EQ(remote.version(), "\"etag-1\"");
  EXPECT_EQ(remote.size(), f.size());
  EXPECT_EQ(remote.input()->path(), f.name());
  EXPECT_EQ(remote.input()->size(), f.size());
  EXPECT_TRUE(remote.input()->fetches());
  remote.prefetch(std::vector<ByteRange>{{0, 250000}});
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{100, 100000}, {100100, 100000}, {200100, 49900}}}));
  EXPECT_EQ(remote.stats().requests, 3u);
  EXPECT_EQ(remote.stats().bytes, 249900u);
  f.clear();
  expect_read(*remote.input(), f, 0, 250000);
  EXPECT_TRUE(f.calls().empty());
}

TEST(RemoteInput, NoFetcherIsInvalidArgument) {
  auto err = vptest::catch_error([] { voxpipe::RemoteInput r("s3://b/k.nii", 10, nullptr); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::invalid_argument);
  EXPECT_EQ(err->path(), "s3://b/k.nii");
}

}  // namespace
