// The device sink on a GPU: a file staged to device memory through pinned buffers, streams and
// the conversion kernels equals the host sink's output (hence core::select_conversion's) bit for
// bit, for NIfTI conversions with specials, a raw copy, and DICOM BitsStored + rescale. Skipped
// where cuda_status() says the GPU path is unavailable (the reason is printed).
#include <gtest/gtest.h>

#include <cstring>

#include "core/convert.hpp"
#include "core/file.hpp"
#include "cuda/device_sink.hpp"
#include "cuda/element_op.hpp"
#include "cuda/staging.hpp"
#include "test_support.hpp"
#include "voxpipe/device.hpp"

namespace {

using voxpipe::DType;
using voxpipe::cuda::ElementOp;
using vptest::Bytes;

class CudaDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!voxpipe::cuda_status().available) GTEST_SKIP() << voxpipe::cuda_status().reason;
  }
};

// Stages bytes [prefix, prefix + payload) of `path` with `op` through the host sink and the
// device sink; returns both outputs.
std::pair<Bytes, Bytes> both(const std::string& path, std::size_t prefix, std::size_t payload,
                             const ElementOp& op, const voxpipe::cuda::StagingOptions& o) {
  namespace vc = voxpipe::cuda;
  voxpipe::core::InputFile file(path);
  const vc::ChunkSource source = vc::file_chunk_source(file, prefix, payload);
  const std::size_t in = voxpipe::dtype_size(op.source), out = voxpipe::dtype_size(op.dest);
  Bytes host(payload / in * out), device(host.size(), 0xEE);
  vc::HostConvertSink host_sink(op, std::as_writable_bytes(std::span(host)));
  vc::stage(source, in, host_sink, o);

  vc::PrimaryContext ctx(0);
  vc::ScopedContext scope(ctx);
  vc::DeviceBuffer dst(device.size());
  {
    vc::DeviceConvertSink sink(ctx, op, dst.get(), dst.size(), 2);
    vc::stage(source, in, sink, o);
  }
  const vc::DriverApi& api = vc::require_driver();
  vc::check(api, api.memcpy_dtoh(device.data(), dst.get(), device.size()), "cuMemcpyDtoH_v2");
  return {host, device};
}

TEST_F(CudaDevice, NiftiConversionsEqualTheHostPathBitForBit) {
  vptest::TempDir dir;
  const std::size_t prefix = 352;
  for (DType t : {DType::u8, DType::i16, DType::u16, DType::i32, DType::i64, DType::u64, DType::f32,
                  DType::f64, DType::c64}) {
    const std::size_t n = 1 << 18;
    Bytes file = vptest::random_bytes(prefix + n * voxpipe::dtype_size(t), static_cast<unsigned>(t));
    const std::string path = dir.path() + "/v.nii";
    vptest::write_file(path, file);
    for (bool swap : {false, true}) {
      for (auto [scale, slope, inter] : {std::tuple{false, 1.0, 0.0}, {true, 0.37, -1024.5}, {true, 1.0, 3.0}}) {
        for (DType dest : {DType::f32, DType::f64}) {
          const voxpipe::core::Conversion c{t, swap, dest, false, scale, slope, inter};
          if (!voxpipe::core::select_conversion(c)) continue;
          const auto [host, device] = both(path, prefix, n * voxpipe::dtype_size(t),
                                           voxpipe::cuda::nifti_element_op(c), {100000, 4, 3});
          ASSERT_EQ(host, device) << voxpipe::dtype_name(t) << " -> " << voxpipe::dtype_name(dest)
                                  << " swap " << swap << " slope " << slope << " inter " << inter;
        }
      }
    }
  }
}

TEST_F(CudaDevice, RawAndDicomEqualTheHostPathBitForBit) {
  vptest::TempDir dir;
  const Bytes file = vptest::random_bytes(1000 + 2 * 300001, 5);
  const std::string path = dir.path() + "/v.dcm";
  vptest::write_file(path, file);
  ElementOp raw;
  raw.source = raw.dest = DType::i16;
  for (bool swap : {false, true}) {
    raw.swap = swap;
    const auto [h, d] = both(path, 1000, 2 * 300001, raw, {65536, 3, 2});
    EXPECT_EQ(h, d) << "raw swap " << swap;
  }
  ElementOp dicom;
  dicom.kind = voxpipe::cuda::ElementKind::dicom;
  dicom.source = DType::i16;
  dicom.unused_bits = 4;
  dicom.swap = true;
  for (DType dest : {DType::i16, DType::f32, DType::f64}) {
    dicom.dest = dest;
    dicom.modality = dest != DType::i16;
    dicom.scaling = dicom.modality ? voxpipe::cuda::Scaling::both : voxpipe::cuda::Scaling::none;
    dicom.slope = 2.5;
    dicom.inter = -1024;
    const auto [h, d] = both(path, 1000, 2 * 300001, dicom, {1 << 20, 8, 4});
    EXPECT_EQ(h, d) << "dicom to " << voxpipe::dtype_name(dest);
  }
}

TEST(CudaDeviceUnavailable, SinkRefusesWithTheStatusReason) {
  if (voxpipe::cuda_status().available) GTEST_SKIP() << "a GPU is available";
  const auto e = vptest::catch_error([] { voxpipe::cuda::PrimaryContext ctx(0); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), voxpipe::ErrorCode::unsupported);
  EXPECT_NE(std::string(e->what()).find(voxpipe::cuda_status().reason), std::string::npos) << e->what();
}

}  // namespace
