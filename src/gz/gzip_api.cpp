// The public gzip functions (include/voxpipe/gzip.hpp) over the seek index module.
#include <algorithm>

#include "core/file.hpp"
#include "gz/parallel_inflate.hpp"
#include "gz/seek_index.hpp"
#include "voxpipe/gzip.hpp"
#include "voxpipe/threads.hpp"

namespace voxpipe {

GzipIndexSummary build_gzip_index(const std::string& gz_path, const GzipIndexOptions& options) {
  const core::InputFile file(gz_path);
  gz::SeekIndex index;
  if (options.exact) {
    std::vector<std::uint64_t> wanted = options.wanted;
    std::sort(wanted.begin(), wanted.end());
    index = gz::build_seek_index(file, options.spacing, wanted);
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
  GzipIndexSummary summary;
  if (options.output.empty()) {
    gz::save_index(gz_path, index, !options.to_cache);
    summary.index_path = options.to_cache ? gz::cache_path(gz_path) : gz::sidecar_path(gz_path);
  } else {
    gz::write_gzidx_file(options.output, index, gz::index_key(gz_path));
    summary.index_path = options.output;
  }
  summary.compressed_size = index.compressed_size;
  summary.uncompressed_size = index.uncompressed_size;
  summary.points = index.points.size();
  summary.index_bytes = core::file_size(summary.index_path).value_or(0);
  return summary;
}

}  // namespace voxpipe
