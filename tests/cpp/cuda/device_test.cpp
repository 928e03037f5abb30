// The device sink. On a GPU (CudaDevice.*, skipped where cuda_status() says the GPU path is
// unavailable, with the reason): a file staged to device memory through pinned buffers, streams
// and the conversion kernels equals the host sink's output (hence core::select_conversion's) bit
// for bit, for NIfTI conversions, raw copies and DICOM BitsStored + rescale, and .nii.gz loads
// (plain gzip, sized members, seek index) equal read_nifti_data. Everywhere
// (FakeDriver.*): the same checks against a stand-in libcuda (fake_cuda.cpp) that runs the
// kernels' shared function on the CPU, which tests the sink's own logic (slots, staging areas,
// element offsets, the direct copy, context push/pop, resources released) and the driver probe
// past dlopen; it proves nothing about a real GPU.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <optional>
#include <tuple>

#include "core/convert.hpp"
#include "core/file.hpp"
#include "cuda/device_sink.hpp"
#include "cuda/element_op.hpp"
#include "cuda/fatbin.hpp"
#include "cuda/load.hpp"
#include "cuda/staging.hpp"
#include "cuda/status.hpp"
#include "fake_cuda_counters.hpp"
#include "gz_images.hpp"
#include "test_support.hpp"
#include "voxpipe/device.hpp"

namespace {

namespace vc = voxpipe::cuda;
using voxpipe::DType;
using vc::ElementOp;
using vptest::Bytes;

// Stages bytes [prefix, prefix + payload) of `path` with `op` through the host sink and through
// the device sink on `ctx`; returns both outputs.
std::pair<Bytes, Bytes> both(const vc::PrimaryContext& ctx, const std::string& path,
                             std::size_t prefix, std::size_t payload, const ElementOp& op,
                             const vc::StagingOptions& o) {
  voxpipe::core::InputFile file(path);
  const vc::ChunkSource source = vc::file_chunk_source(file, prefix, payload);
  const std::size_t in = voxpipe::dtype_size(op.source), out = voxpipe::dtype_size(op.dest);
  Bytes host(payload / in * out), device(host.size(), 0xEE);
  vc::HostConvertSink host_sink(op, std::as_writable_bytes(std::span(host)));
  vc::stage(source, in, host_sink, o);

  vc::DeviceBuffer dst(ctx, device.size());
  {
    vc::DeviceConvertSink sink(ctx, op, dst.get(), dst.size(), 2);
    vc::stage(source, in, sink, o);
  }
  vc::ScopedContext scope(ctx);
  vc::check(ctx.api(), ctx.api().memcpy_dtoh(device.data(), dst.get(), device.size()), "cuMemcpyDtoH_v2");
  return {host, device};
}

void nifti_conversions_equal_the_host_path(const vc::PrimaryContext& ctx) {
  vptest::TempDir dir;
  const std::size_t prefix = 352;
  for (DType t : {DType::u8, DType::i16, DType::u16, DType::i32, DType::i64, DType::u64, DType::f32,
                  DType::f64, DType::c64}) {
    const std::size_t n = 1 << 16;
    const Bytes file = vptest::random_bytes(prefix + n * voxpipe::dtype_size(t), static_cast<unsigned>(t));
    const std::string path = dir.path() + "/v.nii";
    vptest::write_file(path, file);
    for (bool swap : {false, true}) {
      for (auto [scale, slope, inter] :
           {std::tuple{false, 1.0, 0.0}, {true, 0.37, -1024.5}, {true, 1.0, 3.0}}) {
        for (DType dest : {DType::f32, DType::f64}) {
          const voxpipe::core::Conversion c{t, swap, dest, false, scale, slope, inter};
          if (!voxpipe::core::select_conversion(c)) continue;
          const auto [host, device] = both(ctx, path, prefix, n * voxpipe::dtype_size(t),
                                           vc::nifti_element_op(c), {50000, 4, 3});
          ASSERT_EQ(host, device) << voxpipe::dtype_name(t) << " -> " << voxpipe::dtype_name(dest)
                                  << " swap " << swap << " slope " << slope << " inter " << inter;
        }
      }
    }
  }
}

void raw_and_dicom_equal_the_host_path(const vc::PrimaryContext& ctx) {
  vptest::TempDir dir;
  const Bytes file = vptest::random_bytes(1000 + 2 * 300001, 5);
  const std::string path = dir.path() + "/v.dcm";
  vptest::write_file(path, file);
  ElementOp raw;
  raw.source = raw.dest = DType::i16;
  for (bool swap : {false, true}) {
    raw.swap = swap;
    const auto [h, d] = both(ctx, path, 1000, 2 * 300001, raw, {65536, 3, 2});
    EXPECT_EQ(h, d) << "raw swap " << swap;
  }
  ElementOp dicom;
  dicom.kind = vc::ElementKind::dicom;
  dicom.source = DType::i16;
  dicom.unused_bits = 4;
  dicom.swap = true;
  for (DType dest : {DType::i16, DType::f32, DType::f64}) {
    dicom.dest = dest;
    dicom.modality = dest != DType::i16;
    dicom.scaling = dicom.modality ? vc::Scaling::both : vc::Scaling::none;
    dicom.slope = 2.5;
    dicom.inter = -1024;
    const auto [h, d] = both(ctx, path, 1000, 2 * 300001, dicom, {1 << 20, 8, 4});
    EXPECT_EQ(h, d) << "dicom to " << voxpipe::dtype_name(dest);
  }
}

// load_nifti_to_device on every kind of .nii.gz (the push path: the parallel inflate writes
// into the pinned buffers while earlier chunks are copied and converted) equals read_nifti_data,
// for small rings and chunks and for the defaults; a truncated file is Error(truncated).
void gz_loads_equal_read_nifti_data(const vc::PrimaryContext& ctx) {
  vptest::TempDir dir;
  using voxpipe::GzipLayout;
  // 4.7 MB of i16: ~2.6 MB as one gzip member, past GzipSource's 2 MiB parallel threshold.
  const std::vector<std::int64_t> shape{64, 64, 48, 12};
  const std::vector<voxpipe::NiftiImage> images{
      vptest::write_noisy_gz_image(dir.file("plain.nii.gz"), shape, GzipLayout::single),
      vptest::write_noisy_gz_image(dir.file("members.nii.gz"), shape, GzipLayout::members),
      vptest::write_noisy_gz_image(dir.file("indexed.nii.gz"), shape, GzipLayout::single, 1 << 20)};
  ASSERT_GT(std::filesystem::file_size(images[0].data_path), 2u << 20);
  const voxpipe::OutputSpec spec{DType::f32, true, false, false};
  const std::size_t bytes = 4 * 64 * 64 * 48 * 12;
  for (const auto& image : images) {
    Bytes want(bytes);
    voxpipe::read_nifti_data(image, {}, spec, std::as_writable_bytes(std::span(want)));
    for (const vc::StagingOptions& o :
         {vc::StagingOptions{65536, 2, 4, 2}, vc::StagingOptions{1 << 20, 4, 4, 1}, vc::StagingOptions{}}) {
      vc::DeviceBuffer dst(ctx, bytes);
      vc::load_nifti_to_device(image, spec, ctx, dst.get(), bytes, o);
      Bytes got(bytes, 0xEE);
      vc::copy_to_host(ctx, dst.get(), std::as_writable_bytes(std::span(got)));
      EXPECT_EQ(got, want) << image.data_path << " chunk " << o.chunk_bytes << " ring " << o.buffers;
    }
  }
  Bytes file = vptest::read_file(images[0].data_path);
  file.resize(file.size() * 3 / 4);
  vptest::write_file(dir.file("truncated.nii.gz"), file);
  const auto truncated = voxpipe::open_nifti(dir.file("truncated.nii.gz"));
  vc::DeviceBuffer dst(ctx, bytes);
  EXPECT_VP_ERROR(vc::load_nifti_to_device(truncated, spec, ctx, dst.get(), bytes, {65536, 2, 4, 2}),
                  voxpipe::ErrorCode::truncated);
}

// ---- on a GPU -------------------------------------------------------------------------------

class CudaDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!voxpipe::cuda_status().available) GTEST_SKIP() << voxpipe::cuda_status().reason;
  }
};

TEST_F(CudaDevice, NiftiConversionsEqualTheHostPathBitForBit) {
  vc::PrimaryContext ctx(0);
  nifti_conversions_equal_the_host_path(ctx);
}

TEST_F(CudaDevice, RawAndDicomEqualTheHostPathBitForBit) {
  vc::PrimaryContext ctx(0);
  raw_and_dicom_equal_the_host_path(ctx);
}

TEST_F(CudaDevice, GzipNiftiLoadsEqualReadNiftiDataBitForBit) {
  vc::PrimaryContext ctx(0);
  gz_loads_equal_read_nifti_data(ctx);
}

TEST(CudaDeviceUnavailable, SinkRefusesWithTheStatusReason) {
  if (voxpipe::cuda_status().available) GTEST_SKIP() << "a GPU is available";
  const auto e = vptest::catch_error([] { vc::PrimaryContext ctx(0); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), voxpipe::ErrorCode::unsupported);
  EXPECT_NE(std::string(e->what()).find(voxpipe::cuda_status().reason), std::string::npos) << e->what();
}

// ---- on the stand-in driver -----------------------------------------------------------------

class FakeDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    if (vc::kernel_fatbin().empty()) GTEST_SKIP() << voxpipe::cuda_status().reason;
    std::string why;
    library_ = vc::DriverLibrary::open(VOXPIPE_FAKE_CUDA_PATH, &why);
    ASSERT_TRUE(library_) << why;
    ASSERT_EQ(library_->api().init(0), 0);
    counters_.emplace(VOXPIPE_FAKE_CUDA_PATH);
    ASSERT_TRUE(counters_->ok());
  }
  void TearDown() override {
    vc::empty_device_caches();  // before the driver goes
  }
  // Once the resources kept between loads are dropped, everything allocated, created, retained
  // or pushed has been released.
  void expect_all_released() {
    vc::empty_device_caches();
    counters_->expect_all_released();
  }
  std::unique_ptr<vc::DriverLibrary> library_;
  std::optional<vptest::FakeCudaCounterReader> counters_;
};

TEST_F(FakeDriver, NiftiConversionsEqualTheHostPath) {
  {
    vc::PrimaryContext ctx(library_->api(), 0);
    nifti_conversions_equal_the_host_path(ctx);
  }
  EXPECT_GT((*counters_)().launches, 0);
  expect_all_released();
}

TEST_F(FakeDriver, RawAndDicomEqualTheHostPath) {
  {
    vc::PrimaryContext ctx(library_->api(), 0);
    const vptest::FakeCudaCounters before = (*counters_)();
    raw_and_dicom_equal_the_host_path(ctx);
    const vptest::FakeCudaCounters after = (*counters_)();
    // The native-order raw copy went straight to the output: copies without kernels.
    EXPECT_GT(after.copies - before.copies, after.launches - before.launches);
  }
  expect_all_released();
}

TEST_F(FakeDriver, GzipNiftiLoadsEqualReadNiftiDataAndFailuresLeaveNothingBehind) {
  {
    vc::PrimaryContext ctx(library_->api(), 0);
    gz_loads_equal_read_nifti_data(ctx);
  }
  expect_all_released();
}

// The module is loaded once and the pinned buffers and staging areas of one load serve the
// next: five loads allocate what one does. empty_device_caches frees them and the retain.
TEST_F(FakeDriver, LoadsReuseTheModuleAndTheStagingMemory) {
  vptest::TempDir dir;
  const std::string path = dir.path() + "/a.nii";
  vptest::write_file(path, vptest::random_bytes(352 + 2 * 5000, 4));
  {
    vc::PrimaryContext ctx(library_->api(), 0);
    vc::DeviceBuffer dst(ctx, 4 * 5000);
    voxpipe::core::InputFile file(path);
    const long before = (*counters_)().launches;
    long per_load = 0;
    for (int i = 0; i < 5; ++i) {
      vc::DeviceConvertSink sink(ctx, vc::nifti_element_op({DType::i16, false, DType::f32, false, false, 1, 0}),
                                 dst.get(), dst.size());
      vc::stage(vc::file_chunk_source(file, 352, 2 * 5000), 2, sink, {512, 4, 3});
      const vptest::FakeCudaCounters c = (*counters_)();
      if (i == 0) per_load = c.launches - before;
      EXPECT_EQ(c.launches - before, (i + 1) * per_load);  // every load converted its chunks
      EXPECT_EQ(c.modules, 1);
      EXPECT_EQ(c.host_allocations, 4);        // the ring, pooled
      EXPECT_EQ(c.device_allocations, 1 + 4);  // the output and 4 staging areas, pooled
      EXPECT_EQ(c.retains, 2);                 // ctx's and the pool's
    }
    EXPECT_EQ(per_load, (2 * 5000 + 511) / 512);
    const auto res = vc::DeviceResources::of(ctx);
    EXPECT_EQ(res->idle_pinned_bytes(), 4u * 512);
    EXPECT_EQ(res->idle_device_bytes(), 4u * 512);
    vc::empty_device_caches();  // `res` still holds them until it goes
    EXPECT_EQ((*counters_)().host_allocations, 4);
  }
  expect_all_released();
}

// A returned buffer is pooled while the pool stays within its cap, and reused for a request of
// at least half its size; others are allocated. The cap is kPoolBytes for loads one after
// another, and grows to the most bytes ever in use at once for loads side by side.
TEST_F(FakeDriver, ThePinnedPoolIsCapped) {
  const std::size_t q = vc::DeviceResources::kPoolBytes / 4;
  {
    vc::PrimaryContext ctx(library_->api(), 0);
    vc::ScopedContext scope(ctx);
    auto res = vc::DeviceResources::of(ctx);
    std::byte* a = res->take_pinned(3 * q);
    res->give_pinned(a, 3 * q);
    EXPECT_EQ(res->idle_pinned_bytes(), 3 * q);
    std::byte* b = res->take_pinned(q);  // a is too large for it: allocated
    std::byte* c = res->take_pinned(q);
    EXPECT_NE(b, a);
    EXPECT_EQ((*counters_)().host_allocations, 3);
    res->give_pinned(b, q);  // 4q idle: within kPoolBytes
    res->give_pinned(c, q);  // 5q: over it (at most 3q were ever in use at once): freed
    EXPECT_EQ((*counters_)().host_allocations, 2);
    EXPECT_EQ(res->idle_pinned_bytes(), 4 * q);
    std::byte* d = res->take_pinned(2 * q);  // reuses a (3q: at most twice 2q)
    EXPECT_EQ(d, a);
    std::byte* e = res->take_pinned(64);  // b is too large for 64 bytes: allocated
    EXPECT_NE(e, b);
    EXPECT_EQ((*counters_)().host_allocations, 3);
    res->give_pinned(d, 2 * q);  // back under the size it was asked for
    res->give_pinned(e, 64);     // 3q + 64 idle: within the cap
    EXPECT_EQ((*counters_)().host_allocations, 3);
    EXPECT_EQ(res->idle_pinned_bytes(), 3 * q + 64);

    // Six rings of q side by side, 6q > kPoolBytes: all of them stay for the next six.
    vc::empty_device_caches();
    res.reset();
    EXPECT_EQ((*counters_)().host_allocations, 0);
    res = vc::DeviceResources::of(ctx);
    std::vector<std::byte*> rings;
    for (int i = 0; i < 6; ++i) rings.push_back(res->take_pinned(q));
    for (std::byte* r : rings) res->give_pinned(r, q);
    EXPECT_EQ(res->idle_pinned_bytes(), 6 * q);
    EXPECT_EQ((*counters_)().host_allocations, 6);
    rings.clear();
    for (int i = 0; i < 6; ++i) rings.push_back(res->take_pinned(q));
    EXPECT_EQ((*counters_)().host_allocations, 6);  // none new
    for (std::byte* r : rings) res->give_pinned(r, q);
  }
  expect_all_released();
}

TEST_F(FakeDriver, ProbeReportsTheDevice) {
  vc::ProbeSettings s;
  s.cuda_library = VOXPIPE_FAKE_CUDA_PATH;
  const vc::Probe p = vc::probe(s);
  EXPECT_TRUE(p.status.available) << p.status.reason;
  EXPECT_EQ(p.status.reason, "");
  EXPECT_EQ(p.status.driver_version, 13000);
  EXPECT_EQ(p.status.device_count, 1);
  EXPECT_EQ(p.status.device_names, std::vector<std::string>{"voxpipe fake device"});
  EXPECT_NE(p.driver, nullptr);
}

TEST_F(FakeDriver, CuInitFailureIsReportedByName) {
  ::setenv("VOXPIPE_FAKE_CUDA_INIT_ERROR", "100", 1);
  vc::ProbeSettings s;
  s.cuda_library = VOXPIPE_FAKE_CUDA_PATH;
  const vc::Probe p = vc::probe(s);
  ::unsetenv("VOXPIPE_FAKE_CUDA_INIT_ERROR");
  EXPECT_FALSE(p.status.available);
  EXPECT_EQ(p.status.reason, "cuInit failed: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)");
  EXPECT_EQ(p.driver, nullptr);
}

TEST_F(FakeDriver, DriverErrorsNameTheCallAndTheCudaError) {
  const vc::DriverApi& api = library_->api();
  auto e = vptest::catch_error([&] { vc::check(api, 2, "cuMemAlloc_v2", "f.nii"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), voxpipe::ErrorCode::limit);
  EXPECT_STREQ(e->what(), "f.nii: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
  e = vptest::catch_error([&] { vc::check(api, 999, "cuLaunchKernel"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), voxpipe::ErrorCode::io);
  EXPECT_STREQ(e->what(), "cuLaunchKernel: CUDA error 999");
  // A driver call without a current context fails, and says so.
  e = vptest::catch_error([&] {
    vc::drv::CUdeviceptr p = 0;
    vc::check(api, api.mem_alloc(&p, 16), "cuMemAlloc_v2");
  });
  ASSERT_TRUE(e);
  EXPECT_STREQ(e->what(), "cuMemAlloc_v2: CUDA_ERROR_INVALID_CONTEXT (invalid device context)");
}

TEST_F(FakeDriver, ReadErrorLeavesNothingBehind) {
  vptest::TempDir dir;
  const std::string path = dir.path() + "/short.nii";
  vptest::write_file(path, vptest::random_bytes(352 + 2 * 1000, 3));
  {
    vc::PrimaryContext ctx(library_->api(), 0);
    voxpipe::core::InputFile file(path);
    const auto source = vc::file_chunk_source(file, 352, 2 * 5000);  // 4000 elements missing
    vc::DeviceBuffer dst(ctx, 4 * 5000);
    vc::DeviceConvertSink sink(ctx, vc::nifti_element_op({DType::i16, false, DType::f32, false, false, 1, 0}),
                               dst.get(), dst.size());
    EXPECT_VP_ERROR(vc::stage(source, 2, sink, {512, 4, 3}), voxpipe::ErrorCode::truncated);
  }
  expect_all_released();
}

}  // namespace
