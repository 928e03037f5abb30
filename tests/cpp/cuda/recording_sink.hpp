// A staging sink for the pipeline tests (staging_test.cpp, staging_push_test.cpp) that records
// the bytes it is given and checks stage()'s contract: chunks in index order at contiguous
// offsets, whole elements, slot = index % M, buffers of the announced chunk size, and no slot
// consumed again before its release. It can refuse a chunk or an allocation, and make release
// slow (back-pressure).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cuda/staging.hpp"

namespace vptest {

class RecordingSink final : public voxpipe::cuda::StagingSink {
 public:
  explicit RecordingSink(std::size_t element, std::chrono::microseconds release_delay = {})
      : element_(element), delay_(release_delay) {}
  void begin(unsigned slots, std::size_t chunk_bytes) override {
    slots_ = slots;
    chunk_bytes_ = chunk_bytes;
    in_use_.assign(slots, false);
  }
  std::byte* allocate_buffer(std::size_t bytes) override {
    EXPECT_EQ(bytes, chunk_bytes_);
    if (fail_allocation_at_ && allocated_ == *fail_allocation_at_) throw std::bad_alloc();
    ++allocated_;
    return new std::byte[bytes];
  }
  void free_buffer(std::byte* p) noexcept override {
    ++freed_;
    delete[] p;
  }
  void attach_thread() override { ++attached_; }
  void detach_thread() noexcept override { ++detached_; }
  void consume(const voxpipe::cuda::StagedChunk& c) override {
    EXPECT_EQ(c.index, next_index_);
    EXPECT_EQ(c.offset, next_offset_);
    EXPECT_EQ(c.slot, c.index % slots_);
    EXPECT_EQ(c.data.size() % element_, 0u);
    {
      std::lock_guard lock(mutex_);  // release runs on reader threads (pull sources)
      EXPECT_FALSE(in_use_[c.slot]) << "slot " << c.slot << " consumed twice without release";
      in_use_[c.slot] = true;
    }
    data_.insert(data_.end(), c.data.begin(), c.data.end());
    ++next_index_;
    next_offset_ += c.data.size();
    if (fail_at_ && next_index_ == *fail_at_) throw std::runtime_error("sink refused the chunk");
  }
  void release(unsigned slot) override {
    if (delay_.count()) std::this_thread::sleep_for(delay_);
    std::lock_guard lock(mutex_);
    EXPECT_TRUE(in_use_[slot]) << "release of slot " << slot << " that holds nothing";
    in_use_[slot] = false;
    ++released_;
  }
  void finish() override { ++finished_; }
  void abandon() noexcept override { ++abandoned_; }

  std::optional<std::uint64_t> fail_at_;     // consume throws after this many chunks
  std::optional<int> fail_allocation_at_;    // allocate_buffer throws bad_alloc at this call
  std::size_t element_, chunk_bytes_ = 0;
  std::chrono::microseconds delay_;          // release sleeps this long first
  unsigned slots_ = 0;
  std::uint64_t next_index_ = 0, next_offset_ = 0;
  std::vector<std::byte> data_;
  std::atomic<int> allocated_ = 0, freed_ = 0, attached_ = 0, detached_ = 0, released_ = 0;
  int finished_ = 0, abandoned_ = 0;
  std::mutex mutex_;
  std::vector<bool> in_use_;
};

}  // namespace vptest
