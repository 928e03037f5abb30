#include "cuda/load.hpp"

#include <cstring>
#include <memory>

#include "core/checked.hpp"
#include "core/file.hpp"
#include "cuda/element_op.hpp"
#include "nifti/internal.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::cuda {

namespace {

std::uint64_t mul(const NiftiImage& image, std::uint64_t a, std::uint64_t b) {
  const auto r = core::checked_mul(a, b);
  if (!r) throw Error(ErrorCode::limit, image.header_path, "dim", "the data size overflows 64 bits");
  return *r;
}

std::uint64_t voxel_count(const NiftiImage& image) {
  std::uint64_t n = 1;
  for (auto d : image.shape) n = mul(image, n, static_cast<std::uint64_t>(d));
  return n;
}

}  // namespace

void load_nifti_to_device(const NiftiImage& image, const OutputSpec& spec,
                          const PrimaryContext& ctx, drv::CUdeviceptr dst,
                          std::uint64_t dst_bytes, const StagingOptions& options) {
  if (spec.file_byte_order || !conversion_supported(image.dtype, spec))
    throw Error(ErrorCode::invalid_argument, image.header_path, "dtype",
                std::string("cannot convert ") + std::string(dtype_name(image.dtype)) + " to " +
                    std::string(dtype_name(spec.type)) + " on the device");
  const ElementOp op = nifti_element_op(nifti::make_conversion(image, spec));
  const std::uint64_t n = voxel_count(image);
  const std::uint64_t want = mul(image, n, dtype_size(spec.type));
  if (dst_bytes != want)
    throw Error(ErrorCode::invalid_argument, image.header_path, "destination",
                "expected " + std::to_string(want) + " bytes, but received " +
                    std::to_string(dst_bytes));
  if (n == 0) return;
  const std::size_t element = dtype_size(image.dtype);
  const std::uint64_t payload = mul(image, n, element);
  DeviceConvertSink sink(ctx, op, dst, dst_bytes);
  if (image.data_compression == Compression::none) {
    core::InputFile file(image.data_path);
    stage(file_chunk_source(file, image.data_offset, payload), element, sink, options);
    return;
  }
  // gzip: the CPU path's own source (member table, seek index or sequential inflate).
  std::unique_ptr<core::ByteSource> data = nifti::open_data_source(image);
  ChunkSource source;
  source.name = image.data_path;
  source.base_offset = image.data_offset;
  source.size = payload;
  source.concurrent = data->random_access();
  source.fill = [&data, &image](std::uint64_t offset, std::span<std::byte> out) {
    core::read_exact(*data, image.data_offset + offset, out, "voxel data");
  };
  stage(source, element, sink, options);
}

void copy_to_device(std::span<const std::byte> src, const PrimaryContext& ctx,
                    drv::CUdeviceptr dst, const StagingOptions& options) {
  if (src.empty()) return;
  ChunkSource source;
  source.name = "<host array>";
  source.size = src.size();
  source.fill = [src](std::uint64_t offset, std::span<std::byte> out) {
    std::memcpy(out.data(), src.data() + offset, out.size());
  };
  ElementOp op;  // raw u8, native order: copied straight to its place
  DeviceConvertSink sink(ctx, op, dst, src.size());
  stage(source, 1, sink, options);
}

void copy_to_host(const PrimaryContext& ctx, drv::CUdeviceptr src, std::span<std::byte> dst) {
  if (dst.empty()) return;
  ScopedContext scope(ctx);
  check(ctx.api(), ctx.api().memcpy_dtoh(dst.data(), src, dst.size()), "cuMemcpyDtoH_v2");
}

}  // namespace voxpipe::cuda
