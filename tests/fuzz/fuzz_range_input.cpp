// core::RangeInput (what every object on S3, GCS, Azure or HTTP is read through) over a fake
// byte source whose answers the fuzzer writes: each answer to a requested range is exact, short,
// longer than the range, empty or an error, and a call may return one buffer too few or too
// many, as a misbehaving server and client would. The reads, prefetches and read-aheads are the
// fuzzer's too, over an object of its chosen size, with cache options of its choosing.
//
// Input: 12 bytes of setup (object size, bytes held from the first response, min_request,
// coalesce_gap, part_size, max_cached_bytes: 2 bytes each, little-endian), then operations of
// 5 bytes (kind, offset, length); what follows a '|' byte at an operation's start is the answer
// script, one byte per range answered (used in turn, then every answer exact).
//
// Must hold: every failure is a voxpipe::Error; a read that returns gives exactly
// min(length, size - offset) bytes, each the object's (an answer of the wrong length never
// reaches a read, and a failed read leaves nothing behind that a later read would return);
// AddressSanitizer sees every answer as a heap buffer of its own, freed with its owner, so a span
// kept past its owner is caught; read_ahead's threads end (no hang) once their parts are in.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "core/range_input.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/remote.hpp"

namespace {

using voxpipe::ByteRange;
using voxpipe::FetchedBytes;

std::byte object_byte(std::uint64_t i) {
  return static_cast<std::byte>((i * 2654435761u) >> 13);
}

// The fake server: its object and the fuzzer's answer script, shared with read_ahead's threads
// (which may outlive one call of the harness until joined below).
struct Source {
  std::uint64_t size = 0;
  std::vector<std::uint8_t> script;
  std::size_t next = 0;
  std::mutex mutex;

  std::uint8_t take() {
    std::lock_guard lock(mutex);
    return next < script.size() ? script[next++] : 0;
  }

  static FetchedBytes answer(std::uint64_t offset, std::uint64_t n) {
    auto buf = std::make_shared<std::vector<std::byte>>(n);
    for (std::uint64_t i = 0; i < n; ++i) (*buf)[i] = object_byte(offset + i);
    return {std::span<const std::byte>(*buf), buf};
  }

  std::vector<FetchedBytes> fetch(std::span<const ByteRange> ranges) {
    for (const ByteRange& r : ranges)  // the core asks for bytes of the object only
      if (r.size == 0 || r.offset + r.size > size || r.offset + r.size < r.offset) std::abort();
    std::vector<FetchedBytes> out;
    for (const ByteRange& r : ranges) {
      const std::uint8_t a = take();
      switch (a % 8) {
        case 1:  // short: the connection dropped
          out.push_back(answer(r.offset, r.size - std::min<std::uint64_t>(r.size, 1 + a / 8)));
          break;
        case 2:  // longer: the range ignored, or a body running on
          out.push_back(answer(r.offset, r.size + 1 + a / 8));
          break;
        case 3:
          out.push_back({});
          break;
        case 4:
          throw voxpipe::Error(voxpipe::ErrorCode::io, "fake://object", "", "injected");
        case 5:  // one buffer too few for the call
          return out;
        case 6:  // one too many
          out.push_back(answer(r.offset, r.size));
          out.push_back(answer(r.offset, r.size));
          break;
        default:
          out.push_back(answer(r.offset, r.size));
      }
    }
    return out;
  }
};

std::uint64_t u16(const std::uint8_t* p) { return p[0] | (std::uint64_t{p[1]} << 8); }

void check_read(const voxpipe::core::RangeInput& in, std::uint64_t size, std::uint64_t offset,
                std::uint64_t length) {
  std::vector<std::byte> dst(length, std::byte{0xEE});
  std::size_t n;
  try {
    n = in.read_at(offset, dst);
  } catch (const voxpipe::Error&) {
    return;
  }
  const std::uint64_t want = offset >= size ? 0 : std::min(length, size - offset);
  if (n != want) std::abort();
  for (std::uint64_t i = 0; i < n; ++i)
    if (dst[i] != object_byte(offset + i)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 12) return 0;
  auto source = std::make_shared<Source>();
  source->size = u16(data) + 1;
  const std::uint64_t held = std::min(u16(data + 2), source->size);
  voxpipe::RemoteInputOptions options;
  options.min_request = u16(data + 4) % 8192 + 1;
  options.coalesce_gap = u16(data + 6) % 8192;
  options.part_size = u16(data + 8) % 8192 + 1;
  options.max_cached_bytes = u16(data + 10);
  const std::uint8_t* ops = data + 12;
  std::size_t nops = 0;
  while (12 + (nops + 1) * 5 <= size && ops[nops * 5] != '|') ++nops;
  const std::uint8_t* script = ops + nops * 5;
  const std::uint8_t* end = data + size;
  if (script < end) source->script.assign(script + 1, end);

  std::weak_ptr<voxpipe::core::RangeInput> alive;
  {
    std::shared_ptr<Source> s = source;
    voxpipe::RangeFetcher fetcher = [s](std::span<const ByteRange> r) { return s->fetch(r); };
    std::shared_ptr<voxpipe::core::RangeInput> in;
    try {
      in = std::make_shared<voxpipe::core::RangeInput>(
          "fake://object", source->size, fetcher, Source::answer(0, held), options, "\"etag\"");
    } catch (const voxpipe::Error&) {
      return 0;
    }
    alive = in;
    for (std::size_t k = 0; k < nops; ++k) {
      const std::uint8_t* op = ops + k * 5;
      const std::uint64_t offset = u16(op + 1), length = u16(op + 3) % 16384;
      const ByteRange ranges[2] = {{offset, length}, {offset + length + op[0], length / 2 + 1}};
      try {
        switch (op[0] % 4) {
          case 0:
          case 1:
            check_read(*in, source->size, offset, length);
            break;
          case 2:
            in->prefetch(ranges);
            break;
          default:
            in->read_ahead(ranges);  // errors reach the reads of the parts
        }
      } catch (const voxpipe::Error&) {
      }
    }
    // Whatever is cached now must read back as the object's bytes (or fail as an Error).
    check_read(*in, source->size, 0, source->size);
  }
  // read_ahead's threads hold the input until their parts are in: wait for them, so that no
  // thread of this input runs into the next.
  while (!alive.expired()) std::this_thread::yield();
  return 0;
}
