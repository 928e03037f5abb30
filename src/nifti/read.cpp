// The plan, source and convert stages for NIfTI voxel data: a selection becomes rows of
// elements in ascending file order; rows close together are read as one window (gaps up to
// kSkipThreshold bytes, nibabel's fileslice SKIP_THRESH) and converted straight into the
// destination. Long contiguous rows (whole images, whole volumes) are read in pieces, in
// parallel when the source allows it, directly into the destination when no conversion is needed.

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "core/convert.hpp"
#include "core/file.hpp"
#include "core/range_input.hpp"
#include "core/thread_pool.hpp"
#include "gz/gzip_source.hpp"
#include "gz/seek_index.hpp"
#include "nifti/internal.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"
#include "voxpipe/remote.hpp"
#include "voxpipe/threads.hpp"

namespace voxpipe {

namespace {

// nibabel's fileslice reads through gaps of up to 256 bytes rather than seeking over them.
constexpr std::uint64_t kSkipThreshold = 256;
// Source bytes converted per piece: a piece and its converted output stay within L2.
constexpr std::uint64_t kPiece = 512 * 1024;
// Direct reads (no conversion) go in larger pieces: fewer syscalls, still split across threads.
constexpr std::uint64_t kDirectPiece = 8 * 1024 * 1024;

struct Row {
  std::uint64_t src;  // byte offset of element 0 in the stream
  std::int64_t dst;   // byte offset of element 0 in the destination
  std::uint64_t n;    // elements
};

struct RowShape {
  std::uint64_t src_stride;  // bytes between elements of a row in the stream
  std::int64_t dst_stride;   // bytes between elements of a row in the destination
};


// Converts one row whose bytes arrive in pieces of any size, from several threads at once
// (ByteSource::read_range). Elements inside a piece are converted in one call; an element
// split between pieces is assembled in a small side table and converted when complete.
class RowConverter {
 public:
  RowConverter(const Row& row, RowShape shape, std::uint64_t in_size, const core::Conversion& conv,
               core::ConvertFn fn, std::byte* dest)
      : row_(row), shape_(shape), in_size_(in_size), conv_(conv), fn_(fn), dest_(dest) {}

  core::ByteSink sink() {
    return [this](std::uint64_t offset, std::span<const std::byte> data) { take(offset, data); };
  }

  // Throws Error(truncated) when the source ended before the row did.
  void check_complete(const std::string& path) const {
    if (converted_.load() != row_.n)
      throw Error(ErrorCode::truncated, path, "data",
                  "expected " + std::to_string(row_.n) + " elements, but the stream ended after " +
                      std::to_string(converted_.load()),
                  row_.src);
  }

 private:
  void take(std::uint64_t offset, std::span<const std::byte> data) {
    const std::uint64_t stride = shape_.src_stride;
    const std::uint64_t lo = std::max(offset, row_.src);
    const std::uint64_t row_end = row_.src + (row_.n - 1) * stride + in_size_;
    const std::uint64_t hi = std::min(offset + data.size(), row_end);
    if (lo >= hi) return;
    // Elements [first, last] overlap [lo, hi); element k starts at row_.src + k * stride.
    const std::uint64_t first = (lo - row_.src) / stride;
    const std::uint64_t last = std::min(row_.n - 1, (hi - 1 - row_.src) / stride);
    std::uint64_t k = first;
    if (start(k) < lo) {  // starts in an earlier piece
      if (start(k) + in_size_ > lo) partial(k, lo, hi, offset, data);
      ++k;
    }
    std::uint64_t whole_end = k;  // elements [k, whole_end) lie entirely in this piece
    while (whole_end <= last && start(whole_end) + in_size_ <= hi) ++whole_end;
    if (whole_end > k) {
      const std::uint64_t count = whole_end - k;
      fn_(conv_, data.data() + (start(k) - offset), static_cast<std::ptrdiff_t>(stride),
          dest_ + row_.dst + static_cast<std::int64_t>(k) * shape_.dst_stride, shape_.dst_stride,
          count);
      converted_ += count;
    }
    if (whole_end <= last && start(whole_end) < hi) partial(whole_end, lo, hi, offset, data);
  }

  std::uint64_t start(std::uint64_t k) const { return row_.src + k * shape_.src_stride; }

  void partial(std::uint64_t k, std::uint64_t lo, std::uint64_t hi, std::uint64_t offset,
               std::span<const std::byte> data) {
    const std::uint64_t a = std::max(lo, start(k)), b = std::min(hi, start(k) + in_size_);
    std::lock_guard lock(mutex_);
    Split& s = split_[k];
    std::memcpy(s.bytes + (a - start(k)), data.data() + (a - offset), b - a);
    s.filled += b - a;
    if (s.filled == in_size_) {
      fn_(conv_, s.bytes, static_cast<std::ptrdiff_t>(in_size_),
          dest_ + row_.dst + static_cast<std::int64_t>(k) * shape_.dst_stride, shape_.dst_stride, 1);
      converted_ += 1;
      split_.erase(k);
    }
  }

  struct Split {
    alignas(16) std::byte bytes[16];
    std::uint64_t filled = 0;
  };
  const Row row_;
  const RowShape shape_;
  const std::uint64_t in_size_;
  const core::Conversion& conv_;
  core::ConvertFn fn_;
  std::byte* dest_;
  std::atomic<std::uint64_t> converted_{0};
  std::mutex mutex_;
  std::map<std::uint64_t, Split> split_;
};

class Executor {
 public:
  Executor(core::ByteSource& source, const core::Conversion& conv, core::ConvertFn fn,
           RowShape shape, std::byte* dest, unsigned threads)
      : source_(source), conv_(conv), fn_(fn), shape_(shape), dest_(dest), threads_(threads),
        in_size_(dtype_size(conv.source)), out_size_(dtype_size(conv.dest)),
        gap_(source.random_access() ? kSkipThreshold : ~std::uint64_t{0} / 4),
        direct_(conv.raw && !conv.swap) {}

  void add(const Row& row) {
    if (shape_.src_stride > kSkipThreshold && row.n > 1) {
      // Elements far apart: each is its own row, as nibabel reads them.
      for (std::uint64_t i = 0; i < row.n; ++i)
        add_compact({row.src + i * shape_.src_stride,
                     row.dst + static_cast<std::int64_t>(i) * shape_.dst_stride, 1});
      return;
    }
    add_compact(row);
  }

  void finish() { flush(); }

 private:
  std::uint64_t span_of(std::uint64_t n) const { return (n - 1) * shape_.src_stride + in_size_; }

  void add_compact(const Row& row) {
    const std::uint64_t end = row.src + span_of(row.n);
    if (end - row.src > kPiece) {
      flush();
      big_row(row);
      return;
    }
    if (!pending_.empty() && (row.src - window_end_ > gap_ || end - window_start_ > kPiece)) flush();
    if (pending_.empty()) window_start_ = row.src;
    pending_.push_back(row);
    window_end_ = end;
  }

  void flush() {
    if (pending_.empty()) return;
    if (scratch_.size() < window_end_ - window_start_) scratch_.resize(window_end_ - window_start_);
    core::read_exact(source_, window_start_,
                     std::span(scratch_.data(), window_end_ - window_start_), "data");
    for (const Row& r : pending_)
      fn_(conv_, scratch_.data() + (r.src - window_start_), static_cast<std::ptrdiff_t>(shape_.src_stride),
          dest_ + r.dst, shape_.dst_stride, r.n);
    pending_.clear();
  }

  // A row longer than one piece: split it, in parallel when the source is random access.
  void big_row(const Row& row) {
    if (source_.prefers_read_range()) {
      // Decoding sources (gzip) deliver pieces, in parallel where they can: convert each piece
      // as it arrives.
      RowConverter convert(row, shape_, in_size_, conv_, fn_, dest_);
      source_.read_range(row.src, row.src + span_of(row.n), threads_, convert.sink());
      convert.check_complete(source_.path());
      return;
    }
    const bool contiguous = shape_.src_stride == in_size_;
    const bool direct = direct_ && contiguous && shape_.dst_stride == static_cast<std::int64_t>(out_size_);
    const std::uint64_t piece_bytes = direct ? kDirectPiece : kPiece;
    const std::uint64_t per_piece = std::max<std::uint64_t>(
        1, (piece_bytes - in_size_) / shape_.src_stride + 1);
    const std::uint64_t pieces = (row.n + per_piece - 1) / per_piece;
    auto piece_row = [&](std::uint64_t p) {
      std::uint64_t first = p * per_piece;
      return Row{row.src + first * shape_.src_stride,
                 row.dst + static_cast<std::int64_t>(first) * shape_.dst_stride,
                 std::min(per_piece, row.n - first)};
    };
    auto run_piece = [&](const Row& r, std::vector<std::byte>& scratch) {
      if (direct) {
        core::read_exact(source_, r.src, std::span(dest_ + r.dst, r.n * in_size_), "data");
        return;
      }
      const std::uint64_t bytes = span_of(r.n);
      if (scratch.size() < bytes) scratch.resize(bytes);
      core::read_exact(source_, r.src, std::span(scratch.data(), bytes), "data");
      fn_(conv_, scratch.data(), static_cast<std::ptrdiff_t>(shape_.src_stride), dest_ + r.dst,
          shape_.dst_stride, r.n);
    };
    const unsigned slots = source_.random_access()
                               ? static_cast<unsigned>(std::min<std::uint64_t>(threads_, pieces))
                               : 1;
    if (slots <= 1) {
      for (std::uint64_t p = 0; p < pieces; ++p) run_piece(piece_row(p), scratch_);
      return;
    }
    // Each slot takes every slots-th piece, with its own scratch buffer, so that the threads
    // first-touch interleaved parts of the destination.
    core::parallel_for(slots, slots, [&](std::size_t s) {
      std::vector<std::byte> scratch;
      for (std::uint64_t p = s; p < pieces; p += slots) run_piece(piece_row(p), scratch);
    });
  }

  core::ByteSource& source_;
  const core::Conversion& conv_;
  core::ConvertFn fn_;
  RowShape shape_;
  std::byte* dest_;
  unsigned threads_;
  std::uint64_t in_size_, out_size_;
  std::uint64_t gap_;
  bool direct_;
  std::vector<Row> pending_;
  std::uint64_t window_start_ = 0, window_end_ = 0;
  std::vector<std::byte> scratch_;
};

}  // namespace

core::Conversion nifti::make_conversion(const NiftiImage& image, const OutputSpec& spec) {
  return make_conversion(image.dtype, image.swapped(), image.scaling, spec);
}

core::Conversion nifti::make_conversion(DType source, bool swapped, const Scaling& scaling,
                                        const OutputSpec& spec) {
  core::Conversion c;
  c.source = source;
  c.dest = spec.type;
  c.swap = spec.file_byte_order ? false : swapped;
  c.scale = spec.apply_scaling && scaling.active();
  c.slope = scaling.slope;
  c.inter = scaling.inter;
  c.raw = spec.type == source && !c.scale && !spec.real_part;
  return c;
}

core::ConvertFn nifti::conversion_kernel(DType source, const OutputSpec& spec,
                                         const core::Conversion& conversion,
                                         const std::string& path) {
  core::ConvertFn fn = conversion_supported(source, spec) ? core::select_conversion(conversion) : nullptr;
  if (!fn)
    throw Error(ErrorCode::invalid_argument, path, "dtype",
                std::string("cannot convert ") + std::string(dtype_name(source)) + " to " +
                    std::string(dtype_name(spec.type)) + (conversion.scale ? " with scaling" : ""));
  return fn;
}

bool conversion_supported(DType source, const OutputSpec& spec) {
  if (spec.file_byte_order && (spec.type != source || spec.apply_scaling)) return false;
  if (dtype_is_rgb(source)) return spec.type == source;
  core::Conversion c;
  c.source = source;
  c.dest = spec.type;
  c.scale = spec.apply_scaling;
  c.slope = 2.0;  // any active scaling: the kernel table is what decides
  c.raw = spec.type == source && !spec.apply_scaling && !spec.real_part;
  if (dtype_is_complex(source) && !dtype_is_complex(spec.type) && !spec.real_part) return false;
  return core::select_conversion(c) != nullptr;
}

DType scaled_dtype(DType source, const Scaling& scaling, const std::string& path) {
  if (!scaling.active()) return source;
  if (dtype_is_rgb(source))
    throw Error(ErrorCode::unsupported, path, "scl_slope",
                "scaling cannot be applied to RGB data");
  return dtype_is_complex(source) ? DType::c128 : DType::f64;
}

std::shared_ptr<const core::InputFile> nifti::open_data_file(const NiftiImage& image) {
  auto file = std::make_shared<const core::InputFile>(image.data_path);
  // An image made by hand (no header identity) has nothing to compare with.
  if (image.header_identity) check_same_file(image.data_path, image.data_identity, file->identity());
  return file;
}

std::shared_ptr<const core::RandomAccessInput> nifti::open_data_input(const NiftiImage& image) {
  if (image.data_input) return image.data_input;
  return open_data_file(image);
}

void check_nifti_data_file(const NiftiImage& image, int fd) {
  if (image.data_input || !image.header_identity) return;
  check_same_file(image.data_path, image.data_identity, file_identity(fd, image.data_path));
}

std::unique_ptr<core::ByteSource> nifti::open_data_source(
    const NiftiImage& image, std::shared_ptr<const core::RandomAccessInput> input,
    const DataSourceOptions& options) {
  if (image.data_compression == Compression::gzip) {
    gz::GzipSourceOptions gz_options;
    gz_options.find_index = options.index == DataSourceOptions::Index::automatic;
    if (options.index == DataSourceOptions::Index::path) {
      if (options.index_path.empty())
        throw Error(ErrorCode::invalid_argument, image.data_path, "index", "no index path given");
      gz_options.index_path = options.index_path;
      if (options.index_input) gz_options.index_input = options.index_input->input();
    }
    return std::make_unique<gz::GzipSource>(std::move(input), gz_options);
  }
  return std::make_unique<core::InputByteSource>(std::move(input));
}

std::unique_ptr<core::ByteSource> nifti::open_data_source(const NiftiImage& image,
                                                          const DataSourceOptions& options) {
  return open_data_source(image, open_data_input(image), options);
}

NiftiReader::NiftiReader(const NiftiImage& image, const DataSourceOptions& options)
    : image_(image) {
  // The size of the bytes the source reads, as opened.
  std::shared_ptr<const core::RandomAccessInput> input;
  if (image_.data_input) {
    input = image_.data_input;
  } else {
    file_ = nifti::open_data_file(image_);
    input = file_;
  }
  data_file_size_ = input->size();
  source_ = nifti::open_data_source(image_, std::move(input), options);
  if (!source_->random_access()) sequential_mutex_ = std::make_unique<std::mutex>();
}

void NiftiReader::check_data_size() const { nifti::check_data_size(image_, data_file_size_); }

NiftiReader::~NiftiReader() = default;

bool NiftiReader::random_access() const noexcept { return source_->random_access(); }

void NiftiReader::read(std::span<const AxisRange> selection, const OutputSpec& spec,
                       std::span<std::byte> dest, const ReadOptions& options) {
  // The read's one thread count: read_selection and the sources below take it as given.
  ReadOptions resolved = options;
  resolved.threads = resolve_threads(options.threads);
  // The file may have changed since it was opened (the reader is kept between reads, or the
  // image was opened long before). One check, after the read, sees a change made before it and
  // one made while it ran; what was read is then not returned. The image's identity, not the
  // open file's, is the reference: a reader opened after a change has already refused it.
  const FileIdentity* const expected = file_ && image_.data_identity ? &*image_.data_identity : nullptr;
  try {
    if (sequential_mutex_) {
      std::lock_guard lock(*sequential_mutex_);
      nifti::read_selection(*source_, image_, selection, spec, dest, resolved);
    } else {
      nifti::read_selection(*source_, image_, selection, spec, dest, resolved);
    }
  } catch (const Error&) {
    // A file cut or rewritten before or during the read: said as such, rather than as damage.
    if (expected) file_->check_unchanged(*expected, true);
    throw;
  }
  if (expected) file_->check_unchanged(*expected, true);
}

namespace {
// The offsets a NIfTI index places points at, with the caller's: one point at the data start and
// one per volume (the product of the dimensions past the third); 3D images get the data start
// and the spacing points. Each point holds a 32 KiB window: beyond kMaxVolumePoints volumes the
// spacing alone places them.
std::vector<std::uint64_t> volume_starts(const NiftiImage& image, std::vector<std::uint64_t> wanted) {
  constexpr std::uint64_t kMaxVolumePoints = 1u << 16;
  std::uint64_t volume = dtype_size(image.dtype), volumes = 1;
  for (std::size_t k = 0; k < image.shape.size(); ++k)
    (k < 3 ? volume : volumes) *= static_cast<std::uint64_t>(image.shape[k]);
  wanted.push_back(image.data_offset);
  if (image.shape.size() > 3 && volume > 0 && volumes <= kMaxVolumePoints)
    for (std::uint64_t t = 1; t < volumes; ++t) wanted.push_back(image.data_offset + t * volume);
  return wanted;
}
}  // namespace

GzipIndexSummary build_nifti_gzip_index(const std::string& path, GzipIndexOptions options) {
  const NiftiImage image = open_nifti(path);
  if (image.data_compression != Compression::gzip)
    throw Error(ErrorCode::invalid_argument, image.data_path, "compression",
                "the data are not gzip-compressed: they need no index");
  if (image.data_input) {
    // An object named by URL: its index goes to the output named, or to the cache entry of the
    // version read and, unless to_cache, next to the object (URL + ".gzidx").
    if (!options.output.empty()) return build_nifti_gzip_index(image, options);
    const auto* object = dynamic_cast<const core::RangeInput*>(image.data_input.get());
    const UrlHandlers& handlers = url_handlers();
    if (!object || object->version().empty() || !handlers.index_cache_path || !handlers.put)
      throw Error(ErrorCode::invalid_argument, image.data_path, "index",
                  "expected an output path: the object has no version (ETag) to key a cache "
                  "entry by");
    options.output = handlers.index_cache_path(image.data_path, object->version());
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(options.output).parent_path(), ec);
    GzipIndexSummary summary = build_nifti_gzip_index(image, options);
    if (!options.to_cache) {
      handlers.put(options.output, image.data_path + ".gzidx");
      summary.index_path = image.data_path + ".gzidx";
    }
    return summary;
  }
  options.wanted = volume_starts(image, std::move(options.wanted));
  return build_gzip_index(image.data_path, options);
}

GzipIndexSummary build_nifti_gzip_index(const NiftiImage& image, GzipIndexOptions options) {
  if (!image.data_input)
    throw Error(ErrorCode::invalid_argument, image.data_path, "index",
                "expected an image whose data are not in a file (for files: the path overload)");
  if (image.data_compression != Compression::gzip)
    throw Error(ErrorCode::invalid_argument, image.data_path, "compression",
                "the data are not gzip-compressed: they need no index");
  if (options.output.empty())
    throw Error(ErrorCode::invalid_argument, image.data_path, "index",
                "expected an output path for the index of an object");
  options.wanted = volume_starts(image, std::move(options.wanted));
  const gz::SeekIndex index = gz::build_index(*image.data_input, options);
  gz::write_gzidx_file(options.output, index, gz::input_key(*image.data_input));
  return gz::index_summary(index, options.output);
}

void read_nifti_data(const NiftiImage& image, std::span<const AxisRange> selection,
                     const OutputSpec& spec, std::span<std::byte> dest,
                     const ReadOptions& options) {
  NiftiReader(image).read(selection, spec, dest, options);
}

std::vector<AxisRange> nifti::checked_selection(std::span<const AxisRange> selection,
                                                std::span<const std::int64_t> shape,
                                                const std::string& path) {
  const std::size_t ndim = shape.size();
  std::vector<AxisRange> sel(selection.begin(), selection.end());
  if (sel.empty())
    for (auto d : shape) sel.push_back({0, 1, d});
  if (sel.size() != ndim)
    throw Error(ErrorCode::invalid_argument, path, "selection",
                "expected " + std::to_string(ndim) + " axes, but received " +
                    std::to_string(sel.size()));
  for (std::size_t k = 0; k < ndim; ++k) {
    const AxisRange& a = sel[k];
    const std::int64_t dim = shape[k];
    if (a.count < 0 || a.step == 0)
      throw Error(ErrorCode::invalid_argument, path, "selection",
                  "axis " + std::to_string(k) + ": count must be >= 0 and step non-zero");
    if (a.count > 0) {
      // Both ends inside [0, dim), computed without overflow.
      const __int128 last = static_cast<__int128>(a.start) + static_cast<__int128>(a.count - 1) * a.step;
      if (a.start < 0 || a.start >= dim || last < 0 || last >= dim)
        throw Error(ErrorCode::invalid_argument, path, "selection",
                    "axis " + std::to_string(k) + ": indices outside 0.." +
                        std::to_string(dim - 1));
    }
  }
  return sel;
}

void nifti::read_selection(core::ByteSource& source, const NiftiImage& image,
                           std::span<const AxisRange> selection, const OutputSpec& spec,
                           std::span<std::byte> dest, const ReadOptions& options) {
  const std::size_t ndim = image.shape.size();
  const std::vector<AxisRange> sel = nifti::checked_selection(selection, image.shape, image.header_path);
  std::uint64_t n_out = 1;
  for (const AxisRange& a : sel) n_out *= static_cast<std::uint64_t>(a.count);
  core::Conversion conv = nifti::make_conversion(image, spec);
  core::ConvertFn fn = nifti::conversion_kernel(image.dtype, spec, conv, image.header_path);
  const std::size_t in_size = dtype_size(image.dtype), out_size = dtype_size(spec.type);
  if (dest.size() != n_out * out_size)
    throw Error(ErrorCode::invalid_argument, image.header_path, "destination",
                "expected " + std::to_string(n_out * out_size) + " bytes, but received " +
                    std::to_string(dest.size()));
  if (n_out == 0) return;

  // Normalise to positive steps; flipped axes are written backwards into the destination.
  std::vector<std::uint64_t> sstride(ndim), start(ndim), step(ndim), count(ndim);
  std::vector<std::int64_t> dstride(ndim);
  std::int64_t dst_base = 0;
  std::uint64_t s_acc = in_size;
  std::int64_t d_acc = static_cast<std::int64_t>(out_size);
  std::vector<bool> flip(ndim);
  for (std::size_t k = 0; k < ndim; ++k) {
    const AxisRange& a = sel[k];
    flip[k] = a.step < 0;
    count[k] = static_cast<std::uint64_t>(a.count);
    step[k] = static_cast<std::uint64_t>(flip[k] ? -a.step : a.step);
    start[k] = static_cast<std::uint64_t>(flip[k] ? a.start + (a.count - 1) * a.step : a.start);
    sstride[k] = s_acc;
    dstride[k] = flip[k] ? -d_acc : d_acc;
    if (flip[k]) dst_base += static_cast<std::int64_t>(count[k] - 1) * d_acc;
    s_acc *= static_cast<std::uint64_t>(image.shape[k]);
    d_acc *= static_cast<std::int64_t>(count[k]);
  }

  // Leading axes read contiguously merge into one row.
  std::size_t row_axes = 0;
  std::uint64_t run_len = 1, run_start = 0;
  RowShape shape{in_size, static_cast<std::int64_t>(out_size)};
  for (std::size_t k = 0; k < ndim; ++k) {
    if (step[k] != 1 || flip[k]) break;
    run_len *= count[k];
    run_start += start[k] * sstride[k];
    row_axes = k + 1;
    if (count[k] != static_cast<std::uint64_t>(image.shape[k])) break;
  }
  std::uint64_t row_n;
  std::uint64_t row_src0;
  std::int64_t row_dst0 = dst_base;
  if (row_axes > 0) {
    row_n = run_len;
    row_src0 = run_start;
  } else {
    row_axes = 1;
    row_n = count[0];
    row_src0 = start[0] * sstride[0];
    shape = {step[0] * in_size, dstride[0]};
  }

  // Odometer over the outer axes, in ascending file order.
  const std::uint64_t base = image.data_offset + row_src0;
  auto for_each_row = [&](auto&& visit) {
    std::vector<std::uint64_t> idx(ndim, 0);
    for (;;) {
      std::uint64_t src = base;
      std::int64_t dst = row_dst0;
      for (std::size_t k = row_axes; k < ndim; ++k) {
        src += (start[k] + idx[k] * step[k]) * sstride[k];
        dst += static_cast<std::int64_t>(idx[k]) * dstride[k];
      }
      visit(Row{src, dst, row_n});
      std::size_t k = row_axes;
      for (; k < ndim; ++k) {
        if (++idx[k] < count[k]) break;
        idx[k] = 0;
      }
      if (k == ndim) break;
    }
  };
  if (source.wants_prefetch()) {
    // Stored bytes that cost a request per read (an object store): announce every byte range
    // the rows cover first, so that they are fetched coalesced and concurrently.
    const std::uint64_t span = (row_n - 1) * shape.src_stride + in_size;
    std::vector<ByteRange> ranges;
    for_each_row([&](const Row& r) {
      if (!ranges.empty() && r.src <= ranges.back().offset + ranges.back().size)
        ranges.back().size = std::max(ranges.back().size, r.src + span - ranges.back().offset);
      else
        ranges.push_back({r.src, span});
    });
    source.prefetch(ranges);
  }
  Executor exec(source, conv, fn, shape, dest.data(), options.threads);
  for_each_row([&](const Row& r) { exec.add(r); });
  exec.finish();
}

}  // namespace voxpipe
