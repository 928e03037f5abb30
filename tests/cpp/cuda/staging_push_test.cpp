// The staging pipeline fed by a push producer (stage(PushSource)), through the host sink (no GPU
// needed). A synthetic producer that delivers pieces from pool threads in reverse order inside
// blocks of known size proves the mechanics: chunks whole and in order, buffers reused only
// after release, pieces smaller than chunks and spanning many chunks, rings of 1 and 2 buffers,
// waits when the sink is slow, and the overflow within the producer's reordering distance plus
// one piece. Real .nii.gz files of every kind (a plain gzip large enough for the speculative
// parallel inflate, voxpipe's sized members, a seek index) staged with stage_nifti_data equal
// read_nifti_data bit for bit for several chunk and ring sizes on 1 and 2 threads, with the
// overflow measured against the producer's own distance. Corrupt, truncated and short streams
// and a failing sink give one voxpipe::Error naming the file and an offset, and leave no thread.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/thread_pool.hpp"
#include "cuda/element_op.hpp"
#include "cuda/load.hpp"
#include "cuda/staging.hpp"
#include "gz_images.hpp"
#include "recording_sink.hpp"
#include "nifti/internal.hpp"
#include "test_support.hpp"

namespace {

namespace vc = voxpipe::cuda;
using voxpipe::DType;
using voxpipe::ErrorCode;
using vc::PushSource;
using vc::StagedChunk;
using vc::StagingOptions;
using vc::StagingStats;
using vptest::Bytes;

#if defined(__SANITIZE_THREAD__)
constexpr bool kTsan = true;  // ThreadSanitizer runs ~10x slower: fewer configurations
#else
constexpr bool kTsan = false;
#endif

// Threads of this process (the pool's workers included), from /proc.
int thread_count() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

// The thread count once threads that were just joined have left it (see below): read until it
// has not fallen for 50 ms. A baseline taken while one is still counted is one too high.
int settled_thread_count() {
  int n = thread_count();
  for (int stable = 0, i = 0; stable < 10 && i < 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const int now = thread_count();
    stable = now < n ? 0 : stable + 1;
    n = std::min(n, now);
  }
  return n;
}

// True once the process is back to `count` threads. A joined thread can stay in the count for a
// moment: the kernel wakes pthread_join before it has removed the exiting thread.
bool threads_return_to(int count) {
  for (int i = 0; i < 200 && thread_count() != count; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return thread_count() == count;
}

// Wraps a producer and measures what the overflow bound is stated in: its reordering distance
// D (the largest e - L over deliveries, a piece ending at e starting while L is the first byte
// no delivery, finished or in progress, has covered) and its largest piece.
class MeasuredProducer {
 public:
  PushSource wrap(PushSource source) {
    inner_ = std::move(source.produce);
    source.produce = [this](const voxpipe::core::ByteSink& deliver) {
      inner_([&](std::uint64_t offset, std::span<const std::byte> data) {
        {
          std::lock_guard lock(mutex_);
          distance_ = std::max(distance_, offset + data.size() - first_missing());
          largest_piece_ = std::max<std::uint64_t>(largest_piece_, data.size());
          add(offset, offset + data.size());
        }
        deliver(offset, data);
      });
    };
    return source;
  }
  std::uint64_t distance() const { return distance_; }
  std::uint64_t largest_piece() const { return largest_piece_; }

 private:
  std::uint64_t first_missing() const {
    return !done_.empty() && done_.begin()->first == 0 ? done_.begin()->second : 0;
  }
  void add(std::uint64_t lo, std::uint64_t hi) {  // merges [lo, hi) into done_
    auto it = done_.upper_bound(lo);
    if (it != done_.begin() && std::prev(it)->second >= lo) {
      --it;
      lo = it->first;
      hi = std::max(hi, it->second);
      it = done_.erase(it);
    }
    while (it != done_.end() && it->first <= hi) {
      hi = std::max(hi, it->second);
      it = done_.erase(it);
    }
    done_[lo] = hi;
  }
  std::function<void(const voxpipe::core::ByteSink&)> inner_;
  std::mutex mutex_;
  std::map<std::uint64_t, std::uint64_t> done_;  // delivered intervals
  std::uint64_t distance_ = 0, largest_piece_ = 0;
};

// A producer over `payload`: blocks of `block` bytes in order, each cut into pieces of `piece`
// bytes that pool threads deliver last piece first. Its reordering distance is at most `block`.
PushSource reversed_blocks(const Bytes& payload, std::size_t piece, std::size_t block, unsigned threads) {
  PushSource s;
  s.name = "pushed.bin";
  s.base_offset = 500;
  s.size = payload.size();
  s.produce = [&payload, piece, block, threads](const voxpipe::core::ByteSink& deliver) {
    for (std::size_t b = 0; b < payload.size(); b += block) {
      const std::size_t end = std::min(payload.size(), b + block);
      const std::size_t pieces = (end - b + piece - 1) / piece;
      voxpipe::core::parallel_for(pieces, threads, [&](std::size_t i) {
        const std::size_t at = b + (pieces - 1 - i) * piece;
        deliver(at, std::as_bytes(std::span(payload)).subspan(at, std::min(piece, end - at)));
      });
    }
  };
  return s;
}

using vptest::RecordingSink;

TEST(PushStaging, PiecesInAnyOrderArriveWholeInOrderForEveryChunkingRingAndThreadCount) {
  const Bytes payload = vptest::random_bytes(2 * 20011, 31);  // i16, a prime count
  // Pieces spanning many chunks or inside one, in reverse inside blocks; pieces in order.
  for (auto [piece, block] : {std::pair<std::size_t, std::size_t>{1000, 8000}, {7777, 23331}, {333, 333}}) {
    for (std::size_t chunk : {2u, 256u, 4096u, 65536u, 200000u}) {
      for (unsigned ring : {1u, 2u, 5u}) {
        for (unsigned threads : {1u, 2u, 4u}) {
          if (kTsan && chunk < 256) continue;
          MeasuredProducer measured;
          StagingStats stats;
          RecordingSink sink(2);
          vc::stage(measured.wrap(reversed_blocks(payload, piece, block, threads)), 2, sink,
                    {chunk, ring, 4, threads, &stats});
          const std::string where = "piece " + std::to_string(piece) + " chunk " + std::to_string(chunk) +
                                    " ring " + std::to_string(ring) + " threads " + std::to_string(threads);
          ASSERT_EQ(sink.data_.size(), payload.size()) << where;
          ASSERT_EQ(std::memcmp(sink.data_.data(), payload.data(), payload.size()), 0) << where;
          EXPECT_EQ(sink.finished_, 1);
          EXPECT_EQ(sink.abandoned_, 0);
          EXPECT_EQ(sink.freed_, sink.allocated_.load());
          EXPECT_EQ(sink.attached_, 1);  // consume and release on the calling thread only
          EXPECT_EQ(sink.detached_, 1);
          EXPECT_LE(measured.distance(), block) << where;
          EXPECT_LE(stats.overflow_peak_bytes, measured.distance() + measured.largest_piece()) << where;
        }
      }
    }
  }
}

TEST(PushStaging, ASlowSinkMakesCallbacksWaitAndTheOverflowStaysWithinTheProducersDistance) {
  // 4 MB pushed through a ring of 2 x 4 KiB whose release takes 20 us: the producer runs far
  // ahead of the sink, yet the overflow holds at most one block plus a piece.
  const Bytes payload = vptest::random_bytes(kTsan ? 1 << 20 : 4 << 20, 37);
  for (unsigned threads : {1u, 2u}) {
    MeasuredProducer measured;
    StagingStats stats;
    RecordingSink sink(4, std::chrono::microseconds(20));
    vc::stage(measured.wrap(reversed_blocks(payload, 3000, 24000, threads)), 4, sink,
              {4096, 2, 4, threads, &stats});
    ASSERT_EQ(sink.data_.size(), payload.size());
    EXPECT_EQ(std::memcmp(sink.data_.data(), payload.data(), payload.size()), 0);
    EXPECT_GT(stats.waits, 0u) << "no callback ever waited for the slow sink";
    EXPECT_GT(stats.overflow_pieces, 0u) << "no piece went beyond the window";
    EXPECT_LE(measured.distance(), 24000u);
    EXPECT_LE(stats.overflow_peak_bytes, measured.distance() + measured.largest_piece());
    EXPECT_LE(stats.overflow_peak_bytes, 24000u + 3000u);
  }
}

TEST(PushStaging, ProducerEndingEarlyIsTruncatedNamingFileAndOffset) {
  const Bytes payload = vptest::random_bytes(4 * 10000, 41);
  for (unsigned ring : {1u, 3u}) {
    PushSource s = reversed_blocks(payload, 1000, 4000, 2);
    s.size += 4 * 3000;  // the header promises 3000 more elements than the stream holds
    RecordingSink sink(4);
    const auto e = vptest::catch_error([&] { vc::stage(s, 4, sink, {4096, ring, 2}); });
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code(), ErrorCode::truncated) << e->what();
    EXPECT_EQ(e->path(), "pushed.bin");
    // The first incomplete chunk (payload byte 40000 is inside chunk 9, at 36864).
    EXPECT_EQ(e->offset(), std::optional<std::uint64_t>(500 + 9 * 4096)) << e->what();
    EXPECT_EQ(sink.next_index_, 9u);
    EXPECT_EQ(sink.abandoned_, 1);
    EXPECT_EQ(sink.finished_, 0);
    EXPECT_EQ(sink.freed_, sink.allocated_.load());
  }
}

TEST(PushStaging, ProducerAndSinkErrorsStopEverythingAndAreRethrownWithFileAndOffset) {
  const Bytes payload = vptest::random_bytes(2 * 200000, 43);
  RecordingSink warm_up(2);
  vc::stage(reversed_blocks(payload, 1000, 8000, 2), 2, warm_up, {4096, 2, 2});
  const int threads_before = settled_thread_count();  // the pool's workers exist by now
  for (unsigned ring : {1u, 2u, 8u}) {
    // The producer throws at payload byte 100000 (inside chunk 24).
    PushSource s = reversed_blocks(payload, 1000, 8000, 2);
    std::atomic<int> calls = 0;
    auto inner = s.produce;
    s.produce = [&, inner](const voxpipe::core::ByteSink& deliver) {
      inner([&](std::uint64_t offset, std::span<const std::byte> data) {
        ++calls;
        if (offset == 100000) throw std::runtime_error("inflate failed");
        deliver(offset, data);
      });
    };
    RecordingSink sink(2);
    auto e = vptest::catch_error([&] { vc::stage(s, 2, sink, {4096, ring, 2}); });
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code(), ErrorCode::io);
    EXPECT_EQ(e->path(), "pushed.bin");
    EXPECT_EQ(e->detail(), "inflate failed");
    ASSERT_TRUE(e->offset());
    EXPECT_LE(*e->offset(), 500u + 100000u);
    EXPECT_EQ(sink.abandoned_, 1);
    EXPECT_LE(sink.next_index_, 24u);
    EXPECT_LT(calls, 200);  // 400 pieces: the producer stopped early
    EXPECT_EQ(sink.freed_, sink.allocated_.load());
    EXPECT_TRUE(threads_return_to(threads_before));

    // The sink throws while consuming chunk 5; the producer may be waiting on the window.
    RecordingSink failing(2);
    failing.fail_at_ = 6;
    e = vptest::catch_error([&] { vc::stage(reversed_blocks(payload, 1000, 8000, 2), 2, failing, {4096, ring, 2}); });
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code(), ErrorCode::io);
    EXPECT_EQ(e->field(), "staging sink");
    EXPECT_EQ(e->offset(), std::optional<std::uint64_t>(500 + 5 * 4096));
    EXPECT_EQ(failing.abandoned_, 1);
    EXPECT_EQ(failing.freed_, failing.allocated_);
    EXPECT_TRUE(threads_return_to(threads_before));
  }
}

TEST(PushStaging, BadPiecesAreErrors) {
  const Bytes payload = vptest::random_bytes(1000, 47);
  PushSource s;
  s.name = "bad.bin";
  s.size = payload.size();
  s.produce = [&](const voxpipe::core::ByteSink& deliver) {
    deliver(0, std::as_bytes(std::span(payload)));
    deliver(900, std::as_bytes(std::span(payload)).first(200));  // past the end
  };
  RecordingSink sink(1);
  EXPECT_VP_ERROR(vc::stage(s, 1, sink, {100, 2, 1}), ErrorCode::invalid_argument);
  s.produce = nullptr;
  EXPECT_VP_ERROR(vc::stage(s, 1, sink, {100, 2, 1}), ErrorCode::invalid_argument);
}

// ---- .nii.gz files -----------------------------------------------------------------------------

const voxpipe::OutputSpec kSpec{DType::f32, true, false, false};

Bytes host_read(const voxpipe::NiftiImage& image, unsigned threads) {
  std::size_t n = 4;
  for (auto d : image.shape) n *= static_cast<std::size_t>(d);
  Bytes out(n);
  voxpipe::ReadOptions o;
  o.threads = threads;
  voxpipe::read_nifti_data(image, {}, kSpec, std::as_writable_bytes(std::span(out)), o);
  return out;
}

struct Staged {
  Bytes out;
  StagingStats stats;
  std::uint64_t distance = 0, largest_piece = 0;
};

// stage_nifti_data's push path through the host sink, with the producer measured.
Staged host_stage(const voxpipe::NiftiImage& image, StagingOptions o) {
  Staged r;
  std::size_t n = 4;
  for (auto d : image.shape) n *= static_cast<std::size_t>(d);
  r.out.assign(n, 0xEE);
  vc::HostConvertSink sink(vc::nifti_element_op(voxpipe::nifti::make_conversion(image, kSpec)),
                           std::as_writable_bytes(std::span(r.out)));
  const auto data = voxpipe::nifti::open_data_source(image);
  EXPECT_TRUE(data->prefers_read_range());
  MeasuredProducer measured;
  o.stats = &r.stats;
  vc::stage(measured.wrap(vc::nifti_push_source(image, *data, o)), 2, sink, o);
  r.distance = measured.distance();
  r.largest_piece = measured.largest_piece();
  return r;
}

class PushStagingGzip : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new vptest::TempDir;
    // 64 x 64 x 48 x 40 i16: 15.7 MB, ~8.5 MB as one gzip member (two speculative chunks).
    const std::vector<std::int64_t> shape{64, 64, 48, kTsan ? 20 : 40};
    using voxpipe::GzipLayout;
    plain_ = new voxpipe::NiftiImage(vptest::write_noisy_gz_image(dir_->file("plain.nii.gz"), shape, GzipLayout::single));
    members_ = new voxpipe::NiftiImage(vptest::write_noisy_gz_image(dir_->file("members.nii.gz"), shape, GzipLayout::members));
    indexed_ = new voxpipe::NiftiImage(
        vptest::write_noisy_gz_image(dir_->file("indexed.nii.gz"), shape, GzipLayout::single, 1 << 20));
  }
  static void TearDownTestSuite() {
    delete plain_;
    delete members_;
    delete indexed_;
    delete dir_;
  }
  static inline vptest::TempDir* dir_ = nullptr;
  static inline voxpipe::NiftiImage *plain_ = nullptr, *members_ = nullptr, *indexed_ = nullptr;
};

// (chunk bytes, ring buffers): chunks far smaller than the engines' pieces (1 MiB members,
// inflate pieces of up to 1 MiB) so that pieces span many chunks, rings of 1 and 2 buffers, an
// odd chunk size, and the defaults.
std::vector<std::pair<std::size_t, unsigned>> configurations() {
  if (kTsan) return {{4096, 1}, {65536 + 2, 2}, {1 << 20, 4}};
  return {{4096, 1}, {4096, 2}, {65536 + 2, 2}, {1 << 20, 3}, {std::size_t(8) << 20, 8}};
}

void expect_equal_to_read_nifti_data(const voxpipe::NiftiImage& image, const char* kind) {
  for (unsigned threads : {1u, 2u}) {
    const Bytes want = host_read(image, threads);
    for (auto [chunk, ring] : configurations()) {
      const Staged s = host_stage(image, {chunk, ring, 4, threads});
      ASSERT_EQ(s.out, want) << kind << " chunk " << chunk << " ring " << ring << " threads " << threads;
      EXPECT_LE(s.stats.overflow_peak_bytes, s.distance + s.largest_piece)
          << kind << " chunk " << chunk << " ring " << ring << " threads " << threads;
    }
  }
}

TEST_F(PushStagingGzip, PlainGzipThroughTheSpeculativeParallelInflateEqualsReadNiftiData) {
  const auto data = voxpipe::nifti::open_data_source(*plain_);
  ASSERT_FALSE(data->random_access());
  // GzipSource::kMinParallelCompressed is 2 MiB; two of the engine's 8 MiB chunks need more.
  ASSERT_GT(std::filesystem::file_size(plain_->data_path), kTsan ? 4u << 20 : 8u << 20);
  expect_equal_to_read_nifti_data(*plain_, "plain");
}

TEST_F(PushStagingGzip, SizedMembersEqualReadNiftiData) {
  ASSERT_TRUE(voxpipe::nifti::open_data_source(*members_)->random_access());
  expect_equal_to_read_nifti_data(*members_, "members");
}

TEST_F(PushStagingGzip, SeekIndexEqualsReadNiftiData) {
  ASSERT_TRUE(voxpipe::nifti::open_data_source(*indexed_)->random_access());
  expect_equal_to_read_nifti_data(*indexed_, "indexed");
}

TEST_F(PushStagingGzip, RandomAccessSourcesAreReadInRingSizedRangesSoTheOverflowDoesNotGrowWithTheFile) {
  // A ring of 2 x 64 KiB: whatever the file's size, the producer runs at most the ring's bytes
  // plus one span (1 MiB members, 1 MiB seek spacing) plus one piece ahead of the first missing
  // byte. One read_range over the payload would run ~payload / 8 ahead on 2 threads.
  for (const voxpipe::NiftiImage* image : {members_, indexed_}) {
    const Staged s = host_stage(*image, {65536, 2, 4, 2});
    const std::uint64_t ring = 2 * 65536, span = 1 << 20;
    EXPECT_LE(s.distance, ring + span + s.largest_piece) << image->data_path;
    EXPECT_LE(s.stats.overflow_peak_bytes, ring + span + 2 * s.largest_piece) << image->data_path;
  }
}

TEST_F(PushStagingGzip, SlowSinkOnThePlainGzipWaitsAndStaysBounded) {
  std::size_t n = 2;
  for (auto d : plain_->shape) n *= static_cast<std::size_t>(d);
  // 2 ms per release of a 256 KiB chunk: slower than the inflate; pieces of up to 1 MiB
  // also overrun the 512 KiB window while it is complete.
  RecordingSink sink(2, std::chrono::microseconds(2000));
  const auto data = voxpipe::nifti::open_data_source(*plain_);
  StagingStats stats;
  MeasuredProducer measured;
  const StagingOptions o{256 << 10, 2, 4, 2, &stats};
  vc::stage(measured.wrap(vc::nifti_push_source(*plain_, *data, o)), 2, sink, o);
  ASSERT_EQ(sink.data_.size(), n);
  EXPECT_GT(stats.waits, 0u);
  EXPECT_LE(stats.overflow_peak_bytes, measured.distance() + measured.largest_piece());
  // The engine's own bound (parallel_inflate.hpp): 2 x threads chunks of at most 16 x 8 MiB.
  EXPECT_LE(stats.overflow_peak_bytes, 2u * 2 * 16 * (8u << 20));
}

// A copy of `image`'s file with `edit` applied to its bytes, opened.
voxpipe::NiftiImage damaged(const vptest::TempDir& dir, const voxpipe::NiftiImage& image,
                            const char* name, const std::function<void(Bytes&)>& edit) {
  Bytes file = vptest::read_file(image.data_path);
  edit(file);
  vptest::write_file(dir.file(name), file);
  return voxpipe::open_nifti(dir.file(name));
}

TEST_F(PushStagingGzip, CorruptAndTruncatedGzipAreErrorsAndLeaveNoThread) {
  vptest::TempDir dir;
  (void)host_stage(*plain_, {1 << 20, 4, 4, 2});  // the pool's workers exist by now
  const auto size = std::filesystem::file_size(plain_->data_path);
  // Bytes in the middle of the deflate stream overwritten: bad codes, or a CRC32 mismatch.
  const auto corrupt = damaged(dir, *plain_, "corrupt.nii.gz", [&](Bytes& b) {
    for (std::size_t i = size / 2; i < size / 2 + 4096; ++i) b[i] = static_cast<std::uint8_t>(i * 7);
  });
  const auto truncated = damaged(dir, *plain_, "truncated.nii.gz", [&](Bytes& b) { b.resize(b.size() * 3 / 4); });
  const auto msize = std::filesystem::file_size(members_->data_path);
  const auto members_corrupt = damaged(dir, *members_, "members_corrupt.nii.gz", [&](Bytes& b) {
    for (std::size_t i = msize / 2; i < msize / 2 + 4096; ++i) b[i] = static_cast<std::uint8_t>(i * 7);
  });
  // The same damage is an error on the host path: the comparison is with what it rejects.
  for (const auto* image : {&corrupt, &truncated, &members_corrupt})
    ASSERT_TRUE(vptest::catch_error([&] { (void)host_read(*image, 2); })) << image->data_path;
  const int threads_before = settled_thread_count();
  for (auto [image, codes] : {std::pair{&corrupt, std::vector{ErrorCode::corrupt}},
                              std::pair{&truncated, std::vector{ErrorCode::truncated}},
                              std::pair{&members_corrupt, std::vector{ErrorCode::corrupt}}}) {
    for (unsigned threads : {1u, 2u}) {
      for (auto [chunk, ring] : {std::pair<std::size_t, unsigned>{65536, 1}, {1 << 20, 4}}) {
        const auto e = vptest::catch_error([&] { (void)host_stage(*image, {chunk, ring, 4, threads}); });
        ASSERT_TRUE(e) << image->data_path;
        EXPECT_NE(std::find(codes.begin(), codes.end(), e->code()), codes.end()) << e->what();
        EXPECT_EQ(e->path(), image->data_path) << e->what();
        EXPECT_TRUE(e->offset()) << e->what();
        EXPECT_TRUE(threads_return_to(threads_before)) << e->what();
      }
    }
  }
}

}  // namespace
