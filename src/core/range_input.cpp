#include "core/range_input.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <iterator>
#include <thread>
#include <utility>

#include "voxpipe/error.hpp"

namespace voxpipe::core {

// One read_ahead call: its parts in order, the next to request, and the bytes of its requested
// parts that no read has reached yet (its window).
struct RangeInput::AheadJob {
  std::vector<ByteRange> parts;
  std::size_t next = 0;
  std::uint64_t unread = 0;
};

RangeInput::RangeInput(std::string name, std::uint64_t size, RangeFetcher fetch,
                       FetchedBytes initial, const RemoteInputOptions& options, std::string version)
    : name_(std::move(name)),
      version_(std::move(version)),
      size_(size),
      fetch_(std::move(fetch)),
      options_(options) {
  if (!fetch_) throw Error(ErrorCode::invalid_argument, name_, "fetcher", "expected a fetcher");
  if (options_.part_size == 0)
    throw Error(ErrorCode::invalid_argument, name_, "part_size", "expected a part size above 0");
  if (!initial.bytes.empty()) {
    if (initial.bytes.size() > size_) initial.bytes = initial.bytes.first(size_);
    std::lock_guard lock(mutex_);
    insert_locked(0, initial);
    streams_[0] = {initial.bytes.size(), initial.bytes.size(), 0};
  }
}

RemoteInputStats RangeInput::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

std::vector<FetchedBytes> RangeInput::fetch(std::span<const ByteRange> ranges) const {
  std::vector<FetchedBytes> got = fetch_(ranges);
  if (got.size() != ranges.size())
    throw Error(ErrorCode::io, name_, "", "expected " + std::to_string(ranges.size()) +
                                              " ranges from the fetcher, but received " +
                                              std::to_string(got.size()));
  std::uint64_t bytes = 0;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    // Each answer must be the range asked for, whole: a longer one is not "the range and
    // more" but an answer to another question (a server that ignored the range, another
    // version), so it is refused, never cut to size.
    if (got[i].bytes.size() != ranges[i].size)
      throw Error(got[i].bytes.size() < ranges[i].size ? ErrorCode::truncated : ErrorCode::io,
                  name_, "",
                  "expected " + std::to_string(ranges[i].size) + " bytes from byte " +
                      std::to_string(ranges[i].offset) + ", but the response held " +
                      std::to_string(got[i].bytes.size()),
                  ranges[i].offset);
    bytes += ranges[i].size;
  }
  std::lock_guard lock(mutex_);
  stats_.requests += ranges.size();
  stats_.bytes += bytes;
  return got;
}

std::vector<ByteRange> RangeInput::gaps_locked(std::uint64_t begin, std::uint64_t end) const {
  std::vector<ByteRange> gaps;
  std::uint64_t pos = begin;
  auto it = extents_.upper_bound(pos);
  if (it != extents_.begin()) {
    auto prev = std::prev(it);
    if (prev->second->end() > pos) pos = prev->second->end();
  }
  for (; pos < end; ++it) {
    if (it == extents_.end() || it->first >= end) {
      gaps.push_back({pos, end - pos});
      break;
    }
    if (it->first > pos) gaps.push_back({pos, it->first - pos});
    pos = std::max(pos, it->second->end());
  }
  return gaps;
}

void RangeInput::insert_locked(std::uint64_t begin, const FetchedBytes& fetched) const {
  const std::uint64_t end = begin + fetched.bytes.size();
  for (const ByteRange& g : gaps_locked(begin, end)) {
    auto e = std::make_shared<Extent>();
    e->begin = g.offset;
    e->length = g.size;
    e->bytes = fetched.bytes.subspan(g.offset - begin, g.size);
    e->owner = fetched.owner;
    e->used = clock_;
    extents_.emplace(g.offset, std::move(e));
    cached_bytes_ += g.size;
  }
}

void RangeInput::evict_locked(std::uint64_t keep_from_clock) const {
  // read_ahead's parts no read has reached yet are on top of the bound (their window bounds
  // them), and never evicted: only the rest is held to max_cached_bytes, and scanned for
  // eviction only when it exceeds it (not once per part a read-ahead takes).
  auto over = [&] { return cached_bytes_ - unreached_bytes_ > options_.max_cached_bytes; };
  if (!over()) return;
  // Least recently used first (ties: lowest offset first), in one sort: a cache of many small
  // extents is not scanned once per extent evicted.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> order;  // (used, begin)
  for (const auto& [begin, e] : extents_)
    if (!e->pending && !e->ahead && e->used < keep_from_clock) order.emplace_back(e->used, begin);
  std::sort(order.begin(), order.end());
  for (const auto& [used, begin] : order) {
    if (!over()) return;
    auto it = extents_.find(begin);
    cached_bytes_ -= it->second->length;
    extents_.erase(it);
  }
}

std::size_t RangeInput::read_at(std::uint64_t offset, std::span<std::byte> dst) const {
  if (offset >= size_ || dst.empty()) return 0;
  const std::uint64_t n = std::min<std::uint64_t>(dst.size(), size_ - offset);
  const std::uint64_t end = offset + n;
  std::vector<ExtentPtr> found;
  std::vector<ExtentPtr> ready;  // found less those pending: what this read copies from
  std::vector<ByteRange> requests;
  {
    std::unique_lock lock(mutex_);
    const std::uint64_t now = ++clock_;
    auto collect = [&] {
      found.clear();
      auto it = extents_.upper_bound(offset);
      if (it != extents_.begin()) --it;
      for (; it != extents_.end() && it->first < end; ++it)
        if (it->second->end() > offset) found.push_back(it->second);
    };
    // Parts read_ahead is still fetching in the read's range: wait for them, once. While the lock
    // was released, more bytes may have been cached in the range (read_ahead's next parts, other
    // reads' misses), so the extents are taken again; any of those still pending is not waited
    // for (a read would chase a read-ahead through its range, one round of parts at a time): its
    // bytes are fetched by this read as a gap.
    collect();
    if (std::any_of(found.begin(), found.end(), [](const ExtentPtr& e) { return e->pending; })) {
      const std::vector<ExtentPtr> waited = found;
      arrived_.wait(lock, [&] {
        return std::none_of(waited.begin(), waited.end(),
                            [](const ExtentPtr& e) { return e->pending; });
      });
      collect();
    }
    for (const ExtentPtr& e : found) {
      if (e->pending) continue;
      if (e->error) {
        // A part read_ahead failed to fetch: this read fails with its error, and the part is
        // forgotten, so that a later read fetches the bytes itself.
        auto at = extents_.find(e->begin);
        if (at != extents_.end() && at->second == e) {
          extents_.erase(at);
          cached_bytes_ -= e->length;
        }
        if (e->ahead) {
          e->ahead->unread -= e->length;
          unreached_bytes_ -= e->length;
          e->ahead.reset();
        }
        // Thrown as a copy made here, under the lock: the part's own exception object may be
        // released last on its worker's thread, which then must not race this thread's reads of it.
        try {
          std::rethrow_exception(e->error);
        } catch (const Error& error) {
          throw Error(error);
        }
      }
    }
    for (const ExtentPtr& e : found) {
      e->used = now;  // reached (one still pending becomes evictable once it arrives)
      if (!e->pending) ready.push_back(e);
    }
    // The gaps: what no ready extent holds (found is in offset order, extents do not overlap).
    std::vector<ByteRange> gaps;
    std::uint64_t pos = offset;
    for (const ExtentPtr& e : ready) {
      if (e->begin > pos) gaps.push_back({pos, e->begin - pos});
      pos = std::max(pos, e->end());
    }
    if (pos < end) gaps.push_back({pos, end - pos});
    for (const ByteRange& g : gaps) {
      auto next = extents_.lower_bound(g.offset + g.size);
      const std::uint64_t limit = next == extents_.end() ? size_ : next->first;
      const std::uint64_t want = miss_request_locked(g.offset);
      const std::uint64_t req_end = std::min(std::max(g.offset + g.size, g.offset + want), limit);
      requests.push_back({g.offset, req_end - g.offset});
      continue_stream_locked(g.offset, req_end);
    }
    // Parts read_ahead requested, reached: their windows move on (after the gaps are taken:
    // the parts requested now are not this read's).
    bool reached = false;
    for (const ExtentPtr& e : found)
      if (e->ahead) {
        e->ahead->unread -= e->length;
        unreached_bytes_ -= e->length;
        e->ahead.reset();
        reached = true;
      }
    if (reached) pump_locked();
  }
  auto copy = [&](std::uint64_t begin, std::span<const std::byte> bytes) {
    const std::uint64_t lo = std::max(offset, begin), hi = std::min(end, begin + bytes.size());
    if (lo < hi) std::memcpy(dst.data() + (lo - offset), bytes.data() + (lo - begin), hi - lo);
  };
  for (const ExtentPtr& e : ready) copy(e->begin, e->bytes);
  if (!requests.empty()) {
    const std::vector<FetchedBytes> got = fetch(requests);
    for (std::size_t i = 0; i < requests.size(); ++i) copy(requests[i].offset, got[i].bytes);
    std::lock_guard lock(mutex_);
    const std::uint64_t now = ++clock_;
    for (std::size_t i = 0; i < requests.size(); ++i) insert_locked(requests[i].offset, got[i]);
    evict_locked(now);
  }
  return n;
}

std::uint64_t RangeInput::miss_request_locked(std::uint64_t offset) const {
  // A miss where a stream's last one ended continues a front-to-back read: twice its size.
  for (const Stream& st : streams_)
    if (st.end == offset)
      return std::max(options_.min_request, std::min(2 * st.size, options_.part_size));
  return options_.min_request;
}

void RangeInput::continue_stream_locked(std::uint64_t begin, std::uint64_t end) const {
  // The stream that ended at `begin` continues to `end`; else a new one replaces the least
  // recently grown.
  Stream* slot = nullptr;
  for (Stream& st : streams_)
    if (st.end == begin) {
      slot = &st;
      break;
    }
  if (!slot) {
    slot = &streams_[0];
    for (Stream& st : streams_) {
      if (st.end == UINT64_MAX) {  // an unused slot
        slot = &st;
        break;
      }
      if (st.used < slot->used) slot = &st;
    }
  }
  *slot = {end, end - begin, clock_};
}

std::vector<ByteRange> RangeInput::merge_ranges(std::span<const ByteRange> ranges) const {
  std::vector<ByteRange> wanted;
  for (const ByteRange& r : ranges) {
    if (r.offset >= size_ || r.size == 0) continue;
    wanted.push_back({r.offset, std::min(r.size, size_ - r.offset)});
  }
  if (wanted.empty()) return {};
  std::sort(wanted.begin(), wanted.end(),
            [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
  std::vector<ByteRange> merged{wanted.front()};
  for (std::size_t i = 1; i < wanted.size(); ++i) {
    ByteRange& last = merged.back();
    const std::uint64_t last_end = last.offset + last.size;
    if (wanted[i].offset <= last_end + options_.coalesce_gap)
      last.size = std::max(last_end, wanted[i].offset + wanted[i].size) - last.offset;
    else
      merged.push_back(wanted[i]);
  }
  return merged;
}

std::vector<ByteRange> RangeInput::plan_parts(std::span<const ByteRange> ranges) const {
  std::vector<ByteRange> parts;
  std::uint64_t budget = options_.max_cached_bytes;  // caller holds mutex_
  for (const ByteRange& m : merge_ranges(ranges)) {
    for (ByteRange g : gaps_locked(m.offset, m.offset + m.size)) {
      if (budget == 0) break;
      g.size = std::min(g.size, budget);
      budget -= g.size;
      for (std::uint64_t at = g.offset; at < g.offset + g.size; at += options_.part_size)
        parts.push_back({at, std::min(options_.part_size, g.offset + g.size - at)});
    }
  }
  return parts;
}

void RangeInput::prefetch(std::span<const ByteRange> ranges) const {
  std::vector<ByteRange> parts;
  {
    std::lock_guard lock(mutex_);
    parts = plan_parts(ranges);
  }
  if (parts.empty()) return;
  const std::vector<FetchedBytes> got = fetch(parts);
  std::lock_guard lock(mutex_);
  const std::uint64_t now = ++clock_;
  for (std::size_t i = 0; i < parts.size(); ++i) insert_locked(parts[i].offset, got[i]);
  evict_locked(now);
  // A read that continues past the prefetched bytes continues front to back.
  const ByteRange& last = parts.back();
  continue_stream_locked(last.offset + last.size - std::min(options_.part_size, last.size),
                         last.offset + last.size);
}

void RangeInput::read_ahead(std::span<const ByteRange> ranges) const {
  if (weak_from_this().expired()) {
    prefetch(ranges);
    return;
  }
  auto job = std::make_shared<AheadJob>();
  // Parts are planned here and requested as the window allows, each less what is cached then
  // (pump_locked): bytes a reader fetched itself meanwhile are not fetched again.
  for (const ByteRange& m : merge_ranges(ranges))
    for (std::uint64_t at = m.offset; at < m.offset + m.size; at += options_.part_size)
      job->parts.push_back({at, std::min(options_.part_size, m.offset + m.size - at)});
  if (job->parts.empty()) return;
  std::lock_guard lock(mutex_);
  // A read that continues past the read-ahead bytes continues front to back.
  const ByteRange& last = job->parts.back();
  continue_stream_locked(last.offset + last.size - std::min(options_.part_size, last.size),
                         last.offset + last.size);
  jobs_.push_back(std::move(job));
  pump_locked();
}

RangeInput::ExtentPtr RangeInput::take_locked() const {
  if (!queued_.empty()) {
    ExtentPtr e = std::move(queued_.front());
    queued_.erase(queued_.begin());
    return e;
  }
  const std::uint64_t window = std::max(options_.read_ahead_bytes, std::uint64_t{1});
  for (const std::shared_ptr<AheadJob>& job : jobs_) {
    while (job->next < job->parts.size()) {
      const ByteRange& part = job->parts[job->next];
      const std::vector<ByteRange> gaps = gaps_locked(part.offset, part.offset + part.size);
      std::uint64_t bytes = 0;
      for (const ByteRange& g : gaps) bytes += g.size;
      // A full window waits for a read to reach one of its parts (one part always goes).
      if (bytes > 0 && job->unread > 0 && job->unread + bytes > window) break;
      ++job->next;
      // The part's gaps become pending extents at once (reads wait for them), fetched in turn.
      for (const ByteRange& g : gaps) {
        auto e = std::make_shared<Extent>();
        e->begin = g.offset;
        e->length = g.size;
        e->pending = true;
        e->used = UINT64_MAX;  // not evicted before a read has reached it
        e->ahead = job;
        extents_.emplace(g.offset, e);
        cached_bytes_ += g.size;
        job->unread += g.size;
        unreached_bytes_ += g.size;
        queued_.push_back(std::move(e));
      }
      if (!queued_.empty()) {
        // The cache makes room for the parts requested (never for those no read has reached).
        evict_locked(++clock_);
        return take_locked();
      }
    }
  }
  std::erase_if(jobs_, [](const std::shared_ptr<AheadJob>& j) { return j->next == j->parts.size(); });
  return nullptr;
}

void RangeInput::pump_locked() const {
  std::shared_ptr<const RangeInput> self = weak_from_this().lock();
  if (!self) return;  // being destroyed: nothing more is requested
  // At most kReadAheadThreads workers, each fetching one part at a time and taking the next as
  // long as the windows allow: a thread per worker, not per part (parts may be small).
  while (workers_ < kReadAheadThreads) {
    ExtentPtr e = take_locked();
    if (!e) break;
    ++workers_;
    std::thread([self, e]() mutable { self->ahead_worker(std::move(e)); }).detach();
  }
}

void RangeInput::ahead_worker(ExtentPtr e) const {
  while (e) {
    const ByteRange range{e->begin, e->length};
    std::vector<FetchedBytes> got;
    std::exception_ptr error;
    try {
      got = fetch(std::span(&range, 1));
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      e->pending = false;
      if (error) {
        // The next read of the part rethrows the error and forgets the part (read_at); the rest
        // of its read-ahead is not requested (the reads fetch what they need).
        e->error = std::move(error);
        if (e->ahead) e->ahead->next = e->ahead->parts.size();
      } else {
        e->bytes = got[0].bytes;
        e->owner = std::move(got[0].owner);
      }
      e = take_locked();
      if (!e) --workers_;
    }
    arrived_.notify_all();
  }
}

}  // namespace voxpipe::core

namespace voxpipe {

RemoteInput::RemoteInput(std::string name, std::uint64_t size, RangeFetcher fetch,
                         FetchedBytes initial, const RemoteInputOptions& options,
                         std::string version)
    : input_(std::make_shared<core::RangeInput>(std::move(name), size, std::move(fetch),
                                                std::move(initial), options, std::move(version))) {}

RemoteInput::~RemoteInput() = default;

const std::string& RemoteInput::name() const noexcept { return input_->path(); }
std::uint64_t RemoteInput::size() const noexcept { return input_->size(); }
const std::string& RemoteInput::version() const noexcept { return input_->version(); }
RemoteInputStats RemoteInput::stats() const { return input_->stats(); }
void RemoteInput::prefetch(std::span<const ByteRange> ranges) const { input_->prefetch(ranges); }

namespace {
UrlHandlers& handlers_storage() {
  static UrlHandlers handlers;
  return handlers;
}
}  // namespace

void set_url_handlers(UrlHandlers handlers) { handlers_storage() = std::move(handlers); }
const UrlHandlers& url_handlers() noexcept { return handlers_storage(); }

bool is_object_url(const std::string& path) noexcept {
  const std::size_t sep = path.find("://");
  if (sep == std::string::npos || sep == 0 || sep > 8) return false;
  std::string scheme = path.substr(0, sep);
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* s : {"s3", "s3a", "gs", "az", "abfs", "abfss", "adl", "azure", "http", "https"})
    if (scheme == s) return true;
  return false;
}

bool is_zarr_path(const std::string& path) noexcept {
  std::string name = path.substr(0, path.find('?'));
  while (!name.empty() && name.back() == '/') name.pop_back();
  if (name.size() < 5) return false;
  std::string tail = name.substr(name.size() - 5);
  for (char& c : tail) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return tail == ".zarr";
}

}  // namespace voxpipe
