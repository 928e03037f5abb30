// Decoding ranges from a seek index (the zran.c method: madler/zlib examples/zran.c, and
// indexed_gzip's zran.c, with ISA-L), and where index files live. The index is built in
// seek_index_build.cpp.
#include "gz/seek_index.hpp"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "core/thread_pool.hpp"
#include "gz/known_window.hpp"
#include "gz/seek_index_detail.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::gz {
namespace {

using index_detail::at_member_start;
using index_detail::decode_from;
using index_detail::kOutputChunk;

constexpr std::size_t kTailBytes = std::size_t{64} << 10;

// The output of a run from a seek point: what comes before `from` is dropped, [from, stop) goes
// to the sink, and the run ends once it has passed `stop`, or at the end of the member that ends
// at `stop` (after its trailer). The CRC32 of everything the run inflated below `stop`, from
// the point on, is kept per member (segments), so that inflate_range can chain the runs of one
// member and check it against its trailer (MemberChecker).
class RangeOutput final : public inflate_detail::RunOutput {
 public:
  RangeOutput(std::uint64_t pos, std::uint64_t from, std::uint64_t stop, const Sink& sink)
      : buf_(new std::uint8_t[kOutputChunk]), pos_(pos), from_(from), stop_(stop), sink_(sink) {}

  // Past `stop`, a little room only: enough to see whether the member ends there.
  std::span<std::uint8_t> space() override {
    return {buf_.get(), pos_ >= stop_ ? kPeek : kOutputChunk};
  }
  void commit(std::size_t n) override {
    const std::uint8_t* p = buf_.get();
    if (pos_ < stop_) {
      const auto counted = static_cast<std::size_t>(std::min<std::uint64_t>(n, stop_ - pos_));
      crc_ = inflate_detail::crc32_update(crc_, p, counted);
      length_ += counted;
    }
    const std::uint64_t a = std::max(pos_, from_), b = std::min(pos_ + n, stop_);
    if (a < b)
      sink_(a, std::as_bytes(std::span(p + (a - pos_), static_cast<std::size_t>(b - a))));
    pos_ += n;
  }
  void member_end(std::uint32_t crc, std::uint32_t isize, std::uint64_t trailer_byte) override {
    segments_.push_back({crc_, length_, true, crc, isize, trailer_byte});
    crc_ = 0;
    length_ = 0;
  }
  void member_start(std::uint64_t) override {}
  // Past `stop`: the stream goes on (a member that begins at `stop` is followed until it gives a
  // byte, so that an empty one is checked too).
  bool done() const override { return pos_ > stop_; }
  std::uint64_t position() const { return pos_; }
  // The run's segments, the last one unfinished unless a member ended at `stop`.
  std::vector<inflate_detail::Segment> finish() {
    if (length_) segments_.push_back({crc_, length_, false, 0, 0, 0});
    length_ = 0;
    return std::move(segments_);
  }

 private:
  static constexpr std::size_t kPeek = 4096;
  std::unique_ptr<std::uint8_t[]> buf_;
  std::uint64_t pos_, from_, stop_;
  const Sink& sink_;
  std::uint32_t crc_ = 0;
  std::uint64_t length_ = 0;
  std::vector<inflate_detail::Segment> segments_;
};

// How far before `begin` a read may start at a member's first point instead of a later point,
// so that a range that runs to the member's end (a whole image after its header) is checked
// against the trailer: at most 1 MiB (a NIfTI header and extensions are far smaller) and an
// eighth of the range (a small read near the start does not inflate what it skips).
bool worth_checking(std::uint64_t lead, std::uint64_t range) {
  return lead <= (std::uint64_t{1} << 20) && lead <= range / 8;
}

}  // namespace

std::vector<inflate_detail::Segment> index_detail::decode_from(
    const core::RandomAccessInput& file, const SeekIndex& index, const SeekPoint& p,
    std::uint64_t from, std::uint64_t stop, const Sink& sink) {
  std::vector<std::uint8_t> scratch;
  const std::span<const std::uint8_t> window = index.window_of(p, scratch);
  RangeOutput out(p.uncompressed, from, stop, sink);
  const inflate_detail::TargetFn no_targets = [](std::size_t) {
    return std::optional<BlockCandidate>{};
  };
  inflate_detail::run_known_window(file, p.compressed_bit, window, 0, 0, no_targets, out);
  if (out.position() < stop)
    throw Error(ErrorCode::truncated, file.path(), "gzip stream",
                "expected more data (the index promises " +
                    std::to_string(stop - out.position()) + " more bytes), but the file ends",
                file.size());
  return out.finish();
}

std::size_t start_point(const SeekIndex& index, std::uint64_t begin, std::uint64_t end,
                        const std::string& path) {
  const auto& pts = index.points;
  const auto by_u = [](std::uint64_t u, const SeekPoint& p) { return u < p.uncompressed; };
  // The last point at or before begin.
  std::size_t first =
      static_cast<std::size_t>(std::upper_bound(pts.begin(), pts.end(), begin, by_u) - pts.begin());
  if (first == 0)
    throw Error(ErrorCode::invalid_argument, path, "seek index",
                "expected a point at uncompressed offset 0, but the index has none");
  // Start at the member's first point rather than a point shortly before `begin`, when there
  // is one close enough: the read can then be checked if it runs to the member's end.
  for (std::size_t k = first - 1; k > 0 && !at_member_start(pts[k]); --k) {
    if (!worth_checking(begin - pts[k - 1].uncompressed, end - begin)) break;
    if (at_member_start(pts[k - 1])) first = k;
  }
  return first - 1;
}

void inflate_range(const core::RandomAccessInput& file, const SeekIndex& index, std::uint64_t begin,
                   std::uint64_t end, unsigned threads, const Sink& sink) {
  RangeChain chain;
  inflate_range(file, index, begin, end, threads, sink, chain);
}

void inflate_range(const core::RandomAccessInput& file, const SeekIndex& index, std::uint64_t begin,
                   std::uint64_t end, unsigned threads, const Sink& sink, RangeChain& chain) {
  const std::string& path = file.path();
  if (index.compressed_size != file.size())
    throw Error(ErrorCode::invalid_argument, path, "seek index",
                "expected an index for a file of " + std::to_string(file.size()) +
                    " bytes, but it is for one of " + std::to_string(index.compressed_size));
  if (begin > end || end > index.uncompressed_size)
    throw Error(ErrorCode::invalid_argument, path, "range",
                "expected 0 <= begin <= end <= " + std::to_string(index.uncompressed_size) +
                    ", but found [" + std::to_string(begin) + ", " + std::to_string(end) + ")");
  if (begin == end) return;
  const std::uint64_t chain_end = chain.end;
  chain.end = UINT64_MAX;  // until this range is through
  const auto& pts = index.points;
  const auto by_u = [](std::uint64_t u, const SeekPoint& p) { return u < p.uncompressed; };
  // The point decoding starts at, and the first point at or after end.
  std::size_t first = start_point(index, begin, end, path) + 1;
  const std::size_t last =
      static_cast<std::size_t>(std::upper_bound(pts.begin(), pts.end(), end - 1, by_u) - pts.begin());
  // Points [first - 1, last) start the spans that cover the range.
  struct Task {
    std::size_t point;
    std::uint64_t from, stop;
  };
  std::vector<Task> tasks;
  const std::size_t nspans = last - first + 1;
  if (threads <= 1 || nspans == 1) {
    tasks.push_back({first - 1, begin, end});
  } else {
    // Group consecutive spans into a few tasks of similar output size: each task then decodes
    // through the points inside it without restarting, and the pool stays busy.
    const std::uint64_t ntasks = std::min<std::uint64_t>(nspans, std::uint64_t{threads} * 4);
    const std::uint64_t target = (end - begin + ntasks - 1) / ntasks;
    std::size_t start = first - 1;
    for (std::size_t k = first; k <= last; ++k) {
      const std::uint64_t from = std::max(begin, pts[start].uncompressed);
      const std::uint64_t stop = k == last ? end : pts[k].uncompressed;
      // Points before `begin` (a start moved back to the member's first point) stay inside the
      // first task, which decodes through them. A last span of less than a quarter of a task
      // (the few blocks between a volume's last point and its end) goes to the task before it:
      // a task of its own would first need its point's window, a request of its own when the
      // index is read by ranges (bench_remote: one volume then took 6 requests, not 5).
      if (k == last && !tasks.empty() && stop - from < target / 4) {
        tasks.back().stop = stop;
      } else if (k == last || (stop > from && stop - from >= target)) {
        tasks.push_back({start, from, stop});
        start = k;
      }
    }
  }
  std::vector<std::vector<inflate_detail::Segment>> segments(tasks.size());
  core::parallel_for(tasks.size(), threads, [&](std::size_t i) {
    segments[i] = decode_from(file, index, pts[tasks[i].point], tasks[i].from, tasks[i].stop, sink);
  });
  // The tasks' runs are contiguous in the stream: chained, they check every member that the
  // read covers from its first byte to its trailer, continuing the last range's chain when this
  // one starts where it ended.
  if (!chain.checker || chain_end != pts[tasks.front().point].uncompressed)
    chain.checker.emplace(path, false);
  for (std::size_t i = 0; i < tasks.size(); ++i)
    chain.checker->add(segments[i], at_member_start(pts[tasks[i].point]));
  chain.end = end;
}

IndexKey index_key(const std::string& gz_path) {
  struct stat st {};
  if (::stat(gz_path.c_str(), &st) != 0) {
    const int err = errno;
    throw Error(err == ENOENT ? ErrorCode::not_found : ErrorCode::io, gz_path, "",
                std::string("cannot stat: ") + std::strerror(err));
  }
  core::InputFile file(gz_path);
  IndexKey key;
  key.size = file.size();
  key.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kTailBytes, key.size));
  std::vector<std::uint8_t> tail(n);
  if (file.read_at(key.size - n, std::as_writable_bytes(std::span(tail))) != n)
    throw Error(ErrorCode::io, gz_path, "", "the file shrank while being read");
  key.tail_crc = static_cast<std::uint32_t>(crc32(crc32(0L, Z_NULL, 0), tail.data(),
                                                  static_cast<uInt>(n)));
  return key;
}

IndexKey input_key(const core::RandomAccessInput& input) {
  IndexKey key;
  key.size = input.size();
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kTailBytes, key.size));
  std::vector<std::uint8_t> tail(n);
  if (input.read_at(key.size - n, std::as_writable_bytes(std::span(tail))) != n)
    throw Error(ErrorCode::io, input.path(), "", "the object ended before its size");
  key.tail_crc = static_cast<std::uint32_t>(crc32(crc32(0L, Z_NULL, 0), tail.data(),
                                                  static_cast<uInt>(n)));
  return key;
}

std::string sidecar_path(const std::string& gz_path) { return gz_path + ".gzidx"; }

std::string cache_path(const std::string& gz_path) {
  namespace fs = std::filesystem;
  std::string dir;
  if (const char* v = std::getenv("VOXPIPE_CACHE_DIR"); v && *v) {
    dir = v;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    dir = std::string(x) + "/voxpipe";
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    dir = std::string(h) + "/.cache/voxpipe";
  } else {
    throw Error(ErrorCode::invalid_argument, gz_path, "index cache",
                "expected VOXPIPE_CACHE_DIR, XDG_CACHE_HOME or HOME to be set, but none is");
  }
  // The same file reached through a symlink or "..": the same cache entry.
  std::error_code ec;
  fs::path abs = fs::weakly_canonical(fs::absolute(gz_path, ec), ec);
  if (ec) abs = fs::absolute(gz_path, ec).lexically_normal();
  const std::string key = abs.string();
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a, 64-bit
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return dir + "/" + abs.filename().string() + "-" + hex + ".gzidx";
}

std::optional<SeekIndex> find_index(const std::string& gz_path) {
  const IndexKey key = index_key(gz_path);
  std::vector<std::string> candidates{sidecar_path(gz_path)};
  try {
    candidates.push_back(cache_path(gz_path));
  } catch (const Error&) {
    // No cache directory configured: only the sidecar.
  }
  for (const std::string& p : candidates) {
    if (!core::file_size(p)) continue;
    try {
      std::optional<IndexKey> found;
      SeekIndex index = read_gzidx_file(p, &found);
      if (found && *found == key && index.compressed_size == key.size) return index;
    } catch (const Error&) {
      // Damaged or unreadable: as if absent; the caller rebuilds and overwrites it.
    }
  }
  return std::nullopt;
}

SeekIndex load_index(const std::string& gz_path, const std::string& index_path) {
  const IndexKey key = index_key(gz_path);
  std::optional<IndexKey> found;
  SeekIndex index = read_gzidx_file(index_path, &found);
  if (found ? *found != key : index.compressed_size != key.size)
    throw Error(ErrorCode::invalid_argument, index_path, "seek index",
                "stale index: " +
                    std::string(found ? "it was written for a different version of "
                                      : "its compressed size does not match ") +
                    gz_path);
  if (index.compressed_size != key.size)
    throw Error(ErrorCode::format, index_path, "compressed size",
                "expected " + std::to_string(key.size) + ", but found " +
                    std::to_string(index.compressed_size));
  return index;
}

namespace {

// An index found for an object: a trailer's size and tail CRC must be input_key's (its mtime
// is not compared: the object's own cannot be); without one, the compressed size must equal
// the input's size.
void check_object_index(const core::RandomAccessInput& input, const SeekIndex& index,
                        const std::optional<IndexKey>& found, const std::string& index_name) {
  const IndexKey key = input_key(input);
  const bool stale = found ? (found->size != key.size || found->tail_crc != key.tail_crc)
                           : index.compressed_size != key.size;
  if (stale || index.compressed_size != key.size)
    throw Error(ErrorCode::invalid_argument, index_name, "seek index",
                "stale index: " +
                    std::string(found ? "it was written for a different version of "
                                      : "its compressed size does not match ") +
                    input.path());
}

}  // namespace

SeekIndex load_index(const core::RandomAccessInput& input, const std::string& index_path) {
  std::optional<IndexKey> found;
  SeekIndex index = read_gzidx_file(index_path, &found);
  check_object_index(input, index, found, index_path);
  return index;
}

SeekIndex load_index(const core::RandomAccessInput& input,
                     std::shared_ptr<const core::RandomAccessInput> index_input) {
  // The object's tail (its key) and the index's table of contents are fetched together.
  const std::uint64_t tail = std::min<std::uint64_t>(kTailBytes, input.size());
  const ByteRange tail_range{input.size() - tail, tail};
  input.read_ahead(std::span(&tail_range, 1));
  std::optional<IndexKey> found;
  const std::string name = index_input->path();
  SeekIndex index = read_gzidx_toc(std::move(index_input), &found);
  if (!found)
    throw Error(ErrorCode::invalid_argument, name, "seek index",
                "expected an index with a trailer (its key), but it has none");
  check_object_index(input, index, found, name);
  return index;
}

void save_index(const std::string& gz_path, const SeekIndex& index, bool sidecar) {
  const IndexKey key = index_key(gz_path);
  if (index.compressed_size != key.size)
    throw Error(ErrorCode::invalid_argument, gz_path, "seek index",
                "expected an index for a file of " + std::to_string(key.size) +
                    " bytes, but it is for one of " + std::to_string(index.compressed_size));
  const std::string out = sidecar ? sidecar_path(gz_path) : cache_path(gz_path);
  if (!sidecar) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(out).parent_path(), ec);
    if (ec)
      throw Error(ErrorCode::io, out, "", "cannot create the index cache directory: " +
                                              ec.message());
  }
  write_gzidx_file(out, index, key);
}

}  // namespace voxpipe::gz
