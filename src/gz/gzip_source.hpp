// The uncompressed content of a .gz file as a ByteSource, read by the fastest engine its layout
// allows: members that announce their sizes (members.hpp) are inflated in parallel and at
// random; any other gzip is inflated front to back (GzipByteSource), with the consumer's work
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

namespace voxpipe::gz {

class GzipSource final : public core::ByteSource {
 public:
  // Throws Error(format) when the file is not gzip, and the errors of read_member_table.
  explicit GzipSource(const std::string& path);
  ~GzipSource() override;

  // Thread-safe for sized-member files (random_access()); otherwise sequential, as
  // GzipByteSource.
  std::size_t read_at(std::uint64_t offset, std::span<std::byte> dst) override;
  void read_range(std::uint64_t begin, std::uint64_t end, unsigned threads,
                  const core::ByteSink& sink) override;
  bool prefers_read_range() const noexcept override { return true; }
  bool random_access() const noexcept override { return members_.has_value(); }
  const std::string& path() const noexcept override { return file_.path(); }

  // The member table when the file is in a sized-member layout.
  const std::optional<std::vector<Member>>& members() const noexcept { return members_; }

 private:
  core::InputFile file_;
  std::optional<std::vector<Member>> members_;
  std::unique_ptr<GzipByteSource> sequential_;  // plain gzip only
  // Sized members: the last member inflated by read_at, for runs of small reads inside it.
  std::mutex cache_mutex_;
  std::size_t cached_member_ = SIZE_MAX;
  std::vector<std::byte> cache_;
};

// Delivers [begin, end) of a sequential `source` to `sink`, inflating on the calling thread while
// a second pool thread runs the sink on the pieces already produced. When no second thread is
// free, the calling thread runs the sink itself: it never waits on work nobody is doing.
void pipelined_read_range(core::ByteSource& source, std::uint64_t begin, std::uint64_t end,
                          unsigned threads, const core::ByteSink& sink);

}  // namespace voxpipe::gz
