#include "cuda/load.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "core/checked.hpp"
#include "core/file.hpp"
#include "cuda/cufile.hpp"
#include "cuda/element_op.hpp"
#include "gz/gzip_source.hpp"
#include "dicom/modality.hpp"
#include "dicom/series_planes.hpp"
#include "nifti/internal.hpp"
#include "voxpipe/device.hpp"
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

// Where a random-access gzip source's spans (members, or the bytes between two seek points)
// start, inside (begin, end); empty for other sources.
std::vector<std::uint64_t> span_starts(const core::ByteSource& data, std::uint64_t begin,
                                       std::uint64_t end) {
  std::vector<std::uint64_t> starts;
  const auto* gz = dynamic_cast<const gz::GzipSource*>(&data);
  if (!gz) return starts;
  if (gz->members()) {
    for (const gz::Member& m : *gz->members())
      if (m.uncompressed_offset > begin && m.uncompressed_offset < end) starts.push_back(m.uncompressed_offset);
  } else if (gz->index()) {
    for (const gz::SeekPoint& p : gz->index()->points)
      if (p.uncompressed > begin && p.uncompressed < end) starts.push_back(p.uncompressed);
  }
  return starts;
}

}  // namespace

// A random-access source (sized
// members, a seek index) splits a range into tasks as large as the range allows, one per
// thread at a time, so a single read_range over the payload would deliver up to a task's worth
// of bytes ahead of the first missing one - about payload / 4 - and the staging overflow would
// grow with the file. Read instead in consecutive ranges of about the ring's size, cut where a
// span starts so that no span is inflated twice: the reordering distance, and with it the
// overflow, is then at most the ring's bytes plus one span. The speculative engine (plain gzip)
// always starts at the file's first byte, so it gets the payload in one call; its distance is
// bounded by the chunks it holds in flight (parallel_inflate.hpp).
PushSource nifti_push_source(const NiftiImage& image, core::ByteSource& data,
                             const StagingOptions& options) {
  const std::uint64_t payload = mul(image, voxel_count(image), dtype_size(image.dtype));
  PushSource source;
  source.name = image.data_path;
  source.base_offset = image.data_offset;
  source.size = payload;
  const std::uint64_t begin = image.data_offset, end = begin + payload;
  std::vector<std::uint64_t> cuts;  // range ends
  const std::vector<std::uint64_t> starts = span_starts(data, begin, end);
  if (!starts.empty()) {
    const std::uint64_t ring = std::max<std::uint64_t>(
        1, std::uint64_t{std::max(options.buffers, 1u)} * std::max<std::size_t>(options.chunk_bytes, 1));
    std::uint64_t from = begin;
    for (std::uint64_t s : starts)
      if (s - from >= ring) cuts.push_back(from = s);
  }
  cuts.push_back(end);
  const unsigned threads = options.decode_threads;
  source.produce = [&data, begin, cuts = std::move(cuts), threads](const core::ByteSink& deliver) {
    const core::ByteSink relay = [&](std::uint64_t at, std::span<const std::byte> bytes) {
      deliver(at - begin, bytes);
    };
    std::uint64_t from = begin;
    for (std::uint64_t to : cuts) {
      data.read_range(from, to, threads, relay);
      from = to;
    }
  };
  return source;
}

void stage_nifti_data(const NiftiImage& image, StagingSink& sink, const StagingOptions& options,
                      const DataSourceOptions& source_options) {
  const std::size_t element = dtype_size(image.dtype);
  const std::uint64_t payload = mul(image, voxel_count(image), element);
  if (image.data_compression == Compression::none) {
    const std::shared_ptr<const core::RandomAccessInput> input = nifti::open_data_input(image);
    stage(file_chunk_source(*input, image.data_offset, payload), element, sink, options);
    return;
  }
  // gzip: the CPU path's own source (member table, seek index or speculative parallel inflate).
  std::unique_ptr<core::ByteSource> data = nifti::open_data_source(image, source_options);
  if (data->prefers_read_range()) {
    stage(nifti_push_source(image, *data, options), element, sink, options);
    return;
  }
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

ChunkSource cufile_chunk_source(const CufileFile& file, std::uint64_t payload_offset,
                               std::uint64_t payload_bytes) {
  constexpr std::uint64_t align = DeviceConvertSink::kDirectAlign;
  ChunkSource s;
  s.name = file.path();
  s.base_offset = payload_offset;
  s.size = payload_bytes;
  s.concurrent = true;
  s.fill = [&file, payload_offset](std::uint64_t offset, std::span<std::byte> dst) {
    // The whole aligned blocks around the chunk, read to where they belong around it.
    const std::uint64_t at = payload_offset + offset, skew = at % align;
    const std::uint64_t window = (skew + dst.size() + align - 1) / align * align;
    const auto base = static_cast<drv::CUdeviceptr>(reinterpret_cast<std::uintptr_t>(dst.data()) - skew);
    const std::size_t got = file.read(base, static_cast<std::size_t>(window), at - skew);
    if (got < skew + dst.size())
      throw Error(ErrorCode::truncated, file.path(), "data",
                  "expected " + std::to_string(dst.size()) + " bytes, but the file ends " +
                      std::to_string(got > skew ? got - skew : 0) + " bytes in",
                  at);
  };
  return s;
}

namespace {

// Reads uncompressed data through cuFile when the policy says so (load.hpp); false when the
// staging path should read them instead (options.stats->cufile_reason says why).
bool load_through_cufile(const NiftiImage& image, const ElementOp& op, const PrimaryContext& ctx,
                         drv::CUdeviceptr dst, std::uint64_t dst_bytes, const StagingOptions& options) {
  const CufilePolicy policy = options.cufile_policy ? *options.cufile_policy : cufile_policy_from_env();
  const std::size_t element = dtype_size(image.dtype);
  const std::uint64_t payload = mul(image, voxel_count(image), element);
  const auto skip = [&](std::string why) {
    if (policy == CufilePolicy::on) throw Error(ErrorCode::unsupported, image.data_path, "cuFile", why);
    if (options.stats) options.stats->cufile_reason = std::move(why);
    return false;
  };
  if (policy == CufilePolicy::off) return skip("VOXPIPE_CUFILE=off");
  if (image.data_input) return skip("the data are not in a file");
  // The automatic policy opens cuFile's driver (once per process, not free) only for a payload
  // it could use it for, and only where the probe found the library.
  if (policy == CufilePolicy::automatic && payload < kCufileMinBytes)
    return skip(choose_cufile(policy, nullptr, payload, 0).reason);
  if (!options.cufile && !cuda_status().cufile_available) return skip(cuda_status().cufile_reason);
  const CufileDriver& driver = options.cufile ? *options.cufile : process_cufile(ctx);
  const double resident = policy == CufilePolicy::automatic && driver.usable && driver.gds
                              ? page_cache_fraction(image.data_path, image.data_offset, payload)
                              : 0;
  const CufileChoice choice = choose_cufile(policy, &driver, payload, resident);
  if (!choice.use) return skip(choice.reason);
  std::optional<CufileFile> file;
  try {
    file.emplace(driver, image.data_path);
  } catch (const Error& e) {
    if (policy == CufilePolicy::on || e.code() == ErrorCode::not_found) throw;
    return skip(e.what());
  }
  DeviceConvertSink sink(ctx, op, dst, dst_bytes);
  sink.use_device_buffers(static_cast<std::size_t>(image.data_offset % DeviceConvertSink::kDirectAlign));
  stage(cufile_chunk_source(*file, image.data_offset, payload), element, sink, options);
  if (options.stats) {
    options.stats->route = "cufile";
    options.stats->cufile_reason = choice.reason;
  }
  return true;
}

}  // namespace

void load_nifti_to_device(const NiftiImage& image, const OutputSpec& spec,
                          const PrimaryContext& ctx, drv::CUdeviceptr dst,
                          std::uint64_t dst_bytes, const StagingOptions& options,
                          const DataSourceOptions& source) {
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
  if (image.data_compression == Compression::none && load_through_cufile(image, op, ctx, dst, dst_bytes, options))
    return;
  DeviceConvertSink sink(ctx, op, dst, dst_bytes);
  stage_nifti_data(image, sink, options, source);
  if (options.stats) options.stats->route = image.data_compression == Compression::none ? "pread" : "gzip";
}

namespace {

// The device conversion of image `im` into `out_type`, as read_dicom_series converts it, or
// nullopt where it is not element-wise on the file's bytes (then the CPU decodes the series).
std::optional<ElementOp> dicom_image_op(const DicomSlice& im, DType out_type) {
  const DicomPixelInfo& info = *im.pixel;
  // Images scanned from memory (objects) are not in files the device path reads: decoded on
  // the host and pushed, as compressed ones are.
  if (im.buffer || im.tile_grid != 0 || info.codec != DicomCodec::native || !im.file->pixel_data ||
      im.file->pixel_data->encapsulated || im.file->transfer_syntax.deflated)
    return std::nullopt;
  DicomDecodeOptions options;
  dicom::Modality transform;
  if (out_type != info.dtype) {  // read_dicom_series: the rescale, always, to f32/f64
    options.modality = out_type;
    transform.kind = dicom::Modality::Kind::rescale;
    transform.slope = im.slope;
    transform.intercept = im.intercept;
  }
  try {
    return dicom_element_op(info, im.file->transfer_syntax.big_endian, options, transform);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::unsupported) return std::nullopt;
    throw;
  }
}

bool same_op(const ElementOp& a, const ElementOp& b) {
  return a.source == b.source && a.dest == b.dest && a.kind == b.kind && a.swap == b.swap &&
         a.scaling == b.scaling && a.unused_bits == b.unused_bits && a.modality == b.modality &&
         a.slope == b.slope && a.inter == b.inter;
}

}  // namespace

PushSource dicom_push_source(const DicomSeries& series, DType out_type, unsigned threads) {
  PushSource source;
  source.name = dicom::check_series_read(series, out_type);
  source.size = std::uint64_t(series.rows) * series.columns * dtype_size(out_type) * series.images.size();
  source.produce = [&series, out_type, threads](const core::ByteSink& deliver) {
    dicom::decode_dicom_series(series, out_type, threads, deliver);
  };
  return source;
}

void load_dicom_series_to_device(const DicomSeries& series, DType out_type,
                                 const PrimaryContext& ctx, drv::CUdeviceptr dst,
                                 std::uint64_t dst_bytes, unsigned threads,
                                 const StagingOptions& options) {
  std::vector<ElementOp> ops;
  bool device_path = series.problem.empty() && !series.images.empty();
  for (const DicomSlice& im : series.images) {
    if (!device_path) break;
    const std::optional<ElementOp> op = dicom_image_op(im, out_type);
    if (op) ops.push_back(*op);
    else device_path = false;
  }
  if (device_path) {
    // read_dicom_series's argument checks, before anything is read.
    if (out_type != series.stored_dtype && out_type != DType::f32 && out_type != DType::f64)
      device_path = false;  // the CPU path raises its error
    const std::uint64_t plane = std::uint64_t(series.rows) * series.columns;
    for (const DicomSlice& im : series.images)
      if (std::uint64_t(im.pixel->rows) * im.pixel->columns != plane || im.pixel->samples_per_pixel != 1)
        device_path = false;
    if (dst_bytes != plane * dtype_size(out_type) * series.images.size()) device_path = false;
  }
  if (!device_path) {
    // Decoded on the host (compressed, mosaic, colour), the planes pushed into the pinned ring
    // as the decoding threads finish them: the copies overlap the decoding, and the host holds
    // the ring, not the volume.
    const PushSource source = dicom_push_source(series, out_type, threads);  // checks the series
    if (dst_bytes != source.size)
      throw Error(ErrorCode::invalid_argument, source.name, "destination",
                  "expected " + std::to_string(source.size) + " bytes, but received " +
                      std::to_string(dst_bytes));
    ElementOp op;  // the host's final bytes: copied straight to their place
    DeviceConvertSink sink(ctx, op, dst, dst_bytes);
    stage(source, 1, sink, options);
    if (options.stats) options.stats->route = "dicom decoded on the host";
    return;
  }
  const std::uint64_t plane = std::uint64_t(series.rows) * series.columns;
  const std::uint64_t out_plane = plane * dtype_size(out_type);
  // Runs of consecutive images with one conversion: one pipeline each, whose payload is the
  // images' pixel bytes one after another (a chunk may span two files).
  for (std::size_t first = 0; first < series.images.size();) {
    std::size_t last = first + 1;
    while (last < series.images.size() && same_op(ops[last], ops[first])) ++last;
    const std::size_t element = dtype_size(ops[first].source);
    const std::uint64_t in_plane = plane * element;
    std::vector<std::unique_ptr<core::InputFile>> files;
    std::vector<std::uint64_t> offsets;
    for (std::size_t n = first; n < last; ++n) {
      const DicomSlice& im = series.images[n];
      const DicomPixelData& px = *im.file->pixel_data;
      if (im.frame >= im.pixel->number_of_frames || (im.frame + 1) * in_plane > px.length)
        throw Error(ErrorCode::truncated, im.file->path, "PixelData",
                    "frame " + std::to_string(im.frame) + " is not inside the pixel data");
      files.push_back(std::make_unique<core::InputFile>(im.file->path));
      offsets.push_back(px.offset + im.frame * in_plane);
    }
    ChunkSource source;
    source.name = series.images[first].file->path;
    source.base_offset = offsets.front();
    source.size = in_plane * (last - first);
    source.fill = [&files, &offsets, in_plane](std::uint64_t offset, std::span<std::byte> out) {
      while (!out.empty()) {
        const std::size_t k = static_cast<std::size_t>(offset / in_plane);
        const std::uint64_t within = offset % in_plane;
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(out.size(), in_plane - within));
        const std::size_t got = files[k]->read_at(offsets[k] + within, out.first(n));
        if (got != n)
          throw Error(ErrorCode::truncated, files[k]->path(), "PixelData",
                      "the file ends inside its pixel data", offsets[k] + within + got);
        out = out.subspan(n);
        offset += n;
      }
    };
    DeviceConvertSink sink(ctx, ops[first], dst + first * out_plane, out_plane * (last - first));
    stage(source, element, sink, options);
    first = last;
  }
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
