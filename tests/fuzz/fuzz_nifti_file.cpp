// A whole file through the public API: the input, and the input gzipped, are opened from memory
// (open_nifti_bytes, the same header and data paths as files, without a file system round trip)
// as x.nii and x.nii.gz; each is opened, size-checked and read in full (and through one reversed
// selection) into float64 and into its own dtype. Every failure must be a voxpipe::Error; .nii
// and .nii.gz of the same bytes must give the same image. An input that is itself gzip is
// inflated as its magic says, whatever its name.
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"

namespace {

// Outputs larger than this are skipped: the point is the parser and the planner, not memcpy.
constexpr std::uint64_t kMaxBytes = std::uint64_t{64} << 20;

std::vector<std::uint8_t> gzip(const std::uint8_t* data, std::size_t size) {
  z_stream z{};
  if (deflateInit2(&z, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) std::abort();
  std::vector<std::uint8_t> out(deflateBound(&z, size) + 32);
  z.next_in = const_cast<Bytef*>(data);
  z.avail_in = static_cast<uInt>(size);
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) std::abort();
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

struct Outcome {
  bool ok = false;
  voxpipe::ErrorCode code{};
  std::vector<std::int64_t> shape;
  std::vector<std::byte> data;  // the image in its own dtype, native order, unscaled
};

// `bytes` outlive the image (LLVMFuzzerTestOneInput's frame): no owner.
Outcome read_bytes(std::span<const std::uint8_t> bytes, const std::string& path) {
  Outcome o;
  try {
    const voxpipe::NiftiImage img = voxpipe::open_nifti_bytes(std::as_bytes(bytes), nullptr, path);
    o.shape = img.shape;
    voxpipe::check_data_size(img);
    const std::uint64_t out_bytes = img.voxel_count() * 8 * (voxpipe::dtype_is_complex(img.dtype) ? 2 : 1);
    if (img.data_bytes() > kMaxBytes || out_bytes > kMaxBytes) return o;
    // Unscaled, in the stored dtype.
    o.data.resize(img.data_bytes());
    voxpipe::read_nifti_data(img, {}, {.type = img.dtype, .apply_scaling = false}, o.data);
    // Scaled float64 (complex128), when nibabel could produce it.
    const voxpipe::DType scaled = voxpipe::scaled_dtype(img.dtype, img.scaling, path);
    if (!voxpipe::dtype_is_rgb(scaled)) {
      const voxpipe::DType out = voxpipe::dtype_is_complex(scaled) ? voxpipe::DType::c128 : voxpipe::DType::f64;
      std::vector<std::byte> f(img.voxel_count() * voxpipe::dtype_size(out));
      voxpipe::read_nifti_data(img, {}, {.type = out}, f);
      // The same voxels through a selection that reverses every axis.
      std::vector<voxpipe::AxisRange> sel;
      for (auto d : img.shape) sel.push_back({d - 1, -1, d});
      std::vector<std::byte> rev(f.size());
      voxpipe::read_nifti_data(img, sel, {.type = out}, rev);
      const std::size_t item = voxpipe::dtype_size(out), n = img.voxel_count();
      for (std::size_t i = 0; i < n; ++i)
        if (std::memcmp(&f[i * item], &rev[(n - 1 - i) * item], item) != 0) std::abort();
    }
    o.ok = true;
  } catch (const voxpipe::Error& e) {
    o.code = e.code();
  }
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<std::uint8_t> packed = gzip(data, size);
  const Outcome a = read_bytes(std::span(data, size), "x.nii");
  const Outcome b = read_bytes(packed, "x.nii.gz");
  // Same bytes, same image: when both read fully, the voxels agree.
  if (a.ok && b.ok && (a.shape != b.shape || a.data != b.data)) std::abort();
  return 0;
}
