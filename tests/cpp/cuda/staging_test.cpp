// The staging pipeline with the host sink (no GPU needed): the output equals
// core::select_conversion over the whole payload for many chunk sizes, thread counts and ring
// sizes, payload offsets and sequential producers; chunks are whole elements, handed over in
// order, and a buffer is reused only after its release; failures (short file, a throwing
// producer, a throwing sink, an allocation failure) stop every thread and surface as the first
// error, naming the file and the offset.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/convert.hpp"
#include "core/file.hpp"
#include "cuda/element_op.hpp"
#include "cuda/staging.hpp"
#include "recording_sink.hpp"
#include "test_support.hpp"

namespace {

using voxpipe::DType;
using voxpipe::ErrorCode;
using voxpipe::core::Conversion;
using voxpipe::cuda::ChunkSource;
using voxpipe::cuda::StagedChunk;
using voxpipe::cuda::StagingOptions;
using vptest::Bytes;

// The CPU path on the whole payload at once.
Bytes reference(const Conversion& c, const Bytes& payload) {
  const std::size_t n = payload.size() / voxpipe::dtype_size(c.source);
  Bytes out(n * voxpipe::dtype_size(c.dest));
  voxpipe::core::select_conversion(c)(
      c, reinterpret_cast<const std::byte*>(payload.data()),
      static_cast<std::ptrdiff_t>(voxpipe::dtype_size(c.source)),
      reinterpret_cast<std::byte*>(out.data()), static_cast<std::ptrdiff_t>(voxpipe::dtype_size(c.dest)), n);
  return out;
}

Bytes host_stage(const ChunkSource& source, const Conversion& c, const StagingOptions& o) {
  const std::size_t n = source.size / voxpipe::dtype_size(c.source);
  Bytes out(n * voxpipe::dtype_size(c.dest), 0xEE);
  voxpipe::cuda::HostConvertSink sink(voxpipe::cuda::nifti_element_op(c),
                                      std::as_writable_bytes(std::span(out)));
  voxpipe::cuda::stage(source, voxpipe::dtype_size(c.source), sink, o);
  return out;
}

// A file of `prefix` junk bytes followed by `payload`.
std::string write_payload_file(const vptest::TempDir& dir, const Bytes& payload, std::size_t prefix,
                               const char* name = "data.bin") {
  Bytes file = vptest::random_bytes(prefix, 99);
  file.insert(file.end(), payload.begin(), payload.end());
  const std::string path = dir.path() + "/" + name;
  vptest::write_file(path, file);
  return path;
}

TEST(Staging, FileOutputEqualsSelectConversionForManyChunkingsThreadsAndRings) {
  vptest::TempDir dir;
  const Conversion c{DType::i16, true, DType::f32, false, true, 0.5, -3};
  const std::size_t n = 1009;  // prime: no chunk size divides it
  const Bytes payload = vptest::random_bytes(n * 2, 7);
  const Bytes expected = reference(c, payload);
  for (std::size_t prefix : {0u, 352u, 4097u}) {
    const std::string path = write_payload_file(dir, payload, prefix);
    voxpipe::core::InputFile file(path);
    const ChunkSource source = voxpipe::cuda::file_chunk_source(file, prefix, payload.size());
    // 1 byte: one element per chunk; 1001: cut down to 1000; 2018: the whole payload.
    for (std::size_t chunk : {1u, 6u, 64u, 1001u, 2018u, 4096u}) {
      for (unsigned readers : {1u, 3u, 8u}) {
        for (unsigned ring : {1u, 2u, 8u}) {
          const Bytes out = host_stage(source, c, {chunk, ring, readers});
          ASSERT_EQ(out, expected) << "prefix " << prefix << " chunk " << chunk << " readers "
                                   << readers << " ring " << ring;
        }
      }
    }
  }
}

TEST(Staging, EveryDtypeThroughTheHostSink) {
  for (DType t : {DType::u8, DType::i8, DType::u16, DType::i16, DType::u32, DType::i32, DType::u64,
                  DType::i64, DType::f32, DType::f64, DType::c64, DType::c128, DType::rgb24}) {
    const Bytes payload = vptest::random_bytes(voxpipe::dtype_size(t) * 999, static_cast<unsigned>(t));
    ChunkSource source;
    source.name = "memory";
    source.size = payload.size();
    source.fill = [&](std::uint64_t off, std::span<std::byte> dst) {
      std::memcpy(dst.data(), payload.data() + off, dst.size());
    };
    for (bool swap : {false, true}) {
      Conversion c{t, swap, DType::f64, false, true, 2, 1};
      if (t == DType::rgb24) c = Conversion{t, false, t, true, false, 1, 0};  // raw only
      EXPECT_EQ(host_stage(source, c, {100, 3, 2}), reference(c, payload))
          << voxpipe::dtype_name(t) << " swap " << swap;
    }
  }
}

using vptest::RecordingSink;

ChunkSource memory_source(const Bytes& payload, bool concurrent = true) {
  ChunkSource s;
  s.name = "memory.bin";
  s.base_offset = 1000;
  s.size = payload.size();
  s.concurrent = concurrent;
  s.fill = [&payload](std::uint64_t off, std::span<std::byte> dst) {
    std::memcpy(dst.data(), payload.data() + off, dst.size());
  };
  return s;
}

TEST(Staging, ChunksAreWholeElementsInOrderAndSlotsAreReleasedBeforeReuse) {
  const Bytes payload = vptest::random_bytes(3 * 1001, 3);  // 1001 rgb24 elements
  for (std::size_t chunk : {1u, 3u, 7u, 100u, 3003u, 5000u}) {
    for (unsigned ring : {1u, 2u, 8u}) {
      RecordingSink sink(3);
      voxpipe::cuda::stage(memory_source(payload), 3, sink, {chunk, ring, 4});
      const std::size_t cut = std::max<std::size_t>(chunk / 3, 1) * 3;
      EXPECT_EQ(sink.chunk_bytes_, std::min(cut, payload.size()));
      ASSERT_EQ(sink.data_.size(), payload.size());
      EXPECT_EQ(std::memcmp(sink.data_.data(), payload.data(), payload.size()), 0);
      const std::uint64_t chunks = (payload.size() + sink.chunk_bytes_ - 1) / sink.chunk_bytes_;
      EXPECT_EQ(sink.next_index_, chunks);
      // Every slot but the last M chunks' was released before its reuse; finish covers the rest.
      EXPECT_EQ(static_cast<std::uint64_t>(sink.released_), chunks - sink.slots_);
      EXPECT_EQ(sink.allocated_, static_cast<int>(sink.slots_));
      EXPECT_EQ(sink.freed_, sink.allocated_.load());
      EXPECT_EQ(sink.attached_, sink.detached_.load());
      EXPECT_EQ(sink.finished_, 1);
      EXPECT_EQ(sink.abandoned_, 0);
    }
  }
}

TEST(Staging, SequentialProducerIsCalledOnOneThreadInOrder) {
  const Bytes payload = vptest::random_bytes(8 * 5000, 5);
  ChunkSource s = memory_source(payload, false);
  std::uint64_t expected_offset = 0;
  std::set<std::thread::id> threads;
  s.fill = [&](std::uint64_t off, std::span<std::byte> dst) {
    EXPECT_EQ(off, expected_offset);  // no lock needed: one thread only, checked below
    expected_offset += dst.size();
    threads.insert(std::this_thread::get_id());
    std::memcpy(dst.data(), payload.data() + off, dst.size());
  };
  RecordingSink sink(8);
  voxpipe::cuda::stage(s, 8, sink, {1000, 4, 8});
  EXPECT_EQ(threads.size(), 1u);
  EXPECT_EQ(expected_offset, payload.size());
  EXPECT_EQ(std::memcmp(sink.data_.data(), payload.data(), payload.size()), 0);
}

TEST(Staging, EmptyPayloadFinishesWithoutBuffers) {
  RecordingSink sink(2);
  const Bytes empty;
  voxpipe::cuda::stage(memory_source(empty), 2, sink, {});
  EXPECT_EQ(sink.finished_, 1);
  EXPECT_EQ(sink.allocated_, 0);
  EXPECT_EQ(sink.attached_, 1);  // finish runs inside attach/detach, as a device sink needs
  EXPECT_EQ(sink.detached_, 1);
}

TEST(Staging, ShortFileIsTruncatedNamingFileAndOffset) {
  vptest::TempDir dir;
  const Bytes payload = vptest::random_bytes(4 * 3000, 11);
  const std::string path = write_payload_file(dir, payload, 100);
  voxpipe::core::InputFile file(path);
  // The header promises 1000 more elements than the file holds.
  const ChunkSource source = voxpipe::cuda::file_chunk_source(file, 100, payload.size() + 4000);
  const Conversion c{DType::f32, false, DType::f64, false, false, 1, 0};
  for (unsigned readers : {1u, 4u}) {
    Bytes out((3000 + 1000) * 8);
    voxpipe::cuda::HostConvertSink sink(voxpipe::cuda::nifti_element_op(c), std::as_writable_bytes(std::span(out)));
    const auto e = vptest::catch_error([&] { voxpipe::cuda::stage(source, 4, sink, {4096, 3, readers}); });
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code(), ErrorCode::truncated) << e->what();
    EXPECT_EQ(e->path(), path);
    // The chunk that crosses the end (payload byte 12000) starts at 2 * 4096 = 8192.
    EXPECT_EQ(e->offset(), std::optional<std::uint64_t>(100 + 8192)) << e->what();
    EXPECT_NE(std::string(e->what()).find("but the file ends"), std::string::npos) << e->what();
  }
}

TEST(Staging, ProducerExceptionStopsEverythingAndIsRethrownWithFileAndOffset) {
  const Bytes payload = vptest::random_bytes(2 * 50000, 13);
  for (unsigned readers : {1u, 2u, 6u}) {
    for (unsigned ring : {1u, 2u, 8u}) {
      ChunkSource s = memory_source(payload);
      std::atomic<int> calls = 0;
      s.fill = [&](std::uint64_t off, std::span<std::byte> dst) {
        ++calls;
        if (off == 2 * 1000 * 7) throw std::runtime_error("inflate failed");
        std::memcpy(dst.data(), payload.data() + off, dst.size());
      };
      RecordingSink sink(2);
      const auto e = vptest::catch_error([&] { voxpipe::cuda::stage(s, 2, sink, {2000, ring, readers}); });
      ASSERT_TRUE(e);
      EXPECT_EQ(e->code(), ErrorCode::io);
      EXPECT_EQ(e->path(), "memory.bin");
      EXPECT_EQ(e->offset(), std::optional<std::uint64_t>(1000 + 14000));
      EXPECT_EQ(e->detail(), "inflate failed");
      EXPECT_EQ(sink.abandoned_, 1);
      EXPECT_EQ(sink.finished_, 0);
      EXPECT_LE(sink.next_index_, 7u);  // nothing consumed past the failed chunk
      EXPECT_EQ(sink.freed_, sink.allocated_.load());
      EXPECT_EQ(sink.attached_, sink.detached_.load());  // every thread ended
      EXPECT_LT(calls, 50);  // the readers stopped early
    }
  }
}

TEST(Staging, SinkExceptionStopsTheReadersAndIsRethrownWithFileAndOffset) {
  const Bytes payload = vptest::random_bytes(4 * 40000, 17);
  for (unsigned readers : {1u, 4u}) {
    for (unsigned ring : {1u, 8u}) {
      RecordingSink sink(4);
      sink.fail_at_ = 3;  // throws while consuming chunk 2
      const auto e = vptest::catch_error(
          [&] { voxpipe::cuda::stage(memory_source(payload), 4, sink, {400, ring, readers}); });
      ASSERT_TRUE(e);
      EXPECT_EQ(e->code(), ErrorCode::io);
      EXPECT_EQ(e->field(), "staging sink");
      EXPECT_EQ(e->offset(), std::optional<std::uint64_t>(1000 + 800));
      EXPECT_EQ(sink.abandoned_, 1);
      EXPECT_EQ(sink.freed_, sink.allocated_.load());
      EXPECT_EQ(sink.attached_, sink.detached_.load());
    }
  }
}

TEST(Staging, VoxpipeErrorsKeepTheirCodeAndGainTheOffset) {
  const Bytes payload = vptest::random_bytes(800, 19);
  ChunkSource s = memory_source(payload);
  s.fill = [](std::uint64_t off, std::span<std::byte>) {
    if (off >= 400) throw voxpipe::Error(ErrorCode::corrupt, "", "deflate", "invalid block type");
  };
  RecordingSink sink(1);
  const auto e = vptest::catch_error([&] { voxpipe::cuda::stage(s, 1, sink, {100, 2, 2}); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::corrupt);
  EXPECT_EQ(e->path(), "memory.bin");
  EXPECT_EQ(e->field(), "deflate");
  ASSERT_TRUE(e->offset());
  EXPECT_GE(*e->offset(), 1000u + 400u);
}

TEST(Staging, AllocationFailureFreesTheBuffersAllocatedSoFar) {
  const Bytes payload = vptest::random_bytes(1000, 23);
  RecordingSink sink(1);
  sink.fail_allocation_at_ = 2;
  EXPECT_THROW(voxpipe::cuda::stage(memory_source(payload), 1, sink, {100, 4, 2}), std::bad_alloc);
  EXPECT_EQ(sink.allocated_, 2);
  EXPECT_EQ(sink.freed_, 2);
  EXPECT_EQ(sink.attached_, 0);  // no thread was started
}

TEST(Staging, BadArgumentsAreRefused) {
  const Bytes payload = vptest::random_bytes(10, 1);
  RecordingSink sink(4);
  EXPECT_VP_ERROR(voxpipe::cuda::stage(memory_source(payload), 4, sink, {}), ErrorCode::invalid_argument);
  EXPECT_VP_ERROR(voxpipe::cuda::stage(memory_source(payload), 2, sink, {16, 0, 1}), ErrorCode::invalid_argument);
  EXPECT_VP_ERROR(voxpipe::cuda::stage(memory_source(payload), 2, sink, {16, 1, 0}), ErrorCode::invalid_argument);
  EXPECT_VP_ERROR(voxpipe::cuda::stage(memory_source(payload), 0, sink, {}), ErrorCode::invalid_argument);
  Bytes small(8);
  voxpipe::cuda::HostConvertSink host(
      voxpipe::cuda::nifti_element_op({DType::u8, false, DType::f32, false, false, 1, 0}),
      std::as_writable_bytes(std::span(small)));  // room for 2 of 10 elements
  EXPECT_VP_ERROR(voxpipe::cuda::stage(memory_source(payload), 1, host, {4, 2, 2}), ErrorCode::invalid_argument);
}

}  // namespace
