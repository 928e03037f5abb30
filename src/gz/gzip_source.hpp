// The uncompressed content of a .gz file as a ByteSource, read by the fastest engine its layout
// allows: members that announce their sizes (members.hpp) are inflated in parallel and at
// random; a file with a seek index (seek_index.hpp) is inflated from the nearest points, in
// parallel between points; any other gzip is inflated in parallel by speculative decoding
// (parallel_inflate.hpp) for ranges that make up at least half of what must be inflated to
// reach them (whole images), and front to back (GzipByteSource, which keeps its position
// between reads) for later ranges, small reads and on one thread, with the consumer's work
// overlapped on a second pool thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/file.hpp"
#include "gz/gzip_reader.hpp"
#include "gz/members.hpp"
#include "gz/seek_index.hpp"

namespace voxpipe::gz {

struct GzipSourceOptions {
  // A seek index for a file without sized members: when `index_path` is set, that GZIDX file
  // (load_index: a stale one is Error(invalid_argument)); otherwise, when `find_index`, a valid
  // sidecar or cache entry if there is one. Index files belong to files (their key is the
  // file's size, mtime and tail): other inputs find none, and an `index_path` for one is
  // Error(invalid_argument), except for an object read by ranges (RandomAccessInput::fetches),
  // whose index is checked against its size and tail (load_index for inputs) and used even
  // when its members announce their sizes (it finds them without a request per member).
  std::string index_path;
  bool find_index = true;
  // For an object read by ranges: its index read by ranges from this other object (its sidecar,
  // load_index with an index input), in place of index_path.
  std::shared_ptr<const core::RandomAccessInput> index_input;
};

class GzipSource final : public core::ByteSource {
 public:
  // Throws Error(format) when the file is not gzip, the errors of read_member_table, and those
  // of load_index for an explicit index.
  explicit GzipSource(const std::string& path, const GzipSourceOptions& options = {});
  // The same over stored bytes it shares (a file, a buffer in memory).
  explicit GzipSource(std::shared_ptr<const core::RandomAccessInput> input,
                      const GzipSourceOptions& options = {});
  ~GzipSource() override;

  // Thread-safe for sized-member files (random_access()); otherwise sequential, as
  // GzipByteSource.
  std::size_t read_at(std::uint64_t offset, std::span<std::byte> dst) override;
  void read_range(std::uint64_t begin, std::uint64_t end, unsigned threads,
                  const core::ByteSink& sink) override;
  bool prefers_read_range() const noexcept override { return true; }
  bool random_access() const noexcept override { return members_ || index_; }
  const std::string& path() const noexcept override { return file_.path(); }

  // The member table when the file is in a sized-member layout.
  const std::optional<std::vector<Member>>& members() const noexcept { return members_; }
  // The seek index in use, if any.
  const std::optional<SeekIndex>& index() const noexcept { return index_; }

 private:
  // Below this compressed size a file inflates on one thread in less time than the parallel
  // engine spends finding block starts and resolving windows.
  static constexpr std::uint64_t kMinParallelCompressed = 2u << 20;
  // Compressed spans of an object larger than this are read ahead rather than fetched first.
  static constexpr std::uint64_t kReadAheadAbove = 16u << 20;
  void inflate_parallel_range(std::uint64_t begin, std::uint64_t end, unsigned threads,
                              const core::ByteSink& sink);
  void read_indexed_range(std::uint64_t begin, std::uint64_t end, unsigned threads,
                          const core::ByteSink& sink);
  // For stored bytes that cost a request per read: fetches the compressed bytes that inflating
  // [begin, end) reads (the members, or the span between seek points; the whole file for a plain
  // stream), coalesced and concurrently, before the decoders ask for them in pieces.
  void prefetch_compressed(std::uint64_t begin, std::uint64_t end) const;

  std::shared_ptr<const core::RandomAccessInput> input_;
  const core::RandomAccessInput& file_;  // *input_
  std::optional<std::vector<Member>> members_;
  std::optional<SeekIndex> index_;
  std::unique_ptr<GzipByteSource> sequential_;  // plain gzip without an index only
  // Index reads: consecutive read_range calls chain their members' CRC32 checks.
  std::mutex chain_mutex_;
  RangeChain chain_;
  // Random access: the last span (a member, or the bytes between two seek points) inflated by
  // read_at, for runs of small reads inside it.
  std::mutex cache_mutex_;
  std::uint64_t cache_begin_ = 0, cache_end_ = 0;
  std::vector<std::byte> cache_;
};

// Delivers [begin, end) of a sequential `source` to `sink`, inflating on the calling thread while
// a second pool thread runs the sink on the pieces already produced. When no second thread is
// free, the calling thread runs the sink itself: it never waits on work nobody is doing.
void pipelined_read_range(core::ByteSource& source, std::uint64_t begin, std::uint64_t end,
                          unsigned threads, const core::ByteSink& sink);

}  // namespace voxpipe::gz
