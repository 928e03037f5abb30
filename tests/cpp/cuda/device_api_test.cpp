// The public device API (voxpipe/device.hpp), through public headers only. Without a usable
// driver (PublicDeviceApiUnavailable.*, this machine unless it has a GPU): DeviceMemory and the
// loads refuse with Error(unsupported) carrying cuda_status().reason. On the stand-in libcuda
// (fake_cuda.cpp): PublicDeviceApi.OnTheStandInDriver runs this executable again with the
// stand-in first on LD_LIBRARY_PATH as libcuda.so.1 (the process-wide probe loads the driver
// once, by name), where PublicDeviceApiChild.* load NIfTI files into DeviceMemory and compare
// what comes back with read_nifti_data bit for bit. That tests the API's plumbing (contexts,
// ranges, offsets, moves, frees), not a real GPU.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include "fake_cuda_counters.hpp"
#include "gz_images.hpp"
#include "test_support.hpp"
#include "voxpipe/device.hpp"
#include "voxpipe/nifti.hpp"

extern char** environ;

namespace {

using voxpipe::DType;
using voxpipe::DeviceMemory;
using voxpipe::ErrorCode;
using vptest::Bytes;

constexpr const char* kChildVariable = "VOXPIPE_PUBLIC_DEVICE_API_CHILD";

TEST(PublicDeviceApiUnavailable, ThrowsUnsupportedWithTheStatusReason) {
  const voxpipe::CudaStatus& status = voxpipe::cuda_status();
  if (status.available) GTEST_SKIP() << "CUDA is available here";
  ASSERT_FALSE(status.reason.empty());
  const auto e = vptest::catch_error([] { DeviceMemory m(0, 64); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::unsupported);
  EXPECT_NE(std::string(e->what()).find(status.reason), std::string::npos) << e->what();
}

// ---- on the stand-in driver (in a child process) ---------------------------------------------

TEST(PublicDeviceApi, OnTheStandInDriver) {
  if (!voxpipe::cuda_status().kernels_built) GTEST_SKIP() << voxpipe::cuda_status().reason;
  vptest::TempDir dir;
  std::filesystem::create_symlink(VOXPIPE_FAKE_CUDA_PATH, dir.file("libcuda.so.1"));
  const char* old = std::getenv("LD_LIBRARY_PATH");
  const std::string library_path = "LD_LIBRARY_PATH=" + dir.path() + (old && *old ? ":" + std::string(old) : "");
  const std::string child = std::string(kChildVariable) + "=1";
  std::vector<std::string> env_strings{library_path, child};
  for (char** e = environ; *e; ++e)
    if (std::string_view(*e).rfind("LD_LIBRARY_PATH=", 0) != 0) env_strings.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe", filter = "--gtest_filter=PublicDeviceApiChild.*";
  std::vector<char*> argv{exe.data(), filter.data(), nullptr};

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string log = dir.file("child.log");
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ASSERT_EQ(rc, 0) << "posix_spawn failed";
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  std::ifstream in(log);
  std::stringstream output;
  output << in.rdbuf();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output.str();
  // Every child test ran: none skipped.
  EXPECT_EQ(output.str().find("SKIPPED"), std::string::npos) << output.str();
  EXPECT_NE(output.str().find("[  PASSED  ] 3 tests"), std::string::npos) << output.str();
}

class PublicDeviceApiChild : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::getenv(kChildVariable)) GTEST_SKIP() << "run by PublicDeviceApi.OnTheStandInDriver";
    const voxpipe::CudaStatus& status = voxpipe::cuda_status();
    ASSERT_TRUE(status.available) << status.reason;
    ASSERT_EQ(status.device_names, std::vector<std::string>{"voxpipe fake device"});
    counters_.emplace(VOXPIPE_FAKE_CUDA_PATH);
    ASSERT_TRUE(counters_->ok());
  }
  void TearDown() override {
    if (counters_ && counters_->ok()) {
      // What loads keep between calls (the module once, pooled buffers, a retain), freed here.
      EXPECT_LE((*counters_)().modules, 1);
      voxpipe::cuda_empty_cache();
      counters_->expect_all_released();
    }
  }
  std::optional<vptest::FakeCudaCounterReader> counters_;
};

voxpipe::NiftiImage write_image(const std::string& path, DType type, const std::vector<std::int64_t>& shape,
                                bool big_endian, double slope, double inter, std::uint64_t seed) {
  return vptest::write_random_image(path, type, shape, big_endian, slope, inter, seed);
}
using vptest::host_read;

TEST_F(PublicDeviceApiChild, NiftiLoadsEqualReadNiftiDataBitForBit) {
  vptest::TempDir dir;
  struct Case {
    std::string name;
    DType type;
    bool big_endian;
    double slope, inter;
    voxpipe::OutputSpec spec;
  };
  const std::vector<Case> cases{
      {"i16_scaled.nii", DType::i16, false, 0.37, -1024.5, {DType::f32, true, false, false}},
      {"i16_swapped.nii.gz", DType::i16, true, 2.0, 1.0, {DType::f64, true, false, false}},
      {"u8_raw.nii", DType::u8, false, 0, 0, {DType::u8, false, false, false}},
      {"f32_swapped.nii", DType::f32, true, 0, 0, {DType::f32, false, false, false}},
  };
  const std::vector<std::int64_t> shape{37, 29, 11, 3};
  for (const Case& c : cases) {
    const auto image = write_image(dir.file(c.name), c.type, shape, c.big_endian, c.slope, c.inter,
                                   static_cast<std::uint64_t>(c.type) + 17);
    const Bytes want = host_read(image, c.spec);
    // At an offset inside a larger allocation, with guard bytes on both sides left alone.
    const std::size_t offset = 24;
    DeviceMemory mem(0, offset + want.size() + 40);
    EXPECT_EQ(mem.device(), 0);
    EXPECT_NE(mem.address(), 0u);
    const Bytes guard(mem.size(), 0xA5);
    mem.copy_from_host(0, vptest::as_bytes(guard));
    voxpipe::read_nifti_data_to_device(image, c.spec, mem, offset);
    Bytes all(mem.size());
    mem.copy_to_host(0, std::as_writable_bytes(std::span(all)));
    const Bytes got(all.begin() + offset, all.begin() + static_cast<std::ptrdiff_t>(offset + want.size()));
    EXPECT_EQ(got, want) << c.name;
    EXPECT_TRUE(std::all_of(all.begin(), all.begin() + offset, [](auto b) { return b == 0xA5; })) << c.name;
    EXPECT_TRUE(std::all_of(all.begin() + static_cast<std::ptrdiff_t>(offset + want.size()), all.end(),
                            [](auto b) { return b == 0xA5; }))
        << c.name;
    // The same bytes opened from memory load the same values, staged from the buffer.
    const Bytes stored = vptest::read_file(image.data_path);
    const auto in_memory = voxpipe::open_nifti_bytes(vptest::as_bytes(stored), nullptr, c.name);
    DeviceMemory from_memory(0, want.size());
    voxpipe::read_nifti_data_to_device(in_memory, c.spec, from_memory, 0);
    Bytes got_memory(want.size());
    from_memory.copy_to_host(0, std::as_writable_bytes(std::span(got_memory)));
    EXPECT_EQ(got_memory, want) << c.name << " from memory";
  }
}

TEST_F(PublicDeviceApiChild, RangesAreChecked) {
  vptest::TempDir dir;
  const auto image = write_image(dir.file("a.nii"), DType::i16, {8, 8, 4}, false, 0, 0, 3);
  DeviceMemory mem(0, 8 * 8 * 4 * 4);
  // f32 fits at 0 only; f64 does not fit; a copy past the end is refused.
  EXPECT_VP_ERROR(voxpipe::read_nifti_data_to_device(image, {DType::f32, true, false, false}, mem, 4),
                  ErrorCode::invalid_argument);
  EXPECT_VP_ERROR(voxpipe::read_nifti_data_to_device(image, {DType::f64, true, false, false}, mem),
                  ErrorCode::invalid_argument);
  Bytes out(16);
  EXPECT_VP_ERROR(mem.copy_to_host(mem.size() - 8, std::as_writable_bytes(std::span(out))),
                  ErrorCode::invalid_argument);
  EXPECT_VP_ERROR(mem.copy_from_host(mem.size() + 1, {}), ErrorCode::invalid_argument);
  // A conversion the host path refuses is refused here too.
  EXPECT_VP_ERROR(voxpipe::read_nifti_data_to_device(image, {DType::i16, false, true, false}, mem),
                  ErrorCode::invalid_argument);
  voxpipe::read_nifti_data_to_device(image, {DType::f32, true, false, false}, mem);
  EXPECT_EQ(mem.size(), 8u * 8 * 4 * 4);
}

TEST_F(PublicDeviceApiChild, MovesTransferOwnership) {
  const Bytes data = vptest::random_bytes(1000, 9);
  DeviceMemory a(0, data.size());
  a.copy_from_host(0, vptest::as_bytes(data));
  const std::uintptr_t address = a.address();
  DeviceMemory b(std::move(a));
  EXPECT_EQ(a.size(), 0u);  // NOLINT(bugprone-use-after-move): moved from, owns nothing
  EXPECT_EQ(a.address(), 0u);
  EXPECT_EQ(b.address(), address);
  DeviceMemory c(0, 10);
  c = std::move(b);  // frees c's own memory
  Bytes back(data.size());
  c.copy_to_host(0, std::as_writable_bytes(std::span(back)));
  EXPECT_EQ(back, data);
  DeviceMemory empty(0, 0);
  EXPECT_EQ(empty.size(), 0u);
  empty.copy_to_host(0, {});
  voxpipe::cuda_empty_cache();                       // what loads keep between calls
  EXPECT_EQ((*counters_)().device_allocations, 1);  // a's, now c's; c's own was freed
  EXPECT_EQ((*counters_)().retains, 1);              // one primary context, shared
}

}  // namespace
