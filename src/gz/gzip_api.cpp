// The public gzip functions (include/voxpipe/gzip.hpp) over the seek index module.
#include <algorithm>
#include <optional>
#include <vector>

#include "core/file.hpp"
#include "gz/parallel_inflate.hpp"
#include "gz/seek_index.hpp"
#include "gz/seek_index_detail.hpp"
#include "voxpipe/gzip.hpp"
#include "voxpipe/threads.hpp"

namespace voxpipe {

gz::SeekIndex gz::build_index(const core::RandomAccessInput& input, const GzipIndexOptions& options) {
  gz::SeekIndex index;
  // An object read by ranges: the build passes over all of it front to back (the threads of a
  // parallel pass a few chunks apart), so it is read ahead whole, in large requests several at
  // once within a bounded window (core/range_input.hpp), as a whole-object read is; the decoders
  // read what has arrived while the next parts are fetched. Without it each decoding thread
  // would fetch its own bytes as it missed them, one request after another.
  if (input.fetches()) {
    const ByteRange whole{0, input.size()};
    input.read_ahead(std::span(&whole, 1));
  }
  if (options.exact) {
    std::vector<std::uint64_t> wanted = options.wanted;
    std::sort(wanted.begin(), wanted.end());
    gz::ExactBuildOptions exact;
    exact.threads = resolve_threads(options.threads);
    // The exact build reports itself: its parallel form reads the file twice (the span starts,
    // then the spans), so the furthest byte read reaches the end long before the index does.
    exact.progress = options.progress;
    index = gz::build_seek_index(input, options.spacing, wanted, exact);
  } else {
    // The fast build is one parallel inflate: the furthest byte read is its progress.
    std::optional<gz::index_detail::ReadProgressInput> reporting;
    if (options.progress)
      reporting.emplace(input, [&](std::uint64_t furthest) {
        options.progress(furthest, input.size());
      });
    const core::RandomAccessInput& file =
        reporting ? static_cast<const core::RandomAccessInput&>(*reporting) : input;
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
