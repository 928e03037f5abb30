// The CUDA status report and the driver shim on a machine without the driver: the reasons it
// gives for a missing library, a library without the driver's symbols, and each cuFile
// obstacle; and the embedded kernels.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <algorithm>
#include <string>
#include <string_view>

#include "cuda/driver.hpp"
#include "cuda/fatbin.hpp"
#include "cuda/status.hpp"
#include "test_support.hpp"
#include "voxpipe/device.hpp"

namespace {

using voxpipe::cuda::ProbeSettings;

bool starts_with(const std::string& s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }

bool contains(std::span<const unsigned char> bytes, std::string_view needle) {
  return std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end()) != bytes.end();
}

// A library every test process has loaded (voxpipe links zlib), standing in for a library that
// loads but is not the one asked for.
constexpr const char* kOtherLibrary = "libz.so.1";

bool driver_installed() {
  void* h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h) ::dlclose(h);
  return h != nullptr;
}

TEST(CudaStatus, ReportsWhyTheGpuPathIsUnavailableHere) {
  const voxpipe::CudaStatus& st = voxpipe::cuda_status();
  EXPECT_EQ(&st, &voxpipe::cuda_status());  // probed once
  EXPECT_EQ(st.kernels_built, voxpipe::cuda::kernels_built());
  if (st.available) {
    EXPECT_TRUE(st.reason.empty());
    EXPECT_GT(st.device_count, 0);
    EXPECT_EQ(st.device_names.size(), static_cast<std::size_t>(st.device_count));
    EXPECT_GT(st.driver_version, 0);
    return;
  }
  EXPECT_FALSE(st.reason.empty());
  if (!st.kernels_built) {
    EXPECT_TRUE(starts_with(st.reason, "built without CUDA kernels (")) << st.reason;
  } else if (!driver_installed()) {
    EXPECT_TRUE(starts_with(st.reason, "libcuda.so.1 not found: ")) << st.reason;
    EXPECT_EQ(voxpipe::cuda::driver(), nullptr);
    EXPECT_EQ(st.driver_version, 0);
    EXPECT_EQ(st.device_count, 0);
    EXPECT_TRUE(st.device_names.empty());
  }
  EXPECT_FALSE(st.cufile_reason.empty());
}

TEST(CudaStatus, MissingDriverLibraryIsNamedWithTheLoaderMessage) {
  ProbeSettings s;
  s.cuda_library = "libvoxpipe-no-such-driver.so.1";
  const auto p = voxpipe::cuda::probe(s);
  EXPECT_FALSE(p.status.available);
  EXPECT_EQ(p.driver, nullptr);
  if (p.status.kernels_built) {
    EXPECT_TRUE(starts_with(p.status.reason, "libvoxpipe-no-such-driver.so.1 not found: "))
        << p.status.reason;
    // dlerror's text follows: it names the file it could not open.
    EXPECT_NE(p.status.reason.find("libvoxpipe-no-such-driver.so.1: "), std::string::npos)
        << p.status.reason;
  }
}

TEST(CudaStatus, LibraryWithoutTheDriverSymbolsIsRefusedByName) {
  std::string why;
  EXPECT_EQ(voxpipe::cuda::DriverLibrary::open(kOtherLibrary, &why), nullptr);
  EXPECT_EQ(why, std::string(kOtherLibrary) + " lacks cuInit (a driver older than CUDA 11?)");
}

TEST(CudaStatus, CufileReasons) {
  vptest::TempDir dir;
  const std::string udev = dir.path() + "/udev", osrelease = dir.path() + "/osrelease";
  vptest::fs::create_directory(udev);
  vptest::write_file(osrelease, vptest::Bytes{'6', '.', '1', '\n'});
  ProbeSettings s;
  s.cuda_library = "libvoxpipe-no-such-driver.so.1";
  s.udev_dir = udev;
  s.osrelease = osrelease;

  s.cufile_library = "libvoxpipe-no-such-cufile.so.0";
  auto p = voxpipe::cuda::probe(s);
  EXPECT_FALSE(p.status.cufile_available);
  EXPECT_TRUE(starts_with(p.status.cufile_reason, "libvoxpipe-no-such-cufile.so.0 not found: "))
      << p.status.cufile_reason;

  s.cufile_library = kOtherLibrary;  // a library that loads: the next checks run
  s.udev_dir = dir.path() + "/absent";
  p = voxpipe::cuda::probe(s);
  EXPECT_FALSE(p.status.cufile_available);
  EXPECT_EQ(p.status.cufile_reason,
            s.udev_dir + " is not readable, which cuFile needs (in a container: --volume "
                         "/run/udev:/run/udev:ro)");

  s.udev_dir = udev;
  vptest::write_file(osrelease, vptest::Bytes{'5', '.', '1', '5', '-', 'm', 'i', 'c', 'r', 'o',
                                              's', 'o', 'f', 't', '-', 'W', 'S', 'L', '2'});
  p = voxpipe::cuda::probe(s);
  EXPECT_FALSE(p.status.cufile_available);
  EXPECT_EQ(p.status.cufile_reason, "running under WSL, which has no GPUDirect Storage");

  vptest::write_file(osrelease, vptest::Bytes{'6', '.', '1', '\n'});
  p = voxpipe::cuda::probe(s);
  EXPECT_TRUE(p.status.cufile_available);
  EXPECT_EQ(p.status.cufile_reason,
            std::string(kOtherLibrary) +
                " loads; its driver is opened at the first uncompressed load that may read "
                "through it (VOXPIPE_CUFILE: auto, on, off), and cufile_status() says whether "
                "GPUDirect Storage runs");
}

// The build found nvcc here (it is installed wherever these tests run in CI), so the fatbin must
// be embedded, and hold the three extern "C" kernels by name.
TEST(CudaKernels, FatbinIsEmbeddedWithTheKernelNames) {
  const auto fatbin = voxpipe::cuda::kernel_fatbin();
  if (fatbin.empty()) GTEST_SKIP() << voxpipe::cuda_status().reason;
  EXPECT_GT(fatbin.size(), 10000u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(fatbin.data()) % 64, 0u);
  // The fatbin header's magic (fatbinary.h: 0xBA55ED50, little endian).
  ASSERT_GE(fatbin.size(), 4u);
  EXPECT_EQ(fatbin[0], 0x50);
  EXPECT_EQ(fatbin[1], 0xED);
  EXPECT_EQ(fatbin[2], 0x55);
  EXPECT_EQ(fatbin[3], 0xBA);
  for (const char* name : {voxpipe::cuda::kConvertRawKernel, voxpipe::cuda::kConvertNiftiKernel,
                           voxpipe::cuda::kConvertDicomKernel})
    EXPECT_TRUE(contains(fatbin, name)) << name;
}

}  // namespace
