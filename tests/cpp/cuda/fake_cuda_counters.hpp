// The stand-in libcuda's (fake_cuda.cpp) resource counters, as the device tests read them, and
// the check that a test left nothing behind. Shared by device_test.cpp and device_api_test.cpp.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

namespace vptest {

// Mirrors VoxpipeFakeCudaCounters, which voxpipe_fake_cuda_counters() returns by value.
struct FakeCudaCounters {
  long device_allocations, host_allocations, streams, events, modules, retains, launches, copies,
      context_depth;
};

// The stand-in's counters, read through a dlopen of the same file as the loaded driver (dlopen
// then returns that instance). Closes the handle on destruction.
class FakeCudaCounterReader {
 public:
  // Fails the current test (and reads nothing) when the library or the symbol is missing.
  explicit FakeCudaCounterReader(const char* path) {
    handle_ = ::dlopen(path, RTLD_NOW | RTLD_LOCAL);
    EXPECT_NE(handle_, nullptr) << ::dlerror();
    if (handle_)
      read_ = reinterpret_cast<FakeCudaCounters (*)()>(::dlsym(handle_, "voxpipe_fake_cuda_counters"));
    EXPECT_NE(read_, nullptr);
  }
  ~FakeCudaCounterReader() {
    if (handle_) ::dlclose(handle_);
  }
  FakeCudaCounterReader(const FakeCudaCounterReader&) = delete;
  FakeCudaCounterReader& operator=(const FakeCudaCounterReader&) = delete;

  bool ok() const { return read_ != nullptr; }
  FakeCudaCounters operator()() const { return read_(); }

  // Everything allocated, created, retained or pushed has been freed, destroyed, released or
  // popped, each exactly once.
  void expect_all_released() const {
    const FakeCudaCounters c = read_();
    EXPECT_EQ(c.device_allocations, 0);
    EXPECT_EQ(c.host_allocations, 0);
    EXPECT_EQ(c.streams, 0);
    EXPECT_EQ(c.events, 0);
    EXPECT_EQ(c.modules, 0);
    EXPECT_EQ(c.retains, 0);
    EXPECT_EQ(c.context_depth, 0);
  }

 private:
  void* handle_ = nullptr;
  FakeCudaCounters (*read_)() = nullptr;
};

}  // namespace vptest
