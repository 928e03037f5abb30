// An object held in memory and served through a RangeFetcher (voxpipe/remote.hpp) as an object
// store would serve it, recording the ranges of every call so that tests can assert the exact
// requests a reader makes, and misbehaving on request as stores and clients do: a body shorter
// than the range asked for, an error, the wrong number of buffers, a body longer than asked for.
// Each answer is a fresh heap buffer owned by its FetchedBytes, so that a reader that keeps a
// span past its owner's life is caught by AddressSanitizer.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "voxpipe/error.hpp"
#include "voxpipe/remote.hpp"

namespace vptest {

// {offset, size} of a requested range: pairs print readably in gtest's messages.
using Range = std::pair<std::uint64_t, std::uint64_t>;
using Call = std::vector<Range>;

class RecordingFetcher {
 public:
  enum class Fault {
    none,
    short_answer,  // the last range's body is one byte short
    error,         // throws voxpipe::Error(io) naming the object, as the Python fetcher does
    wrong_count,   // one buffer fewer than ranges
    long_answer,   // every body runs on to the object's end
  };

  explicit RecordingFetcher(std::vector<std::byte> object, std::string name = "s3://bucket/obj")
      : state_(std::make_shared<State>()) {
    state_->object = std::move(object);
    state_->name = std::move(name);
  }

  const std::string& name() const { return state_->name; }
  std::uint64_t size() const { return state_->object.size(); }
  const std::vector<std::byte>& object() const { return state_->object; }

  // The fetcher; it shares this recorder's state and may outlive it.
  voxpipe::RangeFetcher fetcher() const {
    std::shared_ptr<State> s = state_;
    return [s](std::span<const voxpipe::ByteRange> ranges) { return s->fetch(ranges); };
  }

  // The first `n` bytes as the response that told the size would hold them.
  voxpipe::FetchedBytes initial(std::size_t n) const {
    n = std::min(n, state_->object.size());
    auto buf = std::make_shared<std::vector<std::byte>>(state_->object.begin(),
                                                        state_->object.begin() + static_cast<std::ptrdiff_t>(n));
    return {std::span<const std::byte>(*buf), buf};
  }

  // The next call misbehaves as `f` says (once).
  void inject(Fault f) {
    std::lock_guard lock(state_->mutex);
    state_->fault = f;
  }

  std::vector<Call> calls() const {
    std::lock_guard lock(state_->mutex);
    return state_->calls;
  }
  // The calls since the last clear().
  void clear() {
    std::lock_guard lock(state_->mutex);
    state_->calls.clear();
  }
  // Every range of every call, in call order.
  std::vector<Range> ranges() const {
    std::vector<Range> out;
    for (const Call& c : calls()) out.insert(out.end(), c.begin(), c.end());
    return out;
  }

 private:
  struct State {
    std::vector<std::byte> object;
    std::string name;
    std::mutex mutex;
    std::vector<Call> calls;
    Fault fault = Fault::none;

    std::vector<voxpipe::FetchedBytes> fetch(std::span<const voxpipe::ByteRange> ranges) {
      Fault f;
      {
        std::lock_guard lock(mutex);
        Call call;
        for (const voxpipe::ByteRange& r : ranges) call.emplace_back(r.offset, r.size);
        calls.push_back(std::move(call));
        f = std::exchange(fault, Fault::none);
      }
      if (f == Fault::error)
        throw voxpipe::Error(voxpipe::ErrorCode::io, name, "", "HTTP 503 Slow Down");
      std::vector<voxpipe::FetchedBytes> out;
      for (const voxpipe::ByteRange& r : ranges) {
        const std::uint64_t begin = std::min<std::uint64_t>(r.offset, object.size());
        std::uint64_t end = std::min<std::uint64_t>(object.size(), r.offset + r.size);
        if (f == Fault::long_answer) end = object.size();
        auto buf = std::make_shared<std::vector<std::byte>>(object.begin() + static_cast<std::ptrdiff_t>(begin),
                                                            object.begin() + static_cast<std::ptrdiff_t>(end));
        out.push_back({std::span<const std::byte>(*buf), buf});
      }
      if (f == Fault::short_answer && !out.empty() && !out.back().bytes.empty())
        out.back().bytes = out.back().bytes.first(out.back().bytes.size() - 1);
      if (f == Fault::wrong_count && !out.empty()) out.pop_back();
      return out;
    }
  };
  std::shared_ptr<State> state_;
};

}  // namespace vptest
