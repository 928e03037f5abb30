// Reads through cuFile (cufile.hpp, load.cpp). The policy (choose_cufile, $VOXPIPE_CUFILE), the
// page-cache probe, and, on the stand-in driver (fake_cuda.cpp) with a stand-in libcufile
// (fake_cufile.cpp, which preads through an aligned bounce buffer into the stand-in's "device"
// memory): uncompressed NIfTI loads through cuFile equal read_nifti_data bit for bit at
// aligned and unaligned data offsets, in chunks that give whole aligned reads, with scaling,
// byte swaps and the direct device-to-device copy; what falls back to the pinned ring and why;
// errors; everything released. Nothing here says how fast real GPUDirect Storage is.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <optional>

#include "cuda/cufile.hpp"
#include "cuda/device_sink.hpp"
#include "cuda/fatbin.hpp"
#include "cuda/load.hpp"
#include "fake_cuda_counters.hpp"
#include "gz_images.hpp"
#include "test_support.hpp"
#include "voxpipe/device.hpp"
#include "voxpipe/nifti.hpp"

namespace {

namespace vc = voxpipe::cuda;
using vc::CufileDriver;
using vc::CufilePolicy;
using voxpipe::DType;
using voxpipe::ErrorCode;
using vptest::Bytes;

// ---- the policy -------------------------------------------------------------------------------

TEST(CufilePolicy, ChoiceFollowsPolicyDriverSizeAndPageCache) {
  CufileDriver gds, compat, broken;
  gds.usable = compat.usable = true;
  gds.gds = true;
  gds.reason = "GPUDirect Storage through nvidia-fs 2.17";
  compat.reason = "cuFile runs in its compatibility mode only";
  broken.reason = "cuFileDriverOpen failed: X";
  const std::uint64_t big = vc::kCufileMinBytes, small = vc::kCufileMinBytes - 1;
  using P = CufilePolicy;
  EXPECT_FALSE(vc::choose_cufile(P::off, &gds, big, 0).use);
  EXPECT_EQ(vc::choose_cufile(P::off, &gds, big, 0).reason, "VOXPIPE_CUFILE=off");

  auto c = vc::choose_cufile(P::automatic, &gds, big, 0);
  EXPECT_TRUE(c.use);
  EXPECT_EQ(c.reason, gds.reason);
  EXPECT_TRUE(vc::choose_cufile(P::automatic, &gds, big, 0.49).use);
  EXPECT_TRUE(vc::choose_cufile(P::automatic, &gds, big, -1).use);  // unknown: not cached
  c = vc::choose_cufile(P::automatic, &gds, big, 0.5);
  EXPECT_FALSE(c.use);
  EXPECT_NE(c.reason.find("page cache"), std::string::npos) << c.reason;
  c = vc::choose_cufile(P::automatic, &gds, small, 0);
  EXPECT_FALSE(c.use);
  EXPECT_NE(c.reason.find("is under 16 MiB"), std::string::npos) << c.reason;
  c = vc::choose_cufile(P::automatic, &compat, big, 0);
  EXPECT_FALSE(c.use);
  EXPECT_EQ(c.reason, compat.reason);
  c = vc::choose_cufile(P::automatic, &broken, big, 0);
  EXPECT_FALSE(c.use);
  EXPECT_EQ(c.reason, "cuFile cannot be used: cuFileDriverOpen failed: X");
  EXPECT_FALSE(vc::choose_cufile(P::automatic, nullptr, big, 0).use);

  // on: any size, compatibility mode, cached; never without a driver.
  EXPECT_TRUE(vc::choose_cufile(P::on, &compat, 1, 1.0).use);
  EXPECT_TRUE(vc::choose_cufile(P::on, &gds, small, 1.0).use);
  EXPECT_FALSE(vc::choose_cufile(P::on, &broken, big, 0).use);
}

using vptest::ScopedEnv;

TEST(CufilePolicy, ReadFromTheEnvironment) {
  for (auto [value, want] : {std::pair{"auto", CufilePolicy::automatic}, {"", CufilePolicy::automatic},
                             {"On", CufilePolicy::on}, {"OFF", CufilePolicy::off}}) {
    ScopedEnv env("VOXPIPE_CUFILE", value);
    EXPECT_EQ(vc::cufile_policy_from_env(), want) << value;
  }
  {
    ScopedEnv env("VOXPIPE_CUFILE", nullptr);
    EXPECT_EQ(vc::cufile_policy_from_env(), CufilePolicy::automatic);
  }
  ScopedEnv env("VOXPIPE_CUFILE", "gds");
  const auto e = vptest::catch_error([] { vc::cufile_policy_from_env(); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::invalid_argument);
  EXPECT_EQ(e->field(), "VOXPIPE_CUFILE");
  EXPECT_NE(std::string(e->what()).find("'gds'"), std::string::npos) << e->what();
}

TEST(CufilePolicy, LibraryNameFromTheEnvironment) {
  {
    ScopedEnv env("VOXPIPE_CUFILE_LIBRARY", nullptr);
    EXPECT_EQ(vc::cufile_library_name(), "libcufile.so.0");
  }
  ScopedEnv env("VOXPIPE_CUFILE_LIBRARY", "/opt/x/libcufile.so.0");
  EXPECT_EQ(vc::cufile_library_name(), "/opt/x/libcufile.so.0");
}

// Pages just written are in the page cache; once written back and dropped, they are not.
// Writes `path` back to disk and drops its pages from the page cache.
void evict(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << path;
  EXPECT_EQ(::fdatasync(fd), 0);
  EXPECT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  ::close(fd);
}

TEST(CufilePolicy, PageCacheFraction) {
  vptest::TempDir dir;
  const std::string path = dir.file("p.bin");
  vptest::write_file(path, vptest::random_bytes(64 * 4096, 1));
  EXPECT_DOUBLE_EQ(vc::page_cache_fraction(path, 0, 64 * 4096), 1.0);
  EXPECT_DOUBLE_EQ(vc::page_cache_fraction(path, 352, 10), 1.0);  // an unaligned range
  EXPECT_EQ(vc::page_cache_fraction(path, 0, 0), 0.0);
  EXPECT_EQ(vc::page_cache_fraction(dir.file("absent"), 0, 10), -1.0);
  evict(path);
  EXPECT_LT(vc::page_cache_fraction(path, 0, 64 * 4096), 0.5);
}

// ---- loads on the stand-in driver and libcufile ----------------------------------------------

struct FakeCufileCounters {
  long opens, handles, reads, aligned_reads, bytes;
};

class FakeCufile : public ::testing::Test {
 protected:
  void SetUp() override {
    if (vc::kernel_fatbin().empty()) GTEST_SKIP() << voxpipe::cuda_status().reason;
    std::string why;
    library_ = vc::DriverLibrary::open(VOXPIPE_FAKE_CUDA_PATH, &why);
    ASSERT_TRUE(library_) << why;
    ASSERT_EQ(library_->api().init(0), 0);
    cuda_counters_.emplace(VOXPIPE_FAKE_CUDA_PATH);
    handle_ = ::dlopen(VOXPIPE_FAKE_CUFILE_PATH, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(handle_, nullptr) << ::dlerror();
    configure_ = reinterpret_cast<void (*)(int, int, int, int)>(::dlsym(handle_, "voxpipe_fake_cufile_configure"));
    counters_ = reinterpret_cast<FakeCufileCounters (*)()>(::dlsym(handle_, "voxpipe_fake_cufile_counters"));
    ASSERT_TRUE(configure_ && counters_);
    configure(false);
    ctx_.emplace(library_->api(), 0);
  }
  void TearDown() override {
    ctx_.reset();
    vc::empty_device_caches();
    if (handle_) ::dlclose(handle_);
  }
  void configure(bool gds, bool fail_open = false, bool fail_register = false, int read_errno = 0) {
    configure_(gds, fail_open, fail_register, read_errno);
  }
  std::unique_ptr<CufileDriver> open_driver() { return vc::open_cufile(VOXPIPE_FAKE_CUFILE_PATH, *ctx_); }

  // Loads `image` to the device with `options` and returns the bytes, checking the route.
  Bytes device_load(const voxpipe::NiftiImage& image, const voxpipe::OutputSpec& spec,
                    vc::StagingOptions options, const std::string& route, vc::StagingStats* stats = nullptr) {
    vc::StagingStats own;
    options.stats = stats ? stats : &own;
    std::size_t n = voxpipe::dtype_size(spec.type);
    for (auto d : image.shape) n *= static_cast<std::size_t>(d);
    Bytes out(n, 0xEE);
    {
      vc::DeviceBuffer dst(*ctx_, n);
      vc::load_nifti_to_device(image, spec, *ctx_, dst.get(), n, options);
      vc::ScopedContext scope(*ctx_);
      vc::check(ctx_->api(), ctx_->api().memcpy_dtoh(out.data(), dst.get(), n), "cuMemcpyDtoH_v2");
    }
    EXPECT_EQ(options.stats->route, route) << options.stats->cufile_reason;
    return out;
  }

  void expect_all_released() {
    vc::empty_device_caches();
    EXPECT_EQ(counters_().handles, 0);
    ctx_.reset();
    cuda_counters_->expect_all_released();
    ctx_.emplace(library_->api(), 0);
  }

  std::unique_ptr<vc::DriverLibrary> library_;
  std::optional<vptest::FakeCudaCounterReader> cuda_counters_;
  std::optional<vc::PrimaryContext> ctx_;
  void* handle_ = nullptr;
  void (*configure_)(int, int, int, int) = nullptr;
  FakeCufileCounters (*counters_)() = nullptr;
};

using vptest::host_read;

voxpipe::NiftiImage write_image_at(const std::string& path, DType type, const std::vector<std::int64_t>& shape,
                                   bool big_endian, double slope, double inter, std::uint32_t vox_offset) {
  const voxpipe::NiftiImage image =
      vptest::write_random_image(path, type, shape, big_endian, slope, inter, vox_offset + shape[0], vox_offset);
  EXPECT_EQ(image.data_offset, vox_offset);
  return image;
}

TEST_F(FakeCufile, LoadsEqualReadNiftiDataBitForBit) {
  configure(false);
  const std::unique_ptr<CufileDriver> driver = open_driver();
  ASSERT_TRUE(driver->usable) << driver->reason;
  EXPECT_FALSE(driver->gds);
  EXPECT_NE(driver->reason.find("compatibility mode"), std::string::npos) << driver->reason;
  vptest::TempDir dir;
  struct Case {
    DType type;
    bool big_endian;
    double slope, inter;
    DType out;
  };
  const Case cases[] = {
      {DType::i16, false, 0.5, -7, DType::f32},   // the scaling kernel
      {DType::f32, false, 1, 0, DType::f32},      // no conversion: device-to-device copies
      {DType::i16, true, 1, 0, DType::i16},       // a byte swap only
      {DType::u8, false, 2, 1, DType::f64},
      {DType::f64, true, 0.25, 3, DType::f32},
  };
  for (std::uint32_t vox_offset : {352u, 4096u, 4096u + 1000u}) {
    for (const Case& k : cases) {
      const std::string path = dir.file("v" + std::to_string(vox_offset) + ".nii");
      const voxpipe::NiftiImage image =
          write_image_at(path, k.type, {61, 37, 23}, k.big_endian, k.slope, k.inter, vox_offset);
      const voxpipe::OutputSpec spec{k.out, k.out != k.type};
      const Bytes want = host_read(image, spec);
      // Chunks of whole aligned blocks (every read aligned), odd chunks (unaligned reads), and
      // the default (one chunk).
      for (vc::StagingOptions o : {vc::StagingOptions{3 * 4096, 4, 3}, vc::StagingOptions{50000, 3, 2},
                                   vc::StagingOptions{}}) {
        o.cufile_policy = CufilePolicy::on;
        o.cufile = driver.get();
        configure(false);
        const Bytes got = device_load(image, spec, o, "cufile");
        ASSERT_EQ(got, want) << voxpipe::dtype_name(k.type) << " -> " << voxpipe::dtype_name(k.out)
                             << " offset " << vox_offset << " chunk " << o.chunk_bytes;
        const FakeCufileCounters c = counters_();
        EXPECT_GT(c.reads, 0);
        if (o.chunk_bytes % 4096 == 0) {
          EXPECT_EQ(c.aligned_reads, c.reads) << "chunk " << o.chunk_bytes;
        }
      }
    }
  }
  expect_all_released();
}

// A .hdr/.img pair (voxels at offset 0) and a payload that is not whole aligned blocks.
TEST_F(FakeCufile, PairAtOffsetZero) {
  const std::unique_ptr<CufileDriver> driver = open_driver();
  vptest::TempDir dir;
  voxpipe::NiftiHeader h = vptest::make_header(1, DType::i32, {101, 7, 3}, false);
  const Bytes data = vptest::random_bytes(101 * 7 * 3 * 4, 9);
  voxpipe::write_nifti(dir.file("p.hdr"), h, {}, voxpipe::producer_from_bytes(vptest::as_bytes(data)));
  const voxpipe::NiftiImage image = voxpipe::open_nifti(dir.file("p.hdr"));
  ASSERT_EQ(image.data_offset, 0u);
  vc::StagingOptions o{4096, 2, 2};
  o.cufile_policy = CufilePolicy::on;
  o.cufile = driver.get();
  EXPECT_EQ(device_load(image, {DType::f32}, o, "cufile"), host_read(image, {DType::f32}));
  EXPECT_EQ(device_load(image, {DType::i32, false}, o, "cufile"), data);
  expect_all_released();
}

// The automatic policy: compatibility mode, small payloads and cached payloads stay on the
// pinned ring; a large uncached payload with GPUDirect Storage goes through cuFile.
TEST_F(FakeCufile, AutomaticPolicyUsesCufileOnlyWhereItHelps) {
  vptest::TempDir dir;
  const std::string path = dir.file("big.nii");
  const voxpipe::NiftiImage big = write_image_at(path, DType::i16, {256, 256, 130}, false, 1, 0, 352);
  ASSERT_GE(big.data_offset + 256 * 256 * 130 * 2 - 352, vc::kCufileMinBytes);
  const voxpipe::NiftiImage small = write_image_at(dir.file("small.nii"), DType::i16, {64, 64, 8}, false, 1, 0, 352);
  const voxpipe::OutputSpec spec{DType::i16, false};
  const Bytes want = host_read(big, spec);

  configure(false);
  std::unique_ptr<CufileDriver> compat = open_driver();
  vc::StagingOptions o;
  o.cufile_policy = CufilePolicy::automatic;
  o.cufile = compat.get();
  vc::StagingStats stats;
  EXPECT_EQ(device_load(big, spec, o, "pread", &stats), want);
  EXPECT_EQ(stats.cufile_reason, compat->reason);
  EXPECT_EQ(counters_().reads, 0);

  configure(true);
  std::unique_ptr<CufileDriver> gds = open_driver();
  ASSERT_TRUE(gds->gds);
  EXPECT_EQ(gds->reason, "GPUDirect Storage through nvidia-fs 2.17");
  o.cufile = gds.get();
  device_load(small, spec, o, "pread", &stats);
  EXPECT_NE(stats.cufile_reason.find("is under 16 MiB"), std::string::npos) << stats.cufile_reason;

  // Just written: in the page cache.
  EXPECT_EQ(device_load(big, spec, o, "pread", &stats), want);
  EXPECT_NE(stats.cufile_reason.find("page cache"), std::string::npos) << stats.cufile_reason;
  EXPECT_EQ(counters_().reads, 0);

  // Written back and dropped from the cache: cuFile.
  evict(path);
  EXPECT_EQ(device_load(big, spec, o, "cufile", &stats), want);
  EXPECT_EQ(stats.cufile_reason, gds->reason);
  EXPECT_EQ(counters_().aligned_reads, counters_().reads);
  EXPECT_GT(counters_().reads, 1);

  o.cufile_policy = CufilePolicy::off;
  EXPECT_EQ(device_load(big, spec, o, "pread", &stats), want);
  EXPECT_EQ(stats.cufile_reason, "VOXPIPE_CUFILE=off");
  expect_all_released();
}

// Where cuFile cannot read the file: the automatic policy falls back, `on` says why.
TEST_F(FakeCufile, FilesCufileRefuses) {
  vptest::TempDir dir;
  const voxpipe::NiftiImage image = write_image_at(dir.file("v.nii"), DType::i16, {300, 300, 100}, false, 1, 0, 352);
  const voxpipe::OutputSpec spec{DType::i16, false};
  const Bytes want = host_read(image, spec);
  evict(image.data_path);
  configure(true, false, /*fail_register=*/true);
  std::unique_ptr<CufileDriver> driver = open_driver();
  vc::StagingOptions o;
  o.cufile = driver.get();
  o.cufile_policy = CufilePolicy::automatic;
  vc::StagingStats stats;
  EXPECT_EQ(device_load(image, spec, o, "pread", &stats), want);
  EXPECT_NE(stats.cufile_reason.find("cuFileHandleRegister"), std::string::npos) << stats.cufile_reason;

  o.cufile_policy = CufilePolicy::on;
  auto e = vptest::catch_error([&] { device_load(image, spec, o, ""); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::unsupported);
  EXPECT_EQ(e->path(), image.data_path);
  EXPECT_NE(std::string(e->what()).find("CU_FILE_IO_NOT_SUPPORTED"), std::string::npos) << e->what();

  // A file system without O_DIRECT (tmpfs), where there is one.
  if (::access("/dev/shm", W_OK) == 0) {
    const std::string shm = "/dev/shm/voxpipe-cufile-test-" + std::to_string(::getpid()) + ".nii";
    const voxpipe::NiftiImage on_shm = write_image_at(shm, DType::i16, {300, 300, 100}, false, 1, 0, 352);
    const int direct = ::open(shm.c_str(), O_RDONLY | O_DIRECT);
    if (direct >= 0) {
      ::close(direct);
    } else {
      configure(true);
      e = vptest::catch_error([&] { device_load(on_shm, spec, o, ""); });
      ASSERT_TRUE(e);
      EXPECT_EQ(e->code(), ErrorCode::unsupported);
      EXPECT_EQ(e->field(), "O_DIRECT");
    }
    ::unlink(shm.c_str());
  }

  // No driver: `on` refuses with its reason.
  configure(true, /*fail_open=*/true);
  driver = open_driver();
  EXPECT_FALSE(driver->usable);
  EXPECT_EQ(driver->reason, "cuFileDriverOpen failed: CU_FILE_DRIVER_NOT_INITIALIZED (nvidia-fs driver is not loaded)");
  o.cufile = driver.get();
  e = vptest::catch_error([&] { device_load(image, spec, o, ""); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::unsupported);
  EXPECT_NE(std::string(e->what()).find("CU_FILE_DRIVER_NOT_INITIALIZED"), std::string::npos) << e->what();
  expect_all_released();
}

TEST_F(FakeCufile, ReadErrorsAndShortFilesLeaveNothingBehind) {
  vptest::TempDir dir;
  const std::string path = dir.file("v.nii");
  const voxpipe::NiftiImage image = write_image_at(path, DType::f32, {64, 64, 20}, false, 1, 0, 352);
  std::unique_ptr<CufileDriver> driver = open_driver();
  vc::StagingOptions o{4 * 4096, 3, 2};
  o.cufile_policy = CufilePolicy::on;
  o.cufile = driver.get();

  configure(false, false, false, EIO);
  auto e = vptest::catch_error([&] { device_load(image, {DType::f32}, o, ""); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::io);
  EXPECT_EQ(e->field(), "cuFileRead");
  EXPECT_EQ(e->path(), path);
  EXPECT_NE(std::string(e->what()).find(std::strerror(EIO)), std::string::npos) << e->what();
  expect_all_released();

  // The header promises more voxels than the file holds.
  configure(false);
  ASSERT_EQ(::truncate(path.c_str(), 352 + 64 * 64 * 20 * 4 - 10000), 0);
  const voxpipe::NiftiImage cut = voxpipe::open_nifti(path);
  e = vptest::catch_error([&] { device_load(cut, {DType::f32}, o, ""); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::truncated);
  EXPECT_EQ(e->path(), path);
  expect_all_released();
}

}  // namespace
