// An object read through a RangeFetcher (voxpipe/remote.hpp) as a RandomAccessInput: what the
// readers and gzip engines read a NIfTI object on S3, GCS, Azure or HTTP from.
//
// Fetched bytes are kept as extents (the fetcher's buffers, not copied) in a cache bounded by
// RemoteInputOptions::max_cached_bytes, least recently used first out. A read copies from the
// extents it finds and fetches what it misses in one fetcher call: each gap grows to at least
// min_request bytes, and to twice the last miss of its stream (up to part_size) when it continues
// where that miss ended, so that a front-to-back decode makes few, growing requests. Up to
// kMissStreams such streams are followed at once: threads that each decode their own part of the
// object front to back (a parallel inflate, an index build's spans) each grow their own requests
// instead of resetting one another's. prefetch() fetches announced ranges, merged when at most
// coalesce_gap apart and split into part_size parts that the fetcher may fetch concurrently.
//
// read_ahead() plans the same parts but returns at once: background threads fetch them in order,
// one part per request, at most kReadAheadThreads at once, each part readable as soon as it has
// arrived (reads of a part still in flight wait for it), so that a decoder consumes the first
// parts while the next are fetched. The window is bounded: parts fetched or in flight that no
// read has reached yet hold at most read_ahead_bytes (at least one part); the next part is
// requested when a read reaches one of them, so an object of any size streams through
// read_ahead_bytes plus the cache, and a reader that stops leaves at most that much fetched.
// Each part is planned when it is requested, less what is cached then. Those threads share
// ownership of the input until their parts are in.
//
// Thread-safety: read_at, prefetch and read_ahead may be called from several threads at once.
// Two threads missing the same bytes at the same moment may both fetch them; the cache keeps one
// copy.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/file.hpp"
#include "voxpipe/remote.hpp"

namespace voxpipe::core {

class RangeInput final : public RandomAccessInput,
                         public std::enable_shared_from_this<RangeInput> {
 public:
  // Parts read_ahead fetches at once.
  static constexpr unsigned kReadAheadThreads = 8;
  // Front-to-back readers whose misses grow their requests independently.
  static constexpr unsigned kMissStreams = 16;

  RangeInput(std::string name, std::uint64_t size, RangeFetcher fetch, FetchedBytes initial,
             const RemoteInputOptions& options, std::string version = {});

  std::size_t read_at(std::uint64_t offset, std::span<std::byte> dst) const override;
  std::uint64_t size() const noexcept override { return size_; }
  const std::string& path() const noexcept override { return name_; }
  bool fetches() const noexcept override { return true; }
  void prefetch(std::span<const ByteRange> ranges) const override;
  // Needs the input owned by a shared_ptr (as RemoteInput owns it); otherwise as prefetch.
  void read_ahead(std::span<const ByteRange> ranges) const override;

  RemoteInputStats stats() const;
  // The version opened (an ETag), empty when unknown.
  const std::string& version() const noexcept { return version_; }

 private:
  struct AheadJob;
  struct Extent {
    std::uint64_t begin = 0;
    std::uint64_t length = 0;
    std::span<const std::byte> bytes;  // length bytes once arrived
    std::shared_ptr<const void> owner;
    std::uint64_t used = 0;  // clock of the last read or insertion
    // A part read_ahead is fetching: not yet readable; `error` when its fetch failed (the next
    // read of it rethrows the error and removes the part).
    bool pending = false;
    std::exception_ptr error;
    // The read_ahead whose window this part counts in until a read reaches it.
    std::shared_ptr<AheadJob> ahead;
    std::uint64_t end() const noexcept { return begin + length; }
  };
  using ExtentPtr = std::shared_ptr<Extent>;

  // Calls the fetcher for `ranges` (without the lock) and checks each answer's length.
  std::vector<FetchedBytes> fetch(std::span<const ByteRange> ranges) const;
  // Adds the parts of a fetched range the cache lacks, then evicts beyond the bound (never
  // what this call added). Caller holds mutex_.
  void insert_locked(std::uint64_t begin, const FetchedBytes& fetched) const;
  void evict_locked(std::uint64_t keep_from_clock) const;
  // The gaps of [begin, end) no extent covers. Caller holds mutex_.
  std::vector<ByteRange> gaps_locked(std::uint64_t begin, std::uint64_t end) const;
  // `ranges` within the object, sorted, merged when at most coalesce_gap apart.
  std::vector<ByteRange> merge_ranges(std::span<const ByteRange> ranges) const;
  // The parts prefetch fetches for `ranges`: merged, less what is cached, within the cache's
  // bound, split into part_size pieces. Caller holds mutex_.
  std::vector<ByteRange> plan_parts(std::span<const ByteRange> ranges) const;
  // The request size of a miss at `offset` (min_request, or twice the last request of the
  // stream that ended there, up to part_size), and the stream that a request [begin, end)
  // continues (or starts). Caller holds mutex_.
  std::uint64_t miss_request_locked(std::uint64_t offset) const;
  void continue_stream_locked(std::uint64_t begin, std::uint64_t end) const;
  // Starts workers (up to kReadAheadThreads) while read_ahead jobs have parts their windows
  // allow. Caller holds mutex_.
  void pump_locked() const;
  // The next pending extent a worker fetches: the rest of a part already taken, else the gaps of
  // the next part a window allows, made pending extents; null when none. Forgets the jobs with
  // nothing left to request. Caller holds mutex_.
  ExtentPtr take_locked() const;
  // A worker's loop: fetches `e`, stores its bytes (or error), takes the next, until none.
  void ahead_worker(ExtentPtr e) const;

  const std::string name_;
  const std::string version_;
  const std::uint64_t size_;
  const RangeFetcher fetch_;
  const RemoteInputOptions options_;

  mutable std::mutex mutex_;
  mutable std::condition_variable arrived_;  // a pending extent arrived or failed
  mutable std::map<std::uint64_t, ExtentPtr> extents_;  // by begin; never overlapping
  mutable std::uint64_t cached_bytes_ = 0;
  mutable std::uint64_t unreached_bytes_ = 0;  // of it, read_ahead's parts no read reached
  mutable std::uint64_t clock_ = 0;
  // Where the latest misses of up to kMissStreams readers ended, their sizes, and when each
  // stream last grew (the least recent is replaced by a new stream).
  struct Stream {
    std::uint64_t end = UINT64_MAX;
    std::uint64_t size = 0;
    std::uint64_t used = 0;
  };
  mutable Stream streams_[kMissStreams];
  mutable std::vector<std::shared_ptr<AheadJob>> jobs_;  // read_aheads with parts to request
  mutable std::vector<ExtentPtr> queued_;  // pending extents of parts taken, not yet fetched
  mutable unsigned workers_ = 0;           // threads fetching them (pump_locked)
  mutable RemoteInputStats stats_;
};

}  // namespace voxpipe::core
