// The public gzip functions (include/voxpipe/gzip.hpp) over the seek index module.
#include <algorithm>
#include <mutex>
#include <optional>

#include "core/file.hpp"
#include "gz/parallel_inflate.hpp"
#include "gz/seek_index.hpp"
#include "voxpipe/gzip.hpp"
#include "voxpipe/threads.hpp"

namespace voxpipe {

namespace {

// Reports the furthest byte read to GzipIndexOptions::progress: both builders read the file
// front to back (the parallel one a few chunks ahead), so this measures their progress without
// a hook inside either.
class ProgressInput final : public core::RandomAccessInput {
 public:
  ProgressInput(const core::RandomAccessInput& file,
                const std::function<void(std::uint64_t, std::uint64_t)>& report)
      : file_(file), report_(report) {}
  std::size_t read_at(std::uint64_t offset, std::span<std::byte> dst) const override {
    const std::size_t n = file_.read_at(offset, dst);
    std::lock_guard lock(mutex_);
    if (offset + n > furthest_) {
      furthest_ = offset + n;
      report_(furthest_, file_.size());
    }
    return n;
  }
  std::uint64_t size() const noexcept override { return file_.size(); }
  const std::string& path() const noexcept override { return file_.path(); }
  bool fetches() const noexcept override { return file_.fetches(); }
  void prefetch(std::span<const ByteRange> ranges) const override { file_.prefetch(ranges); }
  void read_ahead(std::span<const ByteRange> ranges) const override { file_.read_ahead(ranges); }

 private:
  const core::RandomAccessInput& file_;
  const std::function<void(std::uint64_t, std::uint64_t)>& report_;
  mutable std::mutex mutex_;
  mutable std::uint64_t furthest_ = 0;
};

}  // namespace

gz::SeekIndex gz::build_index(const core::RandomAccessInput& input, const GzipIndexOptions& options) {
  std::optional<ProgressInput> reporting;
  if (options.progress) reporting.emplace(input, options.progress);
  const core::RandomAccessInput& file =
      reporting ? static_cast<const core::RandomAccessInput&>(*reporting) : input;
  gz::SeekIndex index;
  if (options.exact) {
    std::vector<std::uint64_t> wanted = options.wanted;
    std::sort(wanted.begin(), wanted.end());
    gz::ExactBuildOptions exact;
    exact.threads = resolve_threads(options.threads);
    index = gz::build_seek_index(file, options.spacing, wanted, exact);
  } else {
    gz::ParallelInflateOptions parallel;
    parallel.threads = resolve_threads(options.threads);
    parallel.seek_points = &index.points;
    parallel.seek_spacing = options.spacing;
    index.uncompressed_size =
        gz::inflate_parallel(file, [](std::uint64_t, std::span<const std::byte>) {}, parallel);
    index.compressed_size = file.size();
    index.spacing = static_cast<std::uint32_t>(std::min<std::uint64_t>(options.spacing, UINT32_MAX));
  }
  return index;
}

GzipIndexSummary gz::index_summary(const SeekIndex& index, const std::string& index_path) {
  GzipIndexSummary summary;
  summary.index_path = index_path;
  summary.compressed_size = index.compressed_size;
  summary.uncompressed_size = index.uncompressed_size;
  summary.points = index.points.size();
  summary.index_bytes = core::file_size(index_path).value_or(0);
  return summary;
}

GzipIndexSummary build_gzip_index(const std::string& gz_path, const GzipIndexOptions& options) {
  const core::InputFile input(gz_path);
  const gz::SeekIndex index = gz::build_index(input, options);
  std::string index_path;
  if (options.output.empty()) {
    gz::save_index(gz_path, index, !options.to_cache);
    index_path = options.to_cache ? gz::cache_path(gz_path) : gz::sidecar_path(gz_path);
  } else {
    gz::write_gzidx_file(options.output, index, gz::index_key(gz_path));
    index_path = options.output;
  }
  return gz::index_summary(index, index_path);
}

}  // namespace voxpipe
